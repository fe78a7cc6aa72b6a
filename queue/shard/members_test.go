package shard

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
)

// entry is id's members annotation as a replica of shards writes it at v.
func entry(id string, shards int, v string) (string, string) {
	o := newMembers(Config{Identity: id})
	return o.key, fmt.Sprintf("%s %d %s", id, shards, v)
}

func ids(ms []member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.id
	}
	return out
}

// live counts a member while its entry keeps changing, by the reader's
// own clock: a member whose clock is far off counts, one whose entry
// stopped changing does not after LeaseDuration, and is removed after
// 30 of them.
func TestMembersLive(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := newMembers(Config{Identity: "me", LeaderElection: LeaderElection{Shards: 2, ShardLeaseDuration: metav1.Duration{Duration: 10 * time.Second}}, Clock: clk})
	skewK, skewV := entry("skewed", 2, "1999-01-01T00:00:00Z") // a clock years behind
	deadK, deadV := entry("dead", 2, "t0")
	ann := map[string]string{m.key: "me 2 now", skewK: skewV, deadK: deadV, "unrelated": "x"}

	for _, step := range []struct {
		name    string
		advance time.Duration
		skewV   string
		want    []string
	}{
		{"first sight: both live", 0, skewV, []string{"me", "skewed", "dead"}},
		{"within the duration", 9 * time.Second, "skewed 2 a", []string{"me", "skewed", "dead"}},
		{"dead stopped changing", 2 * time.Second, "skewed 2 b", []string{"me", "skewed"}},
		{"skewed silent too", 11 * time.Second, "skewed 2 b", []string{"me"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			clk.Step(step.advance)
			ann[skewK] = step.skewV
			assert.ElementsMatch(t, step.want, ids(m.live(ann, clk.Now())))
		})
	}
	clk.Step(301 * time.Second)
	assert.Equal(t, []string{"me"}, ids(m.live(ann, clk.Now())))
	assert.NotContains(t, ann, deadK, "removed once dead for 30 durations")
	assert.Contains(t, ann, "unrelated", "not a member entry: left alone")
	assert.Contains(t, ann, m.key, "its own entry stays")
}

// view: replicas of one shard count run shards at a time. The count named
// active runs while any of its replicas is live; a replica of another
// count waits, and makes its own count active (in the same
// compare-and-set) once none is left. A replica of the release before
// (its entry under the old prefix, its count unknown, its Leases named
// without a count) is always waited for: it never reads this release's
// entries.
func TestMembersViewOneShardCountAtATime(t *testing.T) {
	const lease = 10 * time.Second
	oldK, oldV := entry("old", 2, "t0")
	otherK, otherV := entry("waiting-4", 4, "t0")
	peerK, peerV := entry("peer", 3, "t0")
	legacyK := legacyPrefix + "0123456789abcdef"
	for _, tc := range []struct {
		name       string
		ann        map[string]string
		silent     bool // the others' entries stopped changing LeaseDuration ago
		wantActive string
		wantLive   []string
		wantWait   []string
	}{
		{name: "first replica: its count becomes active", ann: map[string]string{},
			wantActive: "3", wantLive: []string{"me"}},
		{name: "active count, a peer: both run", ann: map[string]string{activeKey: "3", peerK: peerV},
			wantActive: "3", wantLive: []string{"me", "peer"}},
		{name: "another count active and live: wait", ann: map[string]string{activeKey: "2", oldK: oldV, peerK: peerV},
			wantActive: "2", wantWait: []string{"old"}},
		{name: "another count active, its replicas gone: take over", ann: map[string]string{activeKey: "2", peerK: peerV},
			wantActive: "3", wantLive: []string{"me", "peer"}},
		{name: "another count active, its replicas silent: take over", ann: map[string]string{activeKey: "2", oldK: oldV}, silent: true,
			wantActive: "3", wantLive: []string{"me"}},
		{name: "active count runs, a third count waiting: not waited for", ann: map[string]string{activeKey: "3", otherK: otherV},
			wantActive: "3", wantLive: []string{"me"}},
		{name: "none active, another new count live: the first to write wins", ann: map[string]string{otherK: otherV},
			wantActive: "3", wantLive: []string{"me"}},
		{name: "a live replica of the release before: wait, even when active", ann: map[string]string{activeKey: "3", legacyK: "legacy-0 2026-01-01T00:00:00Z"},
			wantActive: "3", wantWait: []string{"legacy-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
			m := newMembers(Config{Identity: "me", LeaderElection: LeaderElection{Shards: 3, ShardLeaseDuration: metav1.Duration{Duration: lease}}, Clock: clk})
			if tc.silent {
				m.view(tc.ann, clk.Now())
				clk.Step(lease + time.Second)
			}
			v := m.view(tc.ann, clk.Now())
			assert.Equal(t, tc.wantActive, tc.ann[activeKey])
			assert.ElementsMatch(t, tc.wantLive, v.live)
			assert.ElementsMatch(t, tc.wantWait, ids(v.wait))
			if len(tc.wantWait) > 0 {
				require.Empty(t, v.live, "a waiting replica campaigns for nothing")
			}
		})
	}
}
