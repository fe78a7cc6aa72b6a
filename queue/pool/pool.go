// Package pool knows the serverless pools: a pool is named by its
// namespace and name (<namespace>/<pool>) and exists when a Deployment of
// that namespace is labelled runplane.io/pool=<pool>; that Deployment's
// annotations carry the pool's scaling policy. Two Deployments claiming one
// pool in one namespace are a conflict: the pool is then reported with
// both names and served by neither (never merged, never the older one). It parses the policy (strictly: a bad
// value is an error naming the key) and offers a Source backed by the
// Deployments of the queue's manager cache or a static map (tests, make dev without a cluster).
package pool

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/poolpolicy"
)

// Policy is a pool's scaling policy.
type Policy struct {
	MinAvailable    int           `json:"minAvailable"`
	MaxReplicas     int           `json:"maxReplicas"` // 0: unbounded
	IdleTimeout     time.Duration `json:"idleTimeout"`
	MinRequestCount int           `json:"minRequestCount"`
	StartupTimeout  time.Duration `json:"startupTimeout"`
	// Concurrency is runplane.io/concurrency of the Pod template (default 1).
	Concurrency int `json:"concurrency"`
	// MaxBacklog and MaxInFlight are runplane.io/max-backlog and
	// runplane.io/max-in-flight (0: the cluster default, Limits).
	MaxBacklog  int `json:"maxBacklog,omitempty"`
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// TimeoutSeconds is runplane.io/timeout-seconds of the Pod template
	// (0 when unset: the ingress's bounds apply) and Retry its retry policy
	// (runplane.io/max-retries, retry-on, retry-backoff; default: no
	// retries), as the webhook validates them on the pool's Pods.
	TimeoutSeconds int              `json:"timeoutSeconds,omitempty"`
	Retry          poolpolicy.Retry `json:"retry"`
	// CallbackURL is runplane.io/callback-url of the Deployment: the
	// default completion callback of its invocations.
	CallbackURL string `json:"callbackURL,omitempty"`
}

// Defaults.
const (
	DefaultIdleTimeout     = 300 * time.Second
	DefaultStartupTimeout  = 600 * time.Second
	DefaultMinRequestCount = 1
)

// DefaultPolicy is the policy of a Deployment without annotations.
func DefaultPolicy() Policy {
	return Policy{IdleTimeout: DefaultIdleTimeout, StartupTimeout: DefaultStartupTimeout, MinRequestCount: DefaultMinRequestCount, Concurrency: 1}
}

// ParsePolicy reads the policy annotations of a workload and the
// concurrency, timeout and retry annotations of its Pod template.
func ParsePolicy(ann, podAnn map[string]string) (Policy, error) {
	p := DefaultPolicy()
	ints := []struct {
		key string
		dst *int
		min int
	}{
		{api.AnnotationMinAvailable, &p.MinAvailable, 0},
		{api.AnnotationMaxReplicas, &p.MaxReplicas, 1},
		{api.AnnotationMinRequestCount, &p.MinRequestCount, 1},
		{api.AnnotationMaxBacklog, &p.MaxBacklog, 1},
		{api.AnnotationMaxInFlight, &p.MaxInFlight, 1},
	}
	for _, f := range ints {
		v, ok := ann[f.key]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < f.min {
			return p, fmt.Errorf("annotation %s=%q: must be an integer >= %d", f.key, v, f.min)
		}
		*f.dst = n
	}
	durs := []struct {
		key string
		dst *time.Duration
	}{
		{api.AnnotationIdleTimeout, &p.IdleTimeout},
		{api.AnnotationStartupTimeout, &p.StartupTimeout},
	}
	for _, f := range durs {
		v, ok := ann[f.key]
		if !ok {
			continue
		}
		d, err := parseDuration(v)
		if err != nil || d <= 0 {
			return p, fmt.Errorf("annotation %s=%q: must be a positive duration (e.g. 300s, 5m) or a number of seconds", f.key, v)
		}
		*f.dst = d
	}
	if v, ok := podAnn[api.AnnotationConcurrency]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, fmt.Errorf("annotation %s=%q: must be an integer >= 1", api.AnnotationConcurrency, v)
		}
		p.Concurrency = n
	}
	ex, err := poolpolicy.Parse(podAnn)
	if err != nil {
		return p, err
	}
	p.Retry = ex.Retry
	if ex.TimeoutSet {
		p.TimeoutSeconds = ex.TimeoutSeconds
	}
	// Checked against the callback target rules per invocation (the
	// ingress knows the chart's allowed ranges).
	p.CallbackURL = ann[api.AnnotationCallbackURL]
	if p.MaxReplicas > 0 && p.MinAvailable > p.MaxReplicas {
		return p, fmt.Errorf("annotation %s=%d exceeds %s=%d", api.AnnotationMinAvailable, p.MinAvailable, api.AnnotationMaxReplicas, p.MaxReplicas)
	}
	return p, nil
}

