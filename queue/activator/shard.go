package activator

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/runplane/runplane/queue/pool"
	"github.com/runplane/runplane/queue/shard"
)

// Shard is the one shard of the namespaces an Activator owns (Count < 2:
// every namespace, the unsharded activator).
type Shard struct {
	Index, Count int
}

// Sharded reports whether s is one shard of several.
func (s Shard) Sharded() bool { return s.Count > 1 }

// Owns reports whether namespace ns is s's.
func (s Shard) Owns(ns string) bool { return !s.Sharded() || shard.Of(ns, s.Count) == s.Index }

// consumerPrefix names a shard's durable consumers: their acks are the
// shard's progress, resumed by whoever owns it next. The shard count is in
// the name: another count makes other consumers (which replay what is
// open), never a consumer whose acks belong to another partition.
func (s Shard) consumerPrefix(base string) string {
	if !s.Sharded() {
		return base
	}
	return base + "-" + strconv.Itoa(s.Index) + "of" + strconv.Itoa(s.Count)
}

// noNamespace is a subject token no namespace can be (a namespace is a
// DNS-1123 label): a shard with no namespace yet filters on it, since an
// empty filter would be every subject.
const noNamespace = "_"

// ownedPools is a pool.Source that shows only the shard's namespaces: the
// scaling, status, conflicts and policies of a sharded activator are its
// namespaces' only.
type ownedPools struct {
	pool.Source
	shard Shard
}

func (o ownedPools) Lookup(ns, name string) (pool.Pool, bool) {
	if !o.shard.Owns(ns) {
		return pool.Pool{}, false
	}
	return o.Source.Lookup(ns, name)
}

func (o ownedPools) List() []pool.Pool {
	return slices.DeleteFunc(o.Source.List(), func(p pool.Pool) bool { return !o.shard.Owns(p.Namespace) })
}

// OnChange forwards to the source's (watchPods rechecks Pods on it).
func (o ownedPools) OnChange(fn func()) (stop func() error, err error) {
	if n, ok := o.Source.(changeSource); ok {
		return n.OnChange(fn)
	}
	return func() error { return nil }, nil
}

// changeSource is a pool.Source that tells its changes (pool.Informer).
type changeSource interface {
	OnChange(fn func()) (stop func() error, err error)
}

// namespaces are the shard's namespaces its consumers filter on: those of
// its pools and of the open invocations it rebuilt (a pool may be gone
// while its invocations wait to expire), plus those of earlier filters
// (never dropped during a run: a namespace's messages may still come).
// Sorted; nil when unsharded.
func (a *Activator) namespaces() []string {
	if !a.cfg.Shard.Sharded() {
		return nil
	}
	set := map[string]bool{}
	for _, p := range a.cfg.Pools.List() {
		set[p.Namespace] = true
	}
	a.mu.Lock()
	for ns := range a.filtered {
		set[ns] = true
	}
	a.mu.Unlock()
	return slices.Sorted(func(yield func(string) bool) {
		for ns := range set {
			if !yield(ns) {
				return
			}
		}
	})
}

// keepFiltered adds to the shard's namespaces those its durable consumers
// already filter on: a previous owner's, whose informer may have known a
// pool this replica's does not yet. A consumer made again with fewer
// subjects would stop delivering their invocations, and the results stream
// (interest retention) would drop their results while no consumer wants
// them.
func (a *Activator) keepFiltered(ctx context.Context) error {
	if !a.cfg.Shard.Sharded() {
		return nil
	}
	st := a.cfg.Store
	prefix := a.cfg.Shard.consumerPrefix(a.cfg.ConsumerPrefix)
	for _, c := range []struct{ stream, name, kind string }{{st.Config.Stream, "invoke", "invoke"}, {st.Config.ResultsStream, "results", "result"}} {
		cons, err := st.JS.Consumer(ctx, c.stream, prefix+"-"+c.name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read consumer %s-%s: %w", prefix, c.name, err)
		}
		cfg := cons.CachedInfo().Config
		a.mu.Lock()
		for _, f := range append(cfg.FilterSubjects, cfg.FilterSubject) {
			rest, ok := strings.CutPrefix(f, st.Subjects.Prefix+"."+c.kind+".")
			ns, _, _ := strings.Cut(rest, ".")
			if ok && ns != noNamespace && ns != "" && ns != "*" && a.cfg.Shard.Owns(ns) {
				a.filtered[ns] = true
			}
		}
		a.mu.Unlock()
	}
	return nil
}

