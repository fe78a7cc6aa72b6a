package shard

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

// live counts a member while its entry keeps changing, by the reader's
// own clock: a member whose clock is far off counts, one whose entry
// stopped changing does not after LeaseDuration, and is removed after
// 30 of them.
func TestMembersLive(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	m := newMembers(Config{Identity: "me", LeaseDuration: 10 * time.Second, Clock: clk})
	other := func(id, v string) (string, string) {
		o := newMembers(Config{Identity: id})
		return o.key(), id + " " + v
	}
	skewK, skewV := other("skewed", "1999-01-01T00:00:00Z") // a clock years behind
	deadK, deadV := other("dead", "t0")
	ann := map[string]string{m.key(): "me now", skewK: skewV, deadK: deadV, "unrelated": "x"}

	for _, step := range []struct {
		name    string
		advance time.Duration
		skewV   string
		want    []string
	}{
		{"first sight: both live", 0, skewV, []string{"me", "skewed", "dead"}},
		{"within the duration", 9 * time.Second, "skewed 2", []string{"me", "skewed", "dead"}},
		{"dead stopped changing", 2 * time.Second, "skewed 3", []string{"me", "skewed"}},
		{"skewed silent too", 11 * time.Second, "skewed 3", []string{"me"}},
	} {
		t.Run(step.name, func(t *testing.T) {
			clk.Step(step.advance)
			ann[skewK] = step.skewV
			assert.ElementsMatch(t, step.want, m.live(ann, clk.Now()))
		})
	}
	clk.Step(301 * time.Second)
	assert.Equal(t, []string{"me"}, m.live(ann, clk.Now()))
	assert.NotContains(t, ann, deadK, "removed once dead for 30 durations")
	assert.Contains(t, ann, "unrelated", "not a member entry: left alone")
	assert.Contains(t, ann, m.key(), "its own entry stays")
}