func parseDuration(v string) (time.Duration, error) {
	if n, err := strconv.Atoi(v); err == nil {
		return time.Duration(n) * time.Second, nil
	}
	return time.ParseDuration(v)
}

// Pool is a known pool.
type Pool struct {
	Name       string `json:"name"`
	Namespace  string `json:"namespace"`
	Deployment string `json:"deployment,omitempty"`
	// DeploymentUID is the Deployment's UID: a worker's Pod must be owned
	// (through its ReplicaSet) by exactly this object.
	DeploymentUID types.UID `json:"-"`
	// Conflict names every Deployment of the namespace that claims the
	// pool when there is more than one (sorted); Deployment is then empty
	// and the pool serves nothing until all but one are removed or
	// relabelled.
	Conflict []string `json:"conflict,omitempty"`
	// Replicas is the Deployment's spec.replicas.
	Replicas int    `json:"replicas"`
	Policy   Policy `json:"policy"`
	// PolicyError is set when the annotations are invalid; the default
	// policy is then in force and the activator reports the error.
	PolicyError string `json:"policyError,omitempty"`
}

// Source looks pools up.
type Source interface {
	// Lookup finds pool name of namespace ns, and nothing of another
	// namespace.
	Lookup(ns, name string) (Pool, bool)
	List() []Pool
	// Synced reports whether the source has its initial view.
	Synced() bool
}

// Static is a fixed set of pools, by "<namespace>/<pool>".
type Static map[string]Policy

// StaticKey is the key of pool name of namespace ns in a Static.
func StaticKey(ns, name string) string { return ns + "/" + name }

// Lookup implements Source.
func (s Static) Lookup(ns, name string) (Pool, bool) {
	p, ok := s[StaticKey(ns, name)]
	return Pool{Name: name, Namespace: ns, Policy: p}, ok
}

// List implements Source.
func (s Static) List() []Pool {
	out := make([]Pool, 0, len(s))
	for k, p := range s {
		ns, n, _ := strings.Cut(k, "/")
		out = append(out, Pool{Name: n, Namespace: ns, Policy: p})
	}
	sortPools(out)
	return out
}

func sortPools(ps []Pool) {
	sort.Slice(ps, func(i, j int) bool {
		if ps[i].Namespace != ps[j].Namespace {
			return ps[i].Namespace < ps[j].Namespace
		}
		return ps[i].Name < ps[j].Name
	})
}

// Synced implements Source.
func (Static) Synced() bool { return true }

// CacheOptions are what the queue's manager cache keeps: the Deployments,
// ReplicaSets and Pods labelled runplane.io/pool (pools and their workers:
// nothing else is read from it) of namespace ("" = all), without their
// managed fields, which nothing reads.
func CacheOptions(namespace string) ctrlcache.Options {
	o := ctrlcache.Options{DefaultLabelSelector: Selector(), DefaultTransform: ctrlcache.TransformStripManagedFields()}
	if namespace != "" {
		o.DefaultNamespaces = map[string]ctrlcache.Config{namespace: {}}
	}
	return o
}

// Cache is where an Informer reads the Deployments: the manager's
// (ctrlcache.Cache, kept by CacheOptions).
type Cache interface {
	GetInformer(ctx context.Context, obj client.Object, opts ...ctrlcache.InformerGetOption) (ctrlcache.Informer, error)
	IndexField(ctx context.Context, obj client.Object, field string, extractValue client.IndexerFunc) error
	client.Reader
}

// poolField indexes the Deployments by the pool they claim.
const poolField = api.LabelPool

// Informer is a Source backed by the Deployments of a Cache.
type Informer struct {
	cache Cache
	inf   ctrlcache.Informer
	log   *slog.Logger
}

