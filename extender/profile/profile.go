// Package profile builds the KubeSchedulerConfiguration of the
// runplane-scheduler: a second kube-scheduler whose only profile schedules
// GPU Pods and placeholders with the runplane extender as the resource-fit
// authority. The Helm chart renders the same configuration (see YAML).
package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfigv1alpha1 "k8s.io/component-base/config/v1alpha1"
	configv1 "k8s.io/kube-scheduler/config/v1"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
)

// Extender verbs, appended by the scheduler to URLPrefix.
const (
	FilterVerb     = "filter"
	PrioritizeVerb = "prioritize"
	BindVerb       = "bind"
)

// DefaultWeight makes the extender's score dominate the in-tree scores
// left enabled (their weights sum to about 12, i.e. 1,200 points at most;
// one extender point is worth Weight*10), so the scheduler picks the node
// the extender's ledger reserved.
const DefaultWeight = 200

// Options parameterise the configuration.
type Options struct {
	// URLPrefix reaches the extender, e.g. https://127.0.0.1:8443.
	URLPrefix string
	// CAData is the PEM CA that signed the extender's serving certificate.
	// Either CAData or CAFile is required.
	CAData []byte
	CAFile string
	// ServerName overrides the name checked on the extender's certificate.
	ServerName string
	// SchedulerName defaults to api.SchedulerName (runplane-scheduler).
	SchedulerName string
	// GPUResource is the managed extended resource; default nvidia.com/gpu.
	GPUResource string
	// ManagedResources are more managed extended resources, e.g. MIG
	// slices (chart scheduler.extender.managedResources): the scheduler
	// sends a Pod to the extender only when it requests a managed
	// resource. The extender must be told the same list
	// (its configuration's managedResources) to check the catalog against it.
	ManagedResources []string
	// DRA: catalog specs backed by Dynamic Resource Allocation are in use.
	// Their Pods request devices through ResourceClaims, not a managed
	// extended resource, and kube-scheduler sends a Pod to the extender only
	// when it requests a managed resource — unless the list is empty. So
	// with DRA the extender gets no managedResources and is asked about
	// every Pod of the profile (it is the profile's resource-fit authority
	// either way: NodeResourcesFit is off). The DynamicResources plugin
	// stays on: it allocates the claims, in PreBind, before the extender
	// binds.
	DRA bool
	// Weight of the extender's priorities; default DefaultWeight.
	Weight int64
	// HTTPTimeout bounds each extender call; default 30s (a bind may wait
	// for a placeholder to go).
	HTTPTimeout time.Duration
	// LeaderElect turns the scheduler's own leader election on, with the
	// Lease runplane-scheduler in LeaseNamespace (default api.DefaultNamespace).
	LeaderElect    bool
	LeaseNamespace string
}

// In-tree plugins the profile turns off: resource fit (and the scores that
// read the scheduler's own resource view) is the extender's job, because
// the scheduler would reject a node whose capacity a placeholder holds.
var resourcePlugins = []string{"NodeResourcesFit", "NodeResourcesBalancedAllocation"}

// SchedulerConfig returns the runplane-scheduler configuration.
func SchedulerConfig(o Options) (*configv1.KubeSchedulerConfiguration, error) {
	if !strings.HasPrefix(o.URLPrefix, "https://") {
		return nil, fmt.Errorf("profile: URLPrefix must be an https:// URL, got %q", o.URLPrefix)
	}
	if len(o.CAData) == 0 && o.CAFile == "" {
		return nil, errors.New("profile: CAData or CAFile is required (the CA of the extender's serving certificate)")
	}
	if o.SchedulerName == "" {
		o.SchedulerName = api.SchedulerName
	}
	if o.GPUResource == "" {
		o.GPUResource = api.DefaultGPUResource
	}
	if o.Weight <= 0 {
		o.Weight = DefaultWeight
	}
	if o.HTTPTimeout <= 0 {
		o.HTTPTimeout = 30 * time.Second
	}
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = api.DefaultNamespace
	}
	disabled := make([]configv1.Plugin, len(resourcePlugins))
	for i, n := range resourcePlugins {
		disabled[i] = configv1.Plugin{Name: n}
	}
	fit := []configv1.Plugin{{Name: "NodeResourcesFit"}}
	managed := []configv1.ExtenderManagedResource{{Name: o.GPUResource, IgnoredByScheduler: true}}
	for _, r := range o.ManagedResources {
		if r != o.GPUResource {
			managed = append(managed, configv1.ExtenderManagedResource{Name: r, IgnoredByScheduler: true})
		}
	}
	if o.DRA {
		managed = nil
	}
	hundred := int32(100)
	leaderElect := o.LeaderElect
	return &configv1.KubeSchedulerConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: configv1.SchemeGroupVersion.String(), Kind: "KubeSchedulerConfiguration"},
		LeaderElection: componentbaseconfigv1alpha1.LeaderElectionConfiguration{
			LeaderElect:       &leaderElect,
			ResourceLock:      "leases",
			ResourceName:      o.SchedulerName,
			ResourceNamespace: o.LeaseNamespace,
		},
		PercentageOfNodesToScore: &hundred,
		Profiles: []configv1.KubeSchedulerProfile{{
			SchedulerName:            &o.SchedulerName,
			PercentageOfNodesToScore: &hundred,
			Plugins: &configv1.Plugins{
				PreFilter: configv1.PluginSet{Disabled: fit},
				Filter:    configv1.PluginSet{Disabled: fit},
				PreScore:  configv1.PluginSet{Disabled: disabled},
				Score:     configv1.PluginSet{Disabled: disabled},
			},
		}},
		Extenders: []configv1.Extender{{
			URLPrefix:        o.URLPrefix,
			FilterVerb:       FilterVerb,
			PrioritizeVerb:   PrioritizeVerb,
			BindVerb:         BindVerb,
			Weight:           o.Weight,
			EnableHTTPS:      true,
			TLSConfig:        &configv1.ExtenderTLSConfig{CAData: o.CAData, CAFile: o.CAFile, ServerName: o.ServerName},
			HTTPTimeout:      metav1.Duration{Duration: o.HTTPTimeout},
			NodeCacheCapable: true,
			ManagedResources: managed,
		}},
	}, nil
}

// YAML renders a configuration as kube-scheduler reads it from --config,
// on every minor of the support window: extension points left empty are
// left out. PluginSet is a struct, which omitempty never omits, so the Go
// types of the current minor write every extension point they know, and an
// older kube-scheduler's strict decoding refuses one it does not know
// (1.35 refuses 1.37's placementGenerate, placementScore and
// podGroupPostFilter; 1.36 the last). No library prunes them: upstream's
// own encoder is in k8s.io/kubernetes, and it writes the same fields.
func YAML(cfg *configv1.KubeSchedulerConfiguration) ([]byte, error) {
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("profile: encoding scheduler config: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("profile: decoding scheduler config: %w", err)
	}
	profiles, _ := doc["profiles"].([]any)
	for _, p := range profiles {
		profile, _ := p.(map[string]any)
		plugins, _ := profile["plugins"].(map[string]any)
		for point, set := range plugins {
			if m, ok := set.(map[string]any); ok && len(m) == 0 {
				delete(plugins, point)
			}
		}
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("profile: encoding scheduler config: %w", err)
	}
	return out, nil
}
