// Package catalog reads the GPU spec catalog: the ConfigMap
// runplane-gpu-specs, one data key per spec whose value is a YAML document.
// The webhook and the extender both read it through a Store, which follows
// the ConfigMap's changes without a restart.
package catalog

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/runplane/runplane/api"
)

// StockPolicy says whether a spec's Pods may use free capacity or only stock.
type StockPolicy string

const (
	// StockPreferred takes a same-spec placeholder when there is one, else
	// free capacity. It is the default.
	StockPreferred StockPolicy = "Preferred"
	// StockRequired binds only by taking over a same-spec placeholder.
	StockRequired StockPolicy = "Required"
)

// Spec is one GPU spec of the catalog.
type Spec struct {
	// Name is the data key the spec was read from, e.g. "g1.1".
	Name string `json:"-"`
	// GPU is the number of GPUs per Pod.
	GPU int64 `json:"gpu"`
	// GPUResource is the extended resource GPUs are counted in.
	GPUResource corev1.ResourceName `json:"gpuResource,omitempty"`
	CPU         resource.Quantity   `json:"cpu"`
	Memory      resource.Quantity   `json:"memory"`
	// Extended are more extended resources per Pod (YAML key resources),
	// e.g. MIG slices {nvidia.com/mig-1g.10gb: 2}: whole counts, each
	// managed by the extender like the GPUs (chart
	// scheduler.extender.managedResources).
	Extended corev1.ResourceList `json:"resources,omitempty"`
	// NVLink asks that the Pod's GPUs share one NVLink domain: the Pod only
	// goes to nodes whose label runplane.io/nvlink-domain-gpus (GPUs in the
	// node's largest NVLink domain) is at least GPU.
	NVLink bool `json:"nvlink,omitempty"`
	// NodeSelector and Tolerations are added to the spec's Pods.
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	Stock        StockPolicy         `json:"stock,omitempty"`
	// DRA asks for the devices through Dynamic Resource Allocation
	// instead of GPU and Extended: a ResourceClaimTemplate per namespace.
	DRA *DRA `json:"dra,omitempty"`
}

// Resources is the requests (equal to the limits) a Pod of this spec gets.
func (s Spec) Resources() corev1.ResourceList {
	list := corev1.ResourceList{
		corev1.ResourceCPU:    s.CPU.DeepCopy(),
		corev1.ResourceMemory: s.Memory.DeepCopy(),
	}
	if s.GPU > 0 {
		list[s.GPUResource] = *resource.NewQuantity(s.GPU, resource.DecimalSI)
	}
	for name, q := range s.Extended {
		list[name] = q.DeepCopy()
	}
	return list
}

// Catalog is a parsed catalog, keyed by spec name.
type Catalog map[string]Spec

