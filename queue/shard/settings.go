package shard

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// DefaultLeaseName is the activator's Lease; a sharded activator's are
// LeaseName(DefaultLeaseName, i, n), the members Lease
// MembersLeaseName(DefaultLeaseName).
const DefaultLeaseName = "runplane-queue-activator"

// MaxShards bounds LeaderElection.Shards: each shard is a Lease and two
// consumers, and every replica reads each member Lease.
const MaxShards = 64

// MinLeaseDuration bounds LeaderElection.ShardLeaseDuration from below:
// renewals come every fifth of it, and API server latency must fit.
const MinLeaseDuration = 5 * time.Second

// LeaderElection is who runs runplane-queue's activator: the
// leaderElection section of its configuration file (queue/config embeds it
// as it is, queue.Config carries it), defaulted by Default and checked by
// Validate.
type LeaderElection struct {
	// LeaderElect: the activator runs only while holding the Lease
	// ResourceName, through the manager's leader election (needs
	// Kubernetes; nil: no, the configuration file defaults it to yes
	// unless it runs static pools).
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceName is the Lease (default DefaultLeaseName).
	ResourceName string `json:"resourceName,omitempty"`
	// Shards spreads the activator over the replicas: namespaces hashed
	// into this many shards, each run by the holder of the Lease
	// LeaseName(ResourceName, i, Shards), each replica campaigning for
	// about Shards/replicas of them (default 1: one activator, on the
	// Lease holder, for every namespace; at most MaxShards). Replicas of
	// two counts (a rolling change) never run at once: those of the count
	// not active on the members Lease wait. Every queue process of a
	// stream needs the same value; without leader election, one process
	// runs them all.
	Shards int `json:"shards,omitempty"`
	// ShardLeaseDuration is each shard Lease's duration with Shards above
	// 1 (default DefaultLeaseDuration: a SIGKILLed replica's shards move
	// within about 1.4× it; at least MinLeaseDuration); renewals every
	// fifth of it, given up after 70% of it (a run whose Lease or members
	// entry went unwritten that long stops at once). With one shard, the
	// members entry's timings (queue/README.md, "Changing S").
	ShardLeaseDuration metav1.Duration `json:"shardLeaseDuration,omitempty"`
}

// Default fills the zero fields but LeaderElect (whose default depends on
// the rest of the configuration).
func (l *LeaderElection) Default() {
	l.ResourceName = cmp.Or(l.ResourceName, DefaultLeaseName)
	l.Shards = cmp.Or(l.Shards, 1)
	l.ShardLeaseDuration.Duration = cmp.Or(l.ShardLeaseDuration.Duration, DefaultLeaseDuration)
}

// Validate refuses a defaulted l the activator cannot run with, each error
// naming its key below key (the section's).
func (l LeaderElection) Validate(key string) error {
	var errs []error
	if l.Shards < 1 || l.Shards > MaxShards {
		errs = append(errs, fmt.Errorf("%s.shards: %d: want 1 to %d", key, l.Shards, MaxShards))
	}
	if d := l.ShardLeaseDuration.Duration; d < MinLeaseDuration {
		errs = append(errs, fmt.Errorf("%s.shardLeaseDuration: %s: want at least %s (renewals every fifth of it)", key, d, MinLeaseDuration))
	}
	return errors.Join(errs...)
}

// Elect reports whether the activator runs under leader election.
func (l LeaderElection) Elect() bool { return ptr.Deref(l.LeaderElect, false) }
