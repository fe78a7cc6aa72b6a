package catalog_test

import (
	"fmt"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/catalog"
)

// Parse reads the data of the ConfigMap runplane-gpu-specs: one YAML document
// per spec, with the GPU resource and the stock policy defaulted.
func ExampleParse() {
	c, err := catalog.Parse(map[string]string{
		"g1.1": "gpu: 1\ncpu: 8\nmemory: 64Gi\n",
		"g1.8": "gpu: 8\ncpu: 64\nmemory: 512Gi\nstock: Required\n",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := c["g1.1"]
	res := s.Resources()
	fmt.Println(c.Names(), s.GPUResource, s.Stock, c["g1.8"].Stock)
	fmt.Println(res.Cpu(), res.Memory(), res.Name(s.GPUResource, ""))
	// Output:
	// [g1.1 g1.8] nvidia.com/gpu Preferred Required
	// 8 64Gi 1
}

// Lookup names the label and the known specs when a Pod asks for a spec the
// catalog lacks.
func ExampleCatalog_Lookup() {
	c, _ := catalog.Parse(map[string]string{"g1.1": "gpu: 1\ncpu: 8\nmemory: 64Gi\n"})
	_, err := c.Lookup(api.LabelGPUSpec, "h100.8")
	fmt.Println(err)
	// Output: label runplane.io/gpu-spec: unknown GPU spec "h100.8"; known specs: g1.1
}

// A DRA spec asks for devices through Dynamic Resource Allocation: its Pods
// claim them from the ResourceClaimTemplate runplane-<spec> of their
// namespace, built here. Selectors are compiled as the API server would;
// a bad one names the spec, the key and the compiler's complaint.
func ExampleSpec_ClaimTemplate() {
	c, err := catalog.Parse(map[string]string{
		"h100.2": `cpu: 16
memory: 128Gi
dra:
  count: 2
  sameNVLinkDomain: true
  selectors:
  - device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"
`,
		"mig.1g": "cpu: 4\nmemory: 16Gi\ndra: {migProfile: 1g.10gb}\n",
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, name := range c.Names() {
		t := c[name].ClaimTemplate("team-a")
		req := t.Spec.Spec.Devices.Requests[0]
		fmt.Println(t.Name, req.Name, req.Exactly.DeviceClassName, req.Exactly.Count, len(req.Exactly.Selectors), len(t.Spec.Spec.Devices.Constraints))
	}
	_, err = catalog.ParseSpec("bad", "cpu: 1\nmemory: 1Gi\ndra: {count: 2, sameNVLinkDomain: true, selectors: [device.driver]}\n")
	fmt.Println(err)
	// Output:
	// runplane-h100.2 gpu gpu.nvidia.com 2 1 1
	// runplane-mig.1g gpu mig.nvidia.com 1 1 0
	// catalog spec "bad": dra.selectors[0] "device.driver": not a CEL device selector: must evaluate to bool or the unknown type, not string (variables: device.driver, device.attributes["<domain>"].<name>, device.capacity["<domain>"].<name>)
}
