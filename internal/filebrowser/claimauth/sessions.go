package claimauth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/utils/clock"

	"github.com/runplane/runplane/internal/tokencache"
)

// Browser sessions. The sign-in cookie holds a random session ID, never
// the token: browsers do not separate cookies by port, so on the
// documented `kubectl port-forward` path (localhost:8080) the cookie also
// goes to any other app forwarded to localhost (another tenant's notebook
// on localhost:7860). Such an app then learns an ID that means nothing
// outside this accessor's memory and dies with the session, not a
// credential for the API server.
//
// The store lives in the accessor process: the accessor runs one replica
// (controllers/accessor), and a restart signs every browser out.

const (
	// sessionTTL caps a session even for a token that lives longer.
	sessionTTL = time.Hour
	// sessionIDBytes of crypto/rand: not guessable.
	sessionIDBytes = 32
)

// sessions maps session IDs to the token each browser signed in with.
// Full, it forgets the least recently used session (that browser signs in
// again) rather than refusing a sign-in: only a token that passed the
// review can sign in, so no anonymous flood can evict anyone.
type sessions struct {
	clock clock.PassiveClock
	// ids: SHA-256 of the session ID → token.
	ids *cache.LRUExpireCache
}

func newSessions(size int, clk clock.PassiveClock) *sessions {
	if clk == nil {
		clk = clock.RealClock{}
	}
	return &sessions{clock: clk, ids: cache.NewLRUExpireCacheWithClock(size, clk)}
}

// start opens a session for token, ending at its exp claim or after
// sessionTTL, whichever comes first; it returns the session ID and its end.
func (s *sessions) start(token string) (string, time.Time, error) {
	b := make([]byte, sessionIDBytes)
	if _, err := rand.Read(b); err != nil {
		return "", time.Time{}, fmt.Errorf("session ID: %w", err)
	}
	id := base64.RawURLEncoding.EncodeToString(b)
	now := s.clock.Now()
	end := now.Add(sessionTTL)
	if exp := tokencache.JWTExpiry(token); !exp.IsZero() && exp.Before(end) {
		end = exp
	}
	if !end.After(now) {
		return "", time.Time{}, fmt.Errorf("the token has expired")
	}
	s.ids.Add(sha256.Sum256([]byte(id)), token, end.Sub(now))
	return id, end, nil
}

// token is the token of a live session.
func (s *sessions) token(id string) (string, bool) {
	if id == "" {
		return "", false
	}
	t, ok := s.ids.Get(sha256.Sum256([]byte(id)))
	if !ok {
		return "", false
	}
	return t.(string), true
}

// end forgets a session (sign-out).
func (s *sessions) end(id string) {
	s.ids.Remove(sha256.Sum256([]byte(id)))
}

// cookieName is per claim so that two accessors forwarded to localhost
// (whose cookies the browser does not separate by port) do not overwrite
// each other's session.
func cookieName(c Claim) string {
	sum := sha256.Sum256([]byte(c.Namespace + "/" + c.Name))
	return "runplane-accessor-" + hex.EncodeToString(sum[:4])
}
