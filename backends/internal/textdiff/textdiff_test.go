package textdiff

import "testing"

func TestUnified(t *testing.T) {
	for _, tc := range []struct {
		name, old, new, want string
	}{
		{"equal", "a\nb\n", "a\nb\n", ""},
		{"append", "a\nb\n", "a\nb\nc\n", "--- f\n+++ f\n@@ -1,2 +1,3 @@\n a\n b\n+c\n"},
		{"replace middle", "1\n2\n3\n4\n5\n6\n7\n8\n9\n", "1\n2\n3\n4\nX\n6\n7\n8\n9\n",
			"--- f\n+++ f\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+X\n 6\n 7\n 8\n"},
		{"from empty", "", "a\n", "--- f\n+++ f\n@@ -0,0 +1 @@\n+a\n"},
		{"to empty", "a\n", "", "--- f\n+++ f\n@@ -1 +0,0 @@\n-a\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "X\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\nY\n",
			"--- f\n+++ f\n@@ -1,4 +1,4 @@\n-1\n+X\n 2\n 3\n 4\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+Y\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Unified("f", tc.old, tc.new); got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}