// Names returns the spec names, sorted, for error messages.
func (c Catalog) Names() []string {
	names := make([]string, 0, len(c))
	for n := range c {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// UnknownSpecError says that a Pod named a spec the catalog lacks.
type UnknownSpecError struct {
	Key   string // the label that named it
	Spec  string
	Known []string
}

func (e *UnknownSpecError) Error() string {
	known := "none (the catalog ConfigMap " + api.CatalogConfigMap + " is empty or missing)"
	if len(e.Known) > 0 {
		known = strings.Join(e.Known, ", ")
	}
	return fmt.Sprintf("label %s: unknown GPU spec %q; known specs: %s", e.Key, e.Spec, known)
}

// Lookup returns the named spec, or an *UnknownSpecError naming key.
func (c Catalog) Lookup(key, name string) (Spec, error) {
	s, ok := c[name]
	if !ok {
		return Spec{}, &UnknownSpecError{Key: key, Spec: name, Known: c.Names()}
	}
	return s, nil
}

// Parse reads every data key of the catalog ConfigMap. It fails on the first
// bad entry, naming it: a half-read catalog would silently drop specs.
func Parse(data map[string]string) (Catalog, error) {
	c := make(Catalog, len(data))
	for name, doc := range data {
		s, err := ParseSpec(name, doc)
		if err != nil {
			return nil, err
		}
		c[name] = s
	}
	return c, nil
}

// ParseSpec reads one spec document and applies the defaults.
func ParseSpec(name, doc string) (Spec, error) {
	if errs := validation.IsConfigMapKey(name); len(errs) > 0 {
		return Spec{}, fmt.Errorf("catalog spec %q: invalid name: %s", name, strings.Join(errs, "; "))
	}
	if errs := validation.IsValidLabelValue(name); len(errs) > 0 {
		return Spec{}, fmt.Errorf("catalog spec %q: a spec name must be a valid label value: %s", name, strings.Join(errs, "; "))
	}
	var s Spec
	if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
		return Spec{}, fmt.Errorf("catalog spec %q: %w", name, err)
	}
	s.Name = name
	if s.GPUResource == "" {
		s.GPUResource = api.DefaultGPUResource
	}
	if s.Stock == "" {
		s.Stock = StockPreferred
	}
	switch {
	case s.GPU < 0:
		return Spec{}, fmt.Errorf("catalog spec %q: gpu must be >= 0, got %d", name, s.GPU)
	case s.CPU.Sign() <= 0:
		return Spec{}, fmt.Errorf("catalog spec %q: cpu must be set and positive", name)
	case s.Memory.Sign() <= 0:
		return Spec{}, fmt.Errorf("catalog spec %q: memory must be set and positive", name)
	case s.Stock != StockPreferred && s.Stock != StockRequired:
		return Spec{}, fmt.Errorf("catalog spec %q: stock must be %s or %s, got %q", name, StockPreferred, StockRequired, s.Stock)
	case s.NVLink && s.GPU < 2 && s.DRA == nil:
		return Spec{}, fmt.Errorf("catalog spec %q: nvlink needs gpu >= 2 (GPUs to link), got %d", name, s.GPU)
	}
	if s.DRA != nil {
		if err := checkDRA(&s); err != nil {
			return Spec{}, fmt.Errorf("catalog spec %q: %w", name, err)
		}
	}
	for res, q := range s.Extended {
		if err := checkExtended(s, res, q); err != nil {
			return Spec{}, fmt.Errorf("catalog spec %q: resources[%s]: %w", name, res, err)
		}
	}
	return s, nil
}

// checkExtended accepts what the device plugins advertise: an extended
// resource (a domain-prefixed name outside kubernetes.io) in whole units,
// not the spec's own GPU resource (that is gpu's job).
func checkExtended(s Spec, res corev1.ResourceName, q resource.Quantity) error {
	domain, _, ok := strings.Cut(string(res), "/")
	switch {
	case !ok || domain == "" || domain == "kubernetes.io" || strings.HasSuffix(domain, ".kubernetes.io"):
		return errors.New("must be an extended resource such as nvidia.com/mig-1g.10gb (cpu and memory have their own keys)")
	case res == s.GPUResource:
		return fmt.Errorf("is the spec's GPU resource; set gpu instead")
	case q.Sign() <= 0 || q.MilliValue()%1000 != 0:
		return fmt.Errorf("must be a whole count above 0, got %s", q.String())
	}
	return nil
}

// ManagedResourcesValue is the chart value that lists the extender's
// managed resources beyond the GPU resource; errors name it.
const ManagedResourcesValue = "scheduler.extender.managedResources"

// CheckManaged returns an error naming the first spec (by name) and
// resource that is not among managed: the scheduler sends the extender only
// Pods that request a managed resource, and the runplane-scheduler runs no
// resource fit of its own, so a Pod whose resources are unmanaged (a MIG
// only spec, gpu: 0) would be scheduled without any capacity check, and any
// unmanaged resource escapes the ledger's view of why a node is full.
func (c Catalog) CheckManaged(managed []corev1.ResourceName) error {
	for _, name := range c.Names() {
		if err := c[name].CheckManaged(managed); err != nil {
			return err
		}
	}
	return nil
}

// CheckManaged is Catalog.CheckManaged for one spec.
// It allocates nothing when every resource is managed: the extender calls
// it in each filter and prioritize.
func (s Spec) CheckManaged(managed []corev1.ResourceName) error {
	ok := s.GPU <= 0 || slices.Contains(managed, s.GPUResource)
	for res := range s.Extended {
		ok = ok && slices.Contains(managed, res)
	}
	if ok {
		return nil
	}
	var names []corev1.ResourceName
	if s.GPU > 0 {
		names = append(names, s.GPUResource)
	}
	for res := range s.Extended {
		names = append(names, res)
	}
	sort.Slice(names, func(i, j int) bool { return names[i] < names[j] })
	for _, res := range names {
		if !slices.Contains(managed, res) {
			list := make([]string, len(managed))
			for i, m := range managed {
				list[i] = string(m)
			}
			return fmt.Errorf("catalog spec %q: resource %s is not managed by the runplane extender (managed: %s); "+
				"add it to the chart value %s (runplane-extender's managedResources), or the runplane-scheduler "+
				"places this spec's Pods without checking it", s.Name, res, strings.Join(list, ", "), ManagedResourcesValue)
		}
	}
	return nil
}
