package shard

import (
	"fmt"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    int
	}{{"one shard", 1}, {"no shard count", 0}, {"eight", 8}, {"sixty-four", 64}} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[int]bool{}
			for i := range 1000 {
				s := Of(fmt.Sprintf("team-%d", i), tc.n)
				require.GreaterOrEqual(t, s, 0)
				require.Less(t, s, max(tc.n, 1))
				assert.Equal(t, s, Of(fmt.Sprintf("team-%d", i), tc.n), "stable")
				seen[s] = true
			}
			assert.Len(t, seen, max(tc.n, 1), "1000 namespaces reach every shard")
		})
	}
}

func count(a []string) map[string]int {
	c := map[string]int{}
	for _, m := range a {
		c[m]++
	}
	return c
}

func TestAssignBalances(t *testing.T) {
	for _, tc := range []struct {
		shards  int
		members []string
		most    int
	}{
		{6, []string{"a", "b", "c"}, 2},
		{12, []string{"a", "b", "c"}, 4},
		{8, []string{"a", "b", "c"}, 3},
		{3, []string{"a"}, 3},
		{2, []string{"a", "b", "c"}, 1},
		{16, []string{"q-1", "q-2", "q-3", "q-4", "q-5"}, 4},
	} {
		t.Run(fmt.Sprintf("%d over %d", tc.shards, len(tc.members)), func(t *testing.T) {
			a := Assign(tc.shards, tc.members)
			require.Len(t, a, tc.shards)
			for s, m := range a {
				assert.Contains(t, tc.members, m, "shard %d has an owner", s)
			}
			c := count(a)
			for m, n := range c {
				assert.LessOrEqual(t, n, tc.most, "member %s", m)
			}
			if tc.shards >= len(tc.members) {
				assert.Len(t, c, len(tc.members), "every member holds a shard")
			}
			// The order members are listed in does not matter.
			rev := append([]string(nil), tc.members...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			assert.Equal(t, a, Assign(tc.shards, rev))
		})
	}
}

func TestAssignNoMembers(t *testing.T) {
	assert.Equal(t, []string{"", ""}, Assign(2, nil))
}

// A member leaving moves only what it held, plus what the bound then
// moves: far fewer than a modulo assignment would.
func TestAssignMovesLittle(t *testing.T) {
	const shards = 48
	before := Assign(shards, []string{"a", "b", "c", "d"})
	after := Assign(shards, []string{"a", "b", "c"})
	moved := 0
	for s := range shards {
		if before[s] != "d" && before[s] != after[s] {
			moved++
		}
	}
	assert.LessOrEqual(t, moved, shards/4, "shards of the members that stayed moved: %d", moved)
	for s := range shards {
		assert.NotEqual(t, "d", after[s])
	}
}

// Of is NATS's deterministic partitioning of the namespace token
// ({{partition(n, token)}} in a subject mapping or a stream's subject
// transform): a stream partitioned by subject puts a namespace's messages
// in the partition of the shard that owns it (queue/README.md, "100,000
// calls/s").
func TestOfIsNATSPartition(t *testing.T) {
	for _, n := range []int{2, 6, 64} {
		tr, err := server.NewSubjectTransform("invoke.*.*", fmt.Sprintf("{{partition(%d,1)}}", n))
		require.NoError(t, err)
		for i := range 500 {
			ns := fmt.Sprintf("team-%d", i)
			got, err := tr.Match("invoke." + ns + ".pool")
			require.NoError(t, err)
			assert.Equal(t, fmt.Sprint(Of(ns, n)), got, "namespace %s of %d", ns, n)
		}
	}
}
