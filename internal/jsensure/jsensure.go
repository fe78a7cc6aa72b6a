// Package jsensure makes sure of a JetStream resource (a stream, a bucket)
// once per name and process, and recognises JetStream refusing to reserve
// the storage for one. The queue keeps a chunks stream and an object
// bucket per namespace, made the same way.
package jsensure

import (
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"k8s.io/utils/clock"
)

// RetryAfter is how long a failure to make sure of a resource is answered
// again without asking JetStream. A namespace without room would
// otherwise cost a CreateOrUpdate call at every worker's sign-in and every
// invocation of that namespace, each a request a tenant can repeat.
const RetryAfter = 5 * time.Second

// Cache remembers the resources made sure of, by name, and for RetryAfter
// each failure. The zero value is ready to use.
type Cache[T any] struct {
	// Clock times failures; the real clock when nil.
	Clock clock.PassiveClock
	// TTL, when set, bounds how long a success is remembered: a resource
	// someone else may remove (an account in nats-server's resolver) is
	// made sure of again after it.
	TTL time.Duration

	mu     sync.Mutex
	open   map[string]success[T]
	failed map[string]failure
}

type success[T any] struct {
	v  T
	at time.Time
}

type failure struct {
	err error
	at  time.Time
}

// Get returns name's resource, calling create the first time and again
// once a failure is RetryAfter old; until then the failure is the answer.
func (c *Cache[T]) Get(name string, create func() (T, error)) (T, error) {
	var zero T
	clk := c.Clock
	if clk == nil {
		clk = clock.RealClock{}
	}
	c.mu.Lock()
	got, ok := c.open[name]
	f, failed := c.failed[name]
	c.mu.Unlock()
	switch {
	case ok && (c.TTL <= 0 || clk.Since(got.at) < c.TTL):
		return got.v, nil
	case failed && clk.Since(f.at) < RetryAfter:
		return zero, f.err
	}
	v, err := create()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if c.failed == nil {
			c.failed = map[string]failure{}
		}
		c.failed[name] = failure{err, clk.Now()}
		return zero, err
	}
	delete(c.failed, name)
	if c.open == nil {
		c.open = map[string]success[T]{}
	}
	c.open[name] = success[T]{v, clk.Now()}
	return v, nil
}

// Forget drops what is remembered of name: the next Get creates it again.
func (c *Cache[T]) Forget(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, name)
	delete(c.failed, name)
}

// nats-server's JSInsufficientResourcesErr ("insufficient resources") and
// JSStorageResourcesExceededErr ("insufficient storage resources
// available"), a single server's answer to a stream whose MaxBytes cannot
// be reserved, and JSClusterNoPeersErrF, a cluster's ("no suitable peers
// for placement, insufficient storage"); nats.go names no constants for
// them.
const (
	errCodeInsufficientResources    jetstream.ErrorCode = 10023
	errCodeStorageResourcesExceeded jetstream.ErrorCode = 10047
	errCodeClusterNoPeers           jetstream.ErrorCode = 10005
)

// noPeerWithStorage is the reason nats-server's placement (selectPeerError)
// gives when no peer has room for a stream's MaxBytes.
const noPeerWithStorage = "insufficient storage"

// NoRoom reports whether err is JetStream refusing to create a stream (or
// a bucket, a stream underneath) because its storage, the server's
// max_file_store or the account's, has no room left to reserve its
// MaxBytes.
func NoRoom(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case errCodeInsufficientResources, errCodeStorageResourcesExceeded:
		return true
	case errCodeClusterNoPeers:
		// A cluster places a stream on peers with room for its MaxBytes and
		// answers JSClusterNoPeersErrF for every reason none fits (a peer
		// offline, tags, storage): the reasons are only in the
		// description, so it is read.
		return strings.Contains(apiErr.Description, noPeerWithStorage)
	}
	return false
}
