package kit

import "strings"

// Tail is the last n lines of s (a log dumped after a failure).
func Tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}
