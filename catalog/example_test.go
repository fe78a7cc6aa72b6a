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
