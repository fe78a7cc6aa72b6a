// Package shard spreads the activator over the queue replicas: namespaces
// are hashed into a fixed number of shards, each shard is owned by whoever
// holds its Lease, and every replica campaigns only for the shards a
// bounded-load rendezvous assignment over the live replicas gives it, so a
// replica holds about shards/replicas of them and a change of replicas
// moves few. The pure parts (Of, Assign) are here; the Lease handling is
// the Elector (elector.go), the members Lease that lets one shard count run
// at a time (members.go), the Guard that holds the unsharded activator to it
// (guard.go) and their settings (settings.go): queue/README.md, "Sharded activator".
package shard

import (
	"hash/fnv"
	"slices"
	"strconv"
)

// Of is the shard of namespace ns among n shards (n < 2: 0). A pool's
// dispatch state lives with its namespace: per-namespace in-flight bounds
// and the namespace's budget stay with one owner.
func Of(ns string, n int) int {
	if n < 2 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(ns)) // a hash.Hash never fails to write
	return int(h.Sum32() % uint32(n))
}

// Assign gives each of n shards one of members (by identity; nil or empty:
// every shard ""): for each shard the member ranked highest by a
// rendezvous hash of (member, shard) that holds fewer than ceil(n/len)
// shards so far. Every replica computes the same answer from the same
// members; with n a multiple of the members each holds exactly n/len, and
// a member joining or leaving moves about the shards it takes or held.
func Assign(n int, members []string) []string {
	out := make([]string, n)
	ms := slices.Compact(slices.Sorted(slices.Values(members)))
	if len(ms) == 0 || n < 1 {
		return out
	}
	limit := (n + len(ms) - 1) / len(ms)
	load := make(map[string]int, len(ms))
	ranked := make([]string, len(ms))
	for s := range n {
		copy(ranked, ms)
		slices.SortStableFunc(ranked, func(a, b string) int {
			ra, rb := rank(a, s), rank(b, s)
			switch {
			case ra > rb:
				return -1
			case ra < rb:
				return 1
			}
			return 0
		})
		for _, m := range ranked {
			if load[m] < limit {
				out[s] = m
				load[m]++
				break
			}
		}
	}
	return out
}

// rank is member's rendezvous weight for shard s.
func rank(member string, s int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member + "/" + strconv.Itoa(s)))
	// FNV's last bytes mix poorly into the high bits: a final avalanche
	// (splitmix64's) keeps the ranks of neighbouring shards independent.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
