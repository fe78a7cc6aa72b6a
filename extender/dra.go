package extender

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/labels"
	listersv1 "k8s.io/client-go/listers/resource/v1"
	"k8s.io/client-go/tools/cache"
	dracel "k8s.io/dynamic-resource-allocation/cel"

	"github.com/runplane/runplane/extender/ledger"
)

// draFeed feeds the ledger the DRA objects: ResourceSlices (a node's
// devices, classified by the DeviceClasses' CEL selectors, evaluated with
// the DRA library kube-scheduler uses) and ResourceClaims (allocated
// devices, a Pod's needs).
type draFeed struct {
	ledger *ledger.Ledger
	slices listersv1.ResourceSliceLister
	// mu guards classes: the compiled selectors of every DeviceClass.
	mu      sync.Mutex
	classes map[string][]dracel.CompilationResult
}

// draInformers registers the ledger's handlers on the DRA informers (and
// the DRA stock's on pods); it returns their registrations' HasSynced.
func (e *Extender) draInformers(pods, classInf, sliceInf, claimInf cache.SharedIndexInformer) ([]cache.InformerSynced, error) {
	d := &draFeed{ledger: e.ledger, classes: map[string][]dracel.CompilationResult{}}
	d.slices = listersv1.NewResourceSliceLister(sliceInf.GetIndexer())
	classReg, err := classInf.AddEventHandler(feed(d.upsertClass, d.deleteClass))
	if err != nil {
		return nil, fmt.Errorf("extender: deviceclass informer: %w", err)
	}
	sliceReg, err := sliceInf.AddEventHandler(feed(d.upsertSlice, func(s *resourcev1.ResourceSlice) { d.ledger.SetSlice(s.Name, "", nil) }))
	if err != nil {
		return nil, fmt.Errorf("extender: resourceslice informer: %w", err)
	}
	claimReg, err := claimInf.AddEventHandler(feed(func(c *resourcev1.ResourceClaim) { d.ledger.UpsertClaim(claimOf(c)) },
		func(c *resourcev1.ResourceClaim) { d.ledger.DeleteClaim(c.UID) }))
	if err != nil {
		return nil, fmt.Errorf("extender: resourceclaim informer: %w", err)
	}
	if err := e.draStockHandlers(claimInf, pods, listersv1.NewResourceClaimLister(claimInf.GetIndexer())); err != nil {
		return nil, err
	}
	return []cache.InformerSynced{classReg.HasSynced, sliceReg.HasSynced, claimReg.HasSynced}, nil
}

// upsertClass compiles a class's selectors and classifies every slice
// again: which class a device is in changed.
func (d *draFeed) upsertClass(c *resourcev1.DeviceClass) {
	compiled := make([]dracel.CompilationResult, 0, len(c.Spec.Selectors))
	for _, s := range c.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		r := dracel.GetCompiler(dracel.Features{}).CompileCELExpression(s.CEL.Expression, dracel.Options{})
		compiled = append(compiled, r) // a compile error matches no device (DeviceMatches fails)
	}
	d.mu.Lock()
	d.classes[c.Name] = compiled
	d.mu.Unlock()
	d.reclassify()
}

func (d *draFeed) deleteClass(c *resourcev1.DeviceClass) {
	d.mu.Lock()
	delete(d.classes, c.Name)
	d.mu.Unlock()
	d.reclassify()
}

// reclassify hands every known slice to the ledger again (the lister holds
// what the informer has seen so far; slices seen later come through
// upsertSlice).
func (d *draFeed) reclassify() {
	if d.slices == nil {
		return
	}
	all, err := d.slices.List(labels.Everything())
	if err != nil {
		return // a lister's List of its own store does not fail
	}
	for _, s := range all {
		d.upsertSlice(s)
	}
}

func (d *draFeed) upsertSlice(s *resourcev1.ResourceSlice) {
	node := ""
	if s.Spec.NodeName != nil {
		node = *s.Spec.NodeName
	}
	devices := make([]ledger.Device, 0, len(s.Spec.Devices))
	for i := range s.Spec.Devices {
		dev := &s.Spec.Devices[i]
		devices = append(devices, ledger.Device{
			ID:      ledger.DeviceID(s.Spec.Driver, s.Spec.Pool.Name, dev.Name),
			Classes: d.classify(s.Spec.Driver, dev),
		})
	}
	d.ledger.SetSlice(s.Name, node, devices)
}

// classify names the DeviceClasses whose every selector admits dev.
func (d *draFeed) classify(driver string, dev *resourcev1.Device) []string {
	in := dracel.Device{Driver: driver, Attributes: dev.Attributes, Capacity: dev.Capacity}
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for class, sels := range d.classes {
		ok := true
		for _, sel := range sels {
			if sel.Error != nil {
				ok = false
				break
			}
			match, _, err := sel.DeviceMatches(context.Background(), in)
			if err != nil || !match {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, class)
		}
	}
	sort.Strings(out)
	return out
}

// claimOf is what the ledger counts of a ResourceClaim: its Pods (owner
// and consumers), allocated devices, or, unallocated, its ExactCount
// requests per class (a prioritized list counts its first choice).
func claimOf(c *resourcev1.ResourceClaim) ledger.Claim {
	out := ledger.Claim{UID: c.UID, Namespace: c.Namespace, Name: c.Name}
	// The controller by UID, whatever kind it names (podOwner: as
	// kube-scheduler and the kubelet judge it); a UID that is no Pod's
	// matches no Pod in the ledger.
	if ref := podOwner(c); ref != nil {
		out.Pods = append(out.Pods, ref.UID)
	}
	if c.Status.Allocation != nil {
		for _, r := range c.Status.Allocation.Devices.Results {
			out.Devices = append(out.Devices, ledger.DeviceID(r.Driver, r.Pool, r.Device))
		}
	}
	for _, ref := range c.Status.ReservedFor {
		if ref.Resource == "pods" && !slices.Contains(out.Pods, ref.UID) {
			out.Pods = append(out.Pods, ref.UID)
		}
	}
	if len(out.Devices) > 0 {
		return out
	}
	for _, r := range c.Spec.Devices.Requests {
		var class string
		var count int64
		switch {
		case r.Exactly != nil && r.Exactly.AllocationMode != resourcev1.DeviceAllocationModeAll:
			class, count = r.Exactly.DeviceClassName, max(r.Exactly.Count, 1)
		case len(r.FirstAvailable) > 0 && r.FirstAvailable[0].AllocationMode != resourcev1.DeviceAllocationModeAll:
			class, count = r.FirstAvailable[0].DeviceClassName, max(r.FirstAvailable[0].Count, 1)
		default:
			continue
		}
		if out.Needs == nil {
			out.Needs = map[string]int64{}
		}
		out.Needs[class] += count
	}
	return out
}
