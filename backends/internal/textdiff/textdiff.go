// Package textdiff renders the unified diff that check mode shows for an
// edit of a text file: what a run would remove and add, with a little
// context, in the format operators read every day.
package textdiff

import (
	"fmt"
	"strings"
)

// context is the number of unchanged lines shown around a change.
const context = 3

// maxCells bounds the longest-common-subsequence table: past it (two
// differing regions of some thousands of lines each) the whole region is
// shown as removed and added, which is still a correct diff, only a
// longer one.
const maxCells = 4_000_000

type op struct {
	kind byte // ' ', '-' or '+'
	line string
}

// Unified returns a unified diff from old to new, labelled with name, or
// "" when they are equal.
func Unified(name, old, new string) string {
	if old == new {
		return ""
	}
	a, b := split(old), split(new)
	ops := script(a, b)
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", name, name)
	// Walk the script, emitting hunks: runs of changes with up to context
	// equal lines around them, merged when the gap between is small.
	ai, bi := 0, 0 // line numbers (0-based) at ops[i]
	i := 0
	for i < len(ops) {
		// Find the next change.
		j := i
		for j < len(ops) && ops[j].kind == ' ' {
			j++
		}
		if j == len(ops) {
			break
		}
		for ; i < j-context; i++ {
			ai++
			bi++
		}
		start := i
		sa, sb2 := ai, bi
		// Extend the hunk until context*2 equal lines in a row, or the end.
		end := j
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			k := end
			for k < len(ops) && ops[k].kind == ' ' {
				k++
			}
			if k == len(ops) || k-end > 2*context {
				end = min(end+context, len(ops))
				break
			}
			end = k
		}
		na, nb := 0, 0
		var body strings.Builder
		for _, o := range ops[start:end] {
			body.WriteByte(o.kind)
			body.WriteString(o.line)
			body.WriteByte('\n')
			if o.kind != '+' {
				na++
			}
			if o.kind != '-' {
				nb++
			}
		}
		fmt.Fprintf(&sb, "@@ -%s +%s @@\n", rng(sa, na), rng(sb2, nb))
		sb.WriteString(body.String())
		ai, bi, i = sa+na, sb2+nb, end
	}
	if !strings.HasSuffix(old, "\n") && old != "" || !strings.HasSuffix(new, "\n") && new != "" {
		sb.WriteString("\\ (a file without a final newline is shown with one)\n")
	}
	return sb.String()
}

func rng(start, n int) string {
	if n == 0 {
		return fmt.Sprintf("%d,0", start)
	}
	if n == 1 {
		return fmt.Sprintf("%d", start+1)
	}
	return fmt.Sprintf("%d,%d", start+1, n)
}

func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// script is the edit script from a to b: the common prefix and suffix as
// equal lines, and the middle by longest common subsequence.
func script(a, b []string) []op {
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	var ops []op
	for _, l := range a[:pre] {
		ops = append(ops, op{' ', l})
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	if len(ma)*len(mb) > maxCells {
		for _, l := range ma {
			ops = append(ops, op{'-', l})
		}
		for _, l := range mb {
			ops = append(ops, op{'+', l})
		}
	} else {
		ops = append(ops, lcs(ma, mb)...)
	}
	for _, l := range a[len(a)-suf:] {
		ops = append(ops, op{' ', l})
	}
	return ops
}

func lcs(a, b []string) []op {
	n, m := len(a), len(b)
	// t[i][j] is the LCS length of a[i:] and b[j:].
	t := make([][]int, n+1)
	for i := range t {
		t[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				t[i][j] = t[i+1][j+1] + 1
			} else {
				t[i][j] = max(t[i+1][j], t[i][j+1])
			}
		}
	}
	var ops []op
	i, j := 0, 0
	for i < n && j < m {
		switch {
		case a[i] == b[j]:
			ops = append(ops, op{' ', a[i]})
			i++
			j++
		case t[i+1][j] >= t[i][j+1]:
			ops = append(ops, op{'-', a[i]})
			i++
		default:
			ops = append(ops, op{'+', b[j]})
			j++
		}
	}
	for ; i < n; i++ {
		ops = append(ops, op{'-', a[i]})
	}
	for ; j < m; j++ {
		ops = append(ops, op{'+', b[j]})
	}
	return ops
}
