// Package pool knows the serverless pools: a pool exists when a Deployment
// is labelled runplane.io/pool=<pool>, and that Deployment's annotations
// carry the pool's scaling policy. It parses the policy (strictly: a bad
// value is an error naming the key) and offers a Source backed by a
// Deployment informer or a static map (tests, make dev without a cluster).
package pool

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/runplane/runplane/api"
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
// concurrency annotation of its Pod template.
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
	Namespace  string `json:"namespace,omitempty"`
	Deployment string `json:"deployment,omitempty"`
	// Replicas is the Deployment's spec.replicas.
	Replicas int    `json:"replicas"`
	Policy   Policy `json:"policy"`
	// PolicyError is set when the annotations are invalid; the default
	// policy is then in force and the activator reports the error.
	PolicyError string `json:"policyError,omitempty"`
}

// Source looks pools up.
type Source interface {
	Lookup(name string) (Pool, bool)
	List() []Pool
	// Synced reports whether the source has its initial view.
	Synced() bool
}

// Static is a fixed set of pools.
type Static map[string]Policy

// Lookup implements Source.
func (s Static) Lookup(name string) (Pool, bool) {
	p, ok := s[name]
	return Pool{Name: name, Policy: p}, ok
}

// List implements Source.
func (s Static) List() []Pool {
	out := make([]Pool, 0, len(s))
	for n, p := range s {
		out = append(out, Pool{Name: n, Policy: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Synced implements Source.
func (Static) Synced() bool { return true }

// Informer is a Source backed by a Deployment informer.
type Informer struct {
	inf     cache.SharedIndexInformer
	mu      sync.Mutex
	onEvent []func()
}

// NewInformer watches Deployments labelled runplane.io/pool in namespace
// ("" = all namespaces). Call Run to start it.
func NewInformer(client kubernetes.Interface, namespace string, resync time.Duration) *Informer {
	f := informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = api.LabelPool }))
	return &Informer{inf: f.Apps().V1().Deployments().Informer()}
}

// OnChange registers fn, called after any Deployment change.
func (i *Informer) OnChange(fn func()) {
	i.mu.Lock()
	i.onEvent = append(i.onEvent, fn)
	i.mu.Unlock()
}

// Run runs the informer until ctx ends.
func (i *Informer) Run(ctx context.Context) {
	notify := func() {
		i.mu.Lock()
		fns := append([]func(){}, i.onEvent...)
		i.mu.Unlock()
		for _, fn := range fns {
			fn()
		}
	}
	_, _ = i.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	})
	i.inf.Run(ctx.Done())
}

// Synced implements Source.
func (i *Informer) Synced() bool { return i.inf.HasSynced() }

// Lookup implements Source. When several Deployments claim one pool, the
// oldest wins (deterministic).
func (i *Informer) Lookup(name string) (Pool, bool) {
	var best *appsv1.Deployment
	for _, o := range i.inf.GetStore().List() {
		d := o.(*appsv1.Deployment)
		if d.Labels[api.LabelPool] != name || d.DeletionTimestamp != nil {
			continue
		}
		if best == nil || d.CreationTimestamp.Before(&best.CreationTimestamp) ||
			(d.CreationTimestamp.Equal(&best.CreationTimestamp) && d.Namespace+"/"+d.Name < best.Namespace+"/"+best.Name) {
			best = d
		}
	}
	if best == nil {
		return Pool{}, false
	}
	return FromDeployment(best), true
}

// List implements Source.
func (i *Informer) List() []Pool {
	seen := map[string]bool{}
	var out []Pool
	for _, o := range i.inf.GetStore().List() {
		n := o.(*appsv1.Deployment).Labels[api.LabelPool]
		if seen[n] {
			continue
		}
		seen[n] = true
		if p, ok := i.Lookup(n); ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out
}

// FromDeployment builds the Pool a Deployment declares.
func FromDeployment(d *appsv1.Deployment) Pool {
	p := Pool{Name: d.Labels[api.LabelPool], Namespace: d.Namespace, Deployment: d.Name, Replicas: 1}
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
