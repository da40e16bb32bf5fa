package api

import "testing"

func TestControlCharacters(t *testing.T) {
	tests := []struct {
		in, escaped string
		control     bool
	}{
		{"web-01.example", "web-01.example", false},
		{"héllo wörld", "héllo wörld", false},
		{"evil\x1b[2J\x1b]0;owned\x07", `evil\x1b[2J\x1b]0;owned\a`, true},
		{"two\nlines", `two\nlines`, true},
		{"c1\u009bq", `c1\u009bq`, true},
		{"del\x7f", `del\x7f`, true},
	}
	for _, tt := range tests {
		if got := HasControl(tt.in); got != tt.control {
			t.Errorf("HasControl(%q) = %v, want %v", tt.in, got, tt.control)
		}
		if got := EscapeControl(tt.in); got != tt.escaped {
			t.Errorf("EscapeControl(%q) = %q, want %q", tt.in, got, tt.escaped)
		}
	}
}
