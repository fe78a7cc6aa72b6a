package kit

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		d := make([]time.Duration, len(v))
		for i, x := range v {
			d[i] = time.Duration(x) * time.Millisecond
		}
		return d
	}
	for _, tc := range []struct {
		name string
		d    []time.Duration
		p    float64
		want time.Duration
	}{
		{"none", nil, 50, 0},
		{"one", ms(7), 99, 7 * time.Millisecond},
		{"median of odd, unsorted", ms(3, 1, 2), 50, 2 * time.Millisecond},
		{"median of even is the lower middle", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p99 of 100 is the 99th", ms(func() []int {
			v := make([]int, 100)
			for i := range v {
				v[i] = 100 - i
			}
			return v
		}()...), 99, 99 * time.Millisecond},
		{"p100 is the largest", ms(5, 9, 1), 100, 9 * time.Millisecond},
		{"p0 is the smallest", ms(5, 9, 1), 0, 1 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tc.d...)
			assert.Equal(t, tc.want, Percentile(tc.d, tc.p))
			assert.Equal(t, in, tc.d, "the input is not reordered")
		})
	}
	assert.Equal(t, 2*time.Millisecond, Median(ms(1, 2, 3)))
	assert.InDelta(t, 1.5, Ms(1500*time.Microsecond), 1e-9)
}

func TestTail(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{"fewer lines than n", "a\nb\n", 5, "a\nb"},
		{"last n", "a\nb\nc\nd\n", 2, "c\nd"},
		{"no trailing newline", "a\nb\nc", 1, "c"},
		{"empty", "", 3, ""},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, Tail(tc.in, tc.n)) })
	}
}

// FreePorts hands out n distinct ports, each free again once it returns.
func TestFreePorts(t *testing.T) {
	ports, err := FreePorts("127.0.0.1", 16)
	require.NoError(t, err)
	seen := map[int]bool{}
	for _, p := range ports {
		require.False(t, seen[p], "port %d handed out twice", p)
		seen[p] = true
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		require.NoError(t, err, "port %d is not free", p)
		require.NoError(t, l.Close())
	}
}