// NewInformer reads the pools from c's Deployments, indexed by the pool
// they claim; c's informer starts with c. A read of c that fails is
// logged to log (which must not be nil), and serves no pools until the
// next read succeeds.
func NewInformer(ctx context.Context, c Cache, log *slog.Logger) (*Informer, error) {
	err := c.IndexField(ctx, &appsv1.Deployment{}, poolField, func(o client.Object) []string { return []string{o.GetLabels()[api.LabelPool]} })
	if err != nil {
		return nil, fmt.Errorf("pool: index Deployments by pool: %w", err)
	}
	inf, err := c.GetInformer(ctx, &appsv1.Deployment{}, ctrlcache.BlockUntilSynced(false))
	if err != nil {
		return nil, fmt.Errorf("pool: Deployment informer: %w", err)
	}
	return &Informer{cache: c, inf: inf, log: log}, nil
}

// OnChange calls fn after any Deployment change, until stop.
func (i *Informer) OnChange(fn func()) (stop func() error, err error) {
	reg, err := i.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { fn() },
		UpdateFunc: func(any, any) { fn() },
		DeleteFunc: func(any) { fn() },
	})
	if err != nil {
		return nil, fmt.Errorf("pool: Deployment informer: %w", err)
	}
	return func() error { return i.inf.RemoveEventHandler(reg) }, nil
}

// Synced implements Source.
func (i *Informer) Synced() bool { return i.inf.HasSynced() }

// deployments are the cache's Deployments that opts select, not being
// deleted; none before the informer has synced (the cache's reads would
// wait for it). Read-only: they are the cache's own objects.
func (i *Informer) deployments(opts ...client.ListOption) []*appsv1.Deployment {
	var l appsv1.DeploymentList
	if !i.Synced() {
		return nil
	}
	if err := i.cache.List(context.Background(), &l, append(opts, client.UnsafeDisableDeepCopy)...); err != nil {
		i.log.Error("pools: read the cached Deployments; none are served", "err", err)
		return nil
	}
	out := make([]*appsv1.Deployment, 0, len(l.Items))
	for k := range l.Items {
		if l.Items[k].DeletionTimestamp == nil {
			out = append(out, &l.Items[k])
		}
	}
	return out
}

// Lookup implements Source: only Deployments of namespace ns count. When
// several claim the pool, it is returned with Conflict set and no
// Deployment.
func (i *Informer) Lookup(ns, name string) (Pool, bool) {
	return fromClaims(i.deployments(client.InNamespace(ns), client.MatchingFields{poolField: name}))
}

func fromClaims(claim []*appsv1.Deployment) (Pool, bool) {
	switch len(claim) {
	case 0:
		return Pool{}, false
	case 1:
		return FromDeployment(claim[0]), true
	}
	p := Pool{Name: claim[0].Labels[api.LabelPool], Namespace: claim[0].Namespace, Policy: DefaultPolicy()}
	for _, d := range claim {
		p.Conflict = append(p.Conflict, d.Name)
	}
	sort.Strings(p.Conflict)
	return p, true
}

// List implements Source.
func (i *Informer) List() []Pool {
	claims := map[string][]*appsv1.Deployment{}
	for _, d := range i.deployments() {
		k := StaticKey(d.Namespace, d.Labels[api.LabelPool])
		claims[k] = append(claims[k], d)
	}
	out := make([]Pool, 0, len(claims))
	for _, c := range claims {
		if p, ok := fromClaims(c); ok {
			out = append(out, p)
		}
	}
	sortPools(out)
	return out
}

// FromDeployment builds the Pool a Deployment declares.
func FromDeployment(d *appsv1.Deployment) Pool {
	p := Pool{Name: d.Labels[api.LabelPool], Namespace: d.Namespace, Deployment: d.Name, DeploymentUID: d.UID, Replicas: 1}
	if d.Spec.Replicas != nil {
		p.Replicas = int(*d.Spec.Replicas)
	}
	pol, err := ParsePolicy(d.Annotations, d.Spec.Template.Annotations)
	if err != nil {
		p.PolicyError = err.Error()
		pol = DefaultPolicy()
	}
	p.Policy = pol
	return p
}

// Selector matches Pods of any pool.
func Selector() labels.Selector {
	s, _ := labels.Parse(api.LabelPool)
	return s
}
