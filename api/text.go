package api

import (
	"strconv"
	"strings"
	"unicode"
)

// HasControl reports whether s holds a control character (C0, DEL, C1):
// a terminal acts on them (ANSI escape sequences move the cursor, rewrite
// lines, set the window title), so free text a node reports about itself
// must not hold any.
func HasControl(s string) bool {
	return strings.IndexFunc(s, unicode.IsControl) >= 0
}

// EscapeControl writes s's control characters as Go escapes (\x1b, \n),
// leaving the rest as it is: for printing text that came from elsewhere to
// a terminal.
func EscapeControl(s string) string {
	if !HasControl(s) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if unicode.IsControl(r) {
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
