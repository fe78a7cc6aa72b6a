package catalog

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	dracel "k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// The names NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu) publishes
// its devices under: one driver, a DeviceClass per device type.
const (
	// GPUDriver is the driver name, also the domain of its attributes.
	GPUDriver = "gpu.nvidia.com"
	// GPUDeviceClass selects whole GPUs (attribute type "gpu").
	GPUDeviceClass = "gpu.nvidia.com"
	// MIGDeviceClass selects MIG partitions (attribute type "mig").
	MIGDeviceClass = "mig.nvidia.com"
	// NVLinkDomainAttribute is the string attribute naming a device's
	// NVLink domain: the driver publishes none (its clique ID is a node
	// label), so runplane's ResourceSlices and drivers carry this one.
	NVLinkDomainAttribute = "runplane.io/nvlinkDomain"
	// ClaimName is the Pod's resource claim (spec.resourceClaims[].name,
	// containers' resources.claims[].name) and the device request of a
	// DRA spec's ResourceClaimTemplate.
	ClaimName = "gpu"
	// ClaimTemplatePrefix starts the name of a spec's template.
	ClaimTemplatePrefix = "runplane-"
)

// DRA is a spec's device request through Dynamic Resource Allocation
// (YAML key dra), instead of extended resources: the Pods of the spec get a
// ResourceClaim from the ResourceClaimTemplate runplane-<spec> in their
// namespace, which runplane keeps (controllers/claimtemplate).
type DRA struct {
	// DeviceClassName is the DeviceClass the devices come from; default
	// gpu.nvidia.com, or mig.nvidia.com with MIGProfile.
	DeviceClassName string `json:"deviceClassName,omitempty"`
	// Count is the number of devices per Pod; default 1.
	Count int64 `json:"count,omitempty"`
	// Selectors are CEL expressions a device must all satisfy, e.g.
	// device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"
	// or device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("80Gi")) >= 0.
	Selectors []string `json:"selectors,omitempty"`
	// MIGProfile asks for MIG partitions of this profile (attribute
	// profile), e.g. 1g.10gb.
	MIGProfile string `json:"migProfile,omitempty"`
	// SameNVLinkDomain puts all the Pod's devices in one NVLink domain (a
	// matchAttribute constraint on NVLinkDomainAttribute).
	SameNVLinkDomain bool `json:"sameNVLinkDomain,omitempty"`
}

// migProfile is what the driver's profile attribute looks like (1g.10gb,
// 1c.2g.20gb, 1g.10gb+me): it is put into a CEL string literal.
var migProfile = regexp.MustCompile(`^[0-9][0-9a-z.+]*$`)

// ClaimTemplateName is the ResourceClaimTemplate of a spec's Pods.
func ClaimTemplateName(spec string) string { return ClaimTemplatePrefix + spec }

// checkDRA defaults and validates a DRA block: every error names the key
// and what it allows. Selectors are compiled with the CEL environment the
// API server and the scheduler use for DRA.
func checkDRA(s *Spec) error {
	d := s.DRA
	switch {
	case s.GPU != 0:
		return errors.New("gpu must be 0 or absent with dra: dra.count is the number of devices")
	case s.GPUResource != api.DefaultGPUResource:
		return errors.New("gpuResource does not apply with dra: the devices come from dra.deviceClassName")
	case len(s.Extended) > 0:
		return errors.New("resources (extended resources) do not mix with dra: ask for MIG partitions with dra.migProfile")
	case s.NVLink:
		return errors.New("nvlink does not apply with dra: use dra.sameNVLinkDomain")
	}
	if errs := validation.IsDNS1123Subdomain(ClaimTemplateName(s.Name)); len(errs) > 0 {
		return fmt.Errorf("a dra spec's name must make a valid object name (its ResourceClaimTemplate is %s: lowercase letters, digits, '-' and '.'): %s",
			ClaimTemplateName(s.Name), strings.Join(errs, "; "))
	}
	if d.Count == 0 {
		d.Count = 1
	}
	if d.Count < 1 || d.Count > resourcev1.AllocationResultsMaxSize {
		return fmt.Errorf("dra.count must be 1 to %d, got %d", resourcev1.AllocationResultsMaxSize, d.Count)
	}
	if d.MIGProfile != "" && !migProfile.MatchString(d.MIGProfile) {
		return fmt.Errorf("dra.migProfile must be a MIG profile such as 1g.10gb or 3g.40gb, got %q", d.MIGProfile)
	}
	if d.DeviceClassName == "" {
		d.DeviceClassName = GPUDeviceClass
		if d.MIGProfile != "" {
			d.DeviceClassName = MIGDeviceClass
		}
	}
	if errs := validation.IsDNS1123Subdomain(d.DeviceClassName); len(errs) > 0 {
		return fmt.Errorf("dra.deviceClassName must be a DeviceClass name such as %s or %s, got %q: %s",
			GPUDeviceClass, MIGDeviceClass, d.DeviceClassName, strings.Join(errs, "; "))
	}
	if d.SameNVLinkDomain && d.Count < 2 {
		return fmt.Errorf("dra.sameNVLinkDomain needs dra.count >= 2 (devices to link), got %d", d.Count)
	}
	if n := len(d.selectors()); n > resourcev1.DeviceSelectorsMaxSize {
		return fmt.Errorf("dra.selectors: at most %d (with migProfile's), got %d", resourcev1.DeviceSelectorsMaxSize, n)
	}
	compiler := dracel.GetCompiler(dracel.Features{})
	for i, expr := range d.Selectors {
		if err := checkSelector(compiler, expr); err != nil {
			return fmt.Errorf("dra.selectors[%d] %q: %w", i, expr, err)
		}
	}
	return nil
}

