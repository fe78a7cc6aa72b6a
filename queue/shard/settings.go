package shard

import (
	"cmp"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// LeaderElection's defaults and bound: a SIGKILLed replica's shards are
// taken within about DefaultLeaseDuration + 2 retry periods (11 s at most)
// plus the new owner's rebuild; each shard is a Lease and two consumers,
// and every replica reads each member.
const (
	DefaultLeaseName     = "runplane-queue-activator"
	DefaultLeaseDuration = 8 * time.Second
	MaxShards            = 64
)

// LeaderElection is who runs the queue's activator: the leaderElection
// section of runplane-queue's configuration file (queue/config embeds it;
// queue.Config and Config carry it as it is).
type LeaderElection struct {
	// LeaderElect: the activator runs only on the holder of the Lease
	// ResourceName (needs Kubernetes; nil: no, but the file defaults it to
	// yes without staticPools).
	LeaderElect *bool `json:"leaderElect,omitempty"`
	// ResourceName is the Lease (default DefaultLeaseName).
	ResourceName string `json:"resourceName,omitempty"`
	// Shards spreads the activator over the replicas (default 1, at most
	// MaxShards; the same in every queue process of a stream): Elector.
	Shards int `json:"shards,omitempty"`
	// ShardLeaseDuration is each shard Lease's (default
	// DefaultLeaseDuration, at least 5s: renewals every fifth of it); with
	// one shard, the members entry's timings (queue/README.md, "Changing S").
	ShardLeaseDuration metav1.Duration `json:"shardLeaseDuration,omitempty"`
}

// Default fills the zero fields but LeaderElect.
func (l *LeaderElection) Default() {
	l.ResourceName, l.Shards = cmp.Or(l.ResourceName, DefaultLeaseName), cmp.Or(l.Shards, 1)
	l.ShardLeaseDuration.Duration = cmp.Or(l.ShardLeaseDuration.Duration, DefaultLeaseDuration)
}

// Validate refuses a defaulted l, the error naming its key below key.
func (l LeaderElection) Validate(key string) error {
	if l.Shards < 1 || l.Shards > MaxShards {
		return fmt.Errorf("%s.shards: %d: want 1 to %d", key, l.Shards, MaxShards)
	}
	if d := l.ShardLeaseDuration.Duration; d < 5*time.Second {
		return fmt.Errorf("%s.shardLeaseDuration: %s: want at least 5s (renewals every fifth of it)", key, d)
	}
	return nil
}