// filters are the subjects of kind ("invoke", "result") a consumer of
// this activator reads for namespaces nss.
func (a *Activator) filters(kind string, nss []string) []string {
	subj := a.cfg.Store.Subjects
	of := subj.Invoke
	if kind == "result" {
		of = subj.Result
	}
	if !a.cfg.Shard.Sharded() {
		return []string{of("*", "*")}
	}
	if len(nss) == 0 {
		return []string{of(noNamespace, "*")}
	}
	out := make([]string, len(nss))
	for i, ns := range nss {
		out[i] = of(ns, "*")
	}
	return out
}

// refilter widens the consumers to the namespaces of the shard that are
// new since they were made. The results consumer is updated in place: no
// result of a namespace exists before its first dispatch, which only
// follows its invocation's consumption. The invoke consumer is made again,
// delivering from the start: an invocation the ingress stored before this
// replica's informer showed its namespace's pool would otherwise stay
// below the consumer's delivered sequence for ever. The replay costs an
// ack for each invocation open in the shard (known: acked; stale: its
// Record is read, as at a takeover).
func (a *Activator) refilter(ctx context.Context, c *consumers) error {
	nss := a.namespaces()
	if slices.Equal(nss, c.nss) {
		return nil
	}
	a.cfg.Logger.Info("shard namespaces changed; widening the consumers", "shard", a.cfg.Shard.Index, "namespaces", len(nss))
	if err := c.results.update(ctx, a.filters("result", nss)); err != nil {
		return err
	}
	if err := c.invoke.recreate(ctx, nss); err != nil {
		return err
	}
	c.nss = nss
	a.mu.Lock()
	for _, ns := range nss {
		a.filtered[ns] = true
	}
	a.mu.Unlock()
	return nil
}

// dropLegacyConsumers removes the unsharded activator's consumers once
// every shard's results consumer exists (shard 0 does it, and checks again
// every few seconds: a process started without the shard count would make
// them again): the results stream keeps a result until every consumer
// interested in it has acked it, and nobody acks those any more. What
// they had not acked, the shards' consumers deliver too: they were made
// after it was stored and deliver from the start.
func (a *Activator) dropLegacyConsumers(ctx context.Context) {
	if !a.cfg.Shard.Sharded() || a.cfg.Shard.Index != 0 {
		return
	}
	for {
		if a.allShardConsumers(ctx) {
			a.deleteLegacyConsumers(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-a.cfg.Clock.After(legacyCheckEvery):
		}
	}
}

// legacyCheckEvery is how often shard 0 looks for the unsharded
// activator's consumers.
const legacyCheckEvery = 5 * time.Second

func (a *Activator) allShardConsumers(ctx context.Context) bool {
	st := a.cfg.Store
	for i := range a.cfg.Shard.Count {
		name := Shard{Index: i, Count: a.cfg.Shard.Count}.consumerPrefix(a.cfg.ConsumerPrefix) + "-results"
		if _, err := st.JS.Consumer(ctx, st.Config.ResultsStream, name); err != nil {
			return false
		}
	}
	return true
}

func (a *Activator) deleteLegacyConsumers(ctx context.Context) {
	st := a.cfg.Store
	for _, c := range []struct{ stream, name string }{{st.Config.Stream, "invoke"}, {st.Config.ResultsStream, "results"}} {
		name := a.cfg.ConsumerPrefix + "-" + c.name
		err := st.JS.DeleteConsumer(ctx, c.stream, name)
		switch {
		case err == nil:
			a.cfg.Logger.Info("removed the unsharded activator's consumer", "stream", c.stream, "consumer", name)
		case errors.Is(err, jetstream.ErrConsumerNotFound), ctx.Err() != nil:
		default:
			a.cfg.Logger.Warn("remove the unsharded activator's consumer", "stream", c.stream, "consumer", name, "err", err)
		}
	}
}
