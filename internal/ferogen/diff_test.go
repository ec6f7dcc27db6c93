package ferogen

import (
	"fmt"
	"strings"
	"testing"
)

// lineDiff returns a unified-style diff of two texts by lines ("-" for
// want's lines, "+" for got's), with three lines of context around each
// change, or "" when they are equal. The texts are small (a generated
// file), so a longest-common-subsequence table is fast enough.
func lineDiff(want, got string) string {
	if want == got {
		return ""
	}
	a, b := splitLines(want), splitLines(got)
	// lcs[i][j] is the length of the longest common subsequence of a[i:]
	// and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op     byte // ' ', '-' or '+'
		text   string
		ai, bi int // 1-based line numbers in want and got
	}
	var lines []line
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			lines = append(lines, line{' ', a[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			lines = append(lines, line{'-', a[i], i + 1, j + 1})
			i++
		default:
			lines = append(lines, line{'+', b[j], i + 1, j + 1})
			j++
		}
	}
	const context = 3
	var out strings.Builder
	for k := 0; k < len(lines); {
		if lines[k].op == ' ' {
			k++
			continue
		}
		// A hunk: from context lines before this change to context lines
		// after the last change within 2*context of the previous one.
		start, end := max(k-context, 0), k
		for end < len(lines) {
			next := end
			for next < len(lines) && lines[next].op == ' ' {
				next++
			}
			if next == len(lines) || next-end > 2*context {
				break
			}
			end = next + 1
			for end < len(lines) && lines[end].op != ' ' {
				end++
			}
		}
		end = min(end+context, len(lines))
		fmt.Fprintf(&out, "@@ want line %d, got line %d @@\n", lines[start].ai, lines[start].bi)
		for _, l := range lines[start:end] {
			out.WriteByte(l.op)
			out.WriteString(strings.TrimSuffix(l.text, "\n"))
			out.WriteByte('\n')
		}
		k = end
	}
	return out.String()
}

// splitLines splits s after each newline, with no empty last line.
func splitLines(s string) []string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func TestLineDiff(t *testing.T) {
	if d := lineDiff("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("equal texts: %q", d)
	}
	for _, c := range []struct{ want, got, diff string }{
		{"a\nb\nc\n", "a\nB\nc\nd\n", "@@ want line 1, got line 1 @@\n a\n-b\n+B\n c\n+d\n"},
		{"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n", "1\n2\nthree\n4\n5\n6\n7\n8\n9\n10\n11\n12\n13\n",
			"@@ want line 1, got line 1 @@\n 1\n 2\n-3\n+three\n 4\n 5\n 6\n@@ want line 10, got line 10 @@\n 10\n 11\n 12\n+13\n"},
		{"", "new\n", "@@ want line 1, got line 1 @@\n+new\n"},
	} {
		if d := lineDiff(c.want, c.got); d != c.diff {
			t.Errorf("lineDiff(%q, %q):\n%s\nwant:\n%s", c.want, c.got, d, c.diff)
		}
	}
}