// celCompiler is what checkSelector needs of the DRA CEL compiler (whose
// type is unexported).
type celCompiler interface {
	CompileCELExpression(expression string, options dracel.Options) dracel.CompilationResult
}

// checkSelector applies the API server's rules for a CEL device selector:
// it compiles to a bool in the DRA environment, within the length and cost
// limits.
func checkSelector(c celCompiler, expr string) error {
	if strings.TrimSpace(expr) == "" {
		return errors.New("empty expression; a selector is a CEL expression on device, e.g. device.attributes[\"gpu.nvidia.com\"].productName == \"NVIDIA H100 80GB HBM3\"")
	}
	if len(expr) > resourcev1.CELSelectorExpressionMaxLength {
		return fmt.Errorf("longer than %d characters", resourcev1.CELSelectorExpressionMaxLength)
	}
	res := c.CompileCELExpression(expr, dracel.Options{})
	if res.Error != nil {
		return fmt.Errorf("not a CEL device selector: %s (variables: device.driver, device.attributes[\"<domain>\"].<name>, device.capacity[\"<domain>\"].<name>)", res.Error.Detail)
	}
	if res.MaxCost > resourcev1.CELSelectorExpressionMaxCost {
		return fmt.Errorf("too expensive for the API server: estimated cost %d above its limit %d", res.MaxCost, resourcev1.CELSelectorExpressionMaxCost)
	}
	return nil
}

// selectors are the spec's selectors and the MIG profile's.
func (d *DRA) selectors() []string {
	out := append([]string(nil), d.Selectors...)
	if d.MIGProfile != "" {
		out = append(out, fmt.Sprintf("device.attributes[%s].profile == %s", strconv.Quote(GPUDriver), strconv.Quote(d.MIGProfile)))
	}
	return out
}

// IsDRA says whether the spec's devices come through DRA.
func (s Spec) IsDRA() bool { return s.DRA != nil }

// ClaimTemplate is the ResourceClaimTemplate the Pods of a DRA spec claim
// their devices from, in namespace: one request ClaimName of DRA.Count
// devices of the class matching every selector, all in one NVLink domain
// when asked. It shares nothing with s.
func (s Spec) ClaimTemplate(namespace string) *resourcev1.ResourceClaimTemplate {
	d := s.DRA
	req := &resourcev1.ExactDeviceRequest{
		DeviceClassName: d.DeviceClassName,
		AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
		Count:           d.Count,
	}
	for _, expr := range d.selectors() {
		req.Selectors = append(req.Selectors, resourcev1.DeviceSelector{CEL: &resourcev1.CELDeviceSelector{Expression: expr}})
	}
	claim := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{Name: ClaimName, Exactly: req}},
	}}
	if d.SameNVLinkDomain {
		claim.Devices.Constraints = []resourcev1.DeviceConstraint{{
			Requests:       []string{ClaimName},
			MatchAttribute: ptr.To(resourcev1.FullyQualifiedName(NVLinkDomainAttribute)),
		}}
	}
	labels := map[string]string{api.LabelManagedBy: api.ManagedByController, api.LabelGPUSpec: s.Name}
	return &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimTemplateName(s.Name), Namespace: namespace, Labels: labels},
		Spec: resourcev1.ResourceClaimTemplateSpec{
			// The generated claims name their spec for people reading
			// them; nothing trusts it (a claim's Pod is its owner).
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelGPUSpec: s.Name}},
			Spec:       claim,
		},
	}
}
