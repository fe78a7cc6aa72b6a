package tokencache

import (
	"crypto/sha256"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	clocktesting "k8s.io/utils/clock/testing"
)

func TestCache(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	clk := clocktesting.NewFakeClock(start)
	c := New[string](8, clk)
	c.Accept("ttl", "yes", time.Minute, time.Time{})
	c.Accept("expiring", "yes", time.Minute, start.Add(10*time.Second))
	c.Accept("expired", "yes", time.Minute, start.Add(-time.Second))
	c.Refuse("refused", "no", 5*time.Second)
	for i := range 1000 { // a flood of forged tokens evicts no accepted one
		c.Refuse(fmt.Sprint("forged-", i), "no", time.Hour)
	}
	get := func(token string) string {
		v, accepted, found := c.Get(token)
		return fmt.Sprintf("%s %t %t", v, accepted, found)
	}
	assert.Equal(t, []string{"yes true true", "yes true true", " false false", " false false"},
		[]string{get("ttl"), get("expiring"), get("expired"), get("refused")}, "the flood evicted the refusal")
	assert.Equal(t, []any{sha256.Sum256([]byte("ttl")), sha256.Sum256([]byte("expiring"))}, c.accepted.Keys(), "SHA-256 keys, never the token")
	assert.Len(t, c.refused.Keys(), 8, "bounded")
	clk.Step(11 * time.Second)
	assert.Equal(t, []string{"yes true true", " false false"}, []string{get("ttl"), get("expiring")}, "never past the token's expiry")
	clk.Step(time.Minute)
	assert.Equal(t, " false false", get("ttl"))
	c.Refuse("refused", "no", 5*time.Second)
	assert.Equal(t, "no false true", get("refused"))
	clk.Step(6 * time.Second)
	assert.Equal(t, " false false", get("refused"))
}
