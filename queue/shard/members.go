package shard

import (
	"context"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	coordv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// members keeps this replica's entry in the members Lease <Name>-members
// and reads the others': one object, updated by compare-and-set, so RBAC
// can name every Lease the queue may touch. Each replica's entry is an
// annotation members.runplane.io/<hash of its identity> = "<identity>
// <shard count> <its clock>", rewritten every RetryPeriod/2; an entry
// counts as live for LeaseDuration after this replica saw it change (by its
// own clock: no comparison of two machines' clocks).
//
// The members Lease is the one object replicas of every shard count share
// (the shards' Leases are named by the count): its annotation
// runplane.io/active-shards names the count whose replicas run shards. A
// replica of another count waits until no live replica of the active count
// is left, then makes its own count the active one in the same
// compare-and-set, so two counts never run at once (queue/README.md,
// "Changing the shard count").
type members struct {
	cfg Config
	// key is this replica's annotation (memberKey of its identity).
	key  string
	seen map[string]seenEntry
}

type seenEntry struct {
	value    string
	observed time.Time
}

const (
	// memberPrefix starts each member's annotation key.
	memberPrefix = "members.runplane.io/"
	// legacyPrefix started the entries of the release before shard counts
	// were in the Leases' names ("<identity> <clock>"): those replicas run
	// shards whatever this one does, so a live one is always waited for.
	// They never read memberPrefix entries, so they never hand a shard to
	// this release's replicas.
	legacyPrefix = "m.runplane.io/"
	// activeKey names the shard count whose replicas run shards.
	activeKey = "runplane.io/active-shards"
)

// member is one live entry: shards 0 for a replica of the release before
// (count unknown).
type member struct {
	id     string
	shards int
}

func (m member) String() string {
	if m.shards == 0 {
		return m.id + " (a release without counted shards)"
	}
	return fmt.Sprintf("%s (%d shards)", m.id, m.shards)
}

// view is what a sync found: the live members of this replica's shard
// count (itself included) when its count is active, else the live
// replicas it waits for.
type view struct {
	live []string
	wait []member
}

func newMembers(cfg Config) *members {
	return &members{cfg: cfg, key: memberKey(cfg.Identity), seen: map[string]seenEntry{}}
}

// MembersLeaseName is the members Lease of the Elector named name.
func MembersLeaseName(name string) string { return name + "-members" }

// memberKey is identity's annotation on the members Lease (a hash: an
// annotation key of a fixed length, whatever the identity).
func memberKey(identity string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity)) // a hash.Hash never fails a Write
	return fmt.Sprintf("%s%016x", memberPrefix, h.Sum64())
}

// sync writes this replica's entry and returns what it saw.
func (m *members) sync(ctx context.Context) (view, error) {
	now := m.cfg.Clock.Now()
	var v view
	err := m.update(ctx, func(ann map[string]string) {
		ann[m.key] = fmt.Sprintf("%s %d %s", m.cfg.Identity, m.cfg.Shards, now.UTC().Format(time.RFC3339Nano))
		v = m.view(ann, now)
	})
	if err != nil {
		return view{}, err
	}
	return v, nil
}

// view decides from ann (which it may update: the active count, dead
// entries) whether this replica's count runs, and who with.
func (m *members) view(ann map[string]string, now time.Time) view {
	live := m.live(ann, now)
	active, err := strconv.Atoi(ann[activeKey])
	if err != nil {
		active = 0 // none yet (or unreadable): the first count to sync takes it
	}
	var v view
	for _, e := range live {
		if e.shards == 0 || (active != m.cfg.Shards && e.shards == active) {
			v.wait = append(v.wait, e)
		}
	}
	if len(v.wait) > 0 {
		return v
	}
	ann[activeKey] = strconv.Itoa(m.cfg.Shards)
	for _, e := range live {
		if e.shards == m.cfg.Shards {
			v.live = append(v.live, e.id)
		}
	}
	return v
}

// live reads the entries: the live ones (this one first); those dead for
// long (a SIGKILLed replica, its name never back) are removed from ann.
func (m *members) live(ann map[string]string, now time.Time) []member {
	live := []member{{id: m.cfg.Identity, shards: m.cfg.Shards}}
	seen := make(map[string]seenEntry, len(ann))
	for k, v := range ann {
		e, ok := parseMember(k, v)
		if !ok || k == m.key {
			continue
		}
		s, known := m.seen[k]
		if !known || s.value != v {
			s = seenEntry{value: v, observed: now}
		}
		switch age := now.Sub(s.observed); {
		case age <= m.cfg.ShardLeaseDuration.Duration:
			live = append(live, e)
		case age > 30*m.cfg.ShardLeaseDuration.Duration:
			delete(ann, k)
			continue
		}
		seen[k] = s
	}
	m.seen = seen
	return live
}

// parseMember reads the entry k=v; false when it is none.
func parseMember(k, v string) (member, bool) {
	switch {
	case strings.HasPrefix(k, memberPrefix):
		f := strings.Fields(v)
		if len(f) != 3 {
			return member{}, false
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 {
			return member{}, false
		}
		return member{id: f[0], shards: n}, true
	case strings.HasPrefix(k, legacyPrefix):
		id, _, ok := strings.Cut(v, " ")
		return member{id: id}, ok
	}
	return member{}, false
}

// update applies fn to the members Lease's annotations (made when
// missing), retrying on conflicts.
func (m *members) update(ctx context.Context, fn func(ann map[string]string)) error {
	leases := m.cfg.Leases.Leases(m.cfg.Namespace)
	name := MembersLeaseName(m.cfg.ResourceName)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: m.cfg.Namespace, Annotations: map[string]string{}}}
			fn(l.Annotations)
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(coordv1.Resource("leases"), name, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		fn(l.Annotations)
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("members Lease %s: %w", name, err)
	}
	return nil
}

// leave removes this replica's entry.
func (m *members) leave(ctx context.Context) error {
	return m.update(ctx, func(ann map[string]string) { delete(ann, m.key) })
}
