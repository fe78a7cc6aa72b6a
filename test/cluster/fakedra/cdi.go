package fakedra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDI names as NVIDIA's driver uses them for per-claim devices: vendor
// "k8s.<driver>", class "claim", one CDI device "<claim UID>-<device>" per
// allocated GPU.
const (
	CDIVendor = "k8s." + DriverName
	CDIClass  = "claim"
	CDIKind   = CDIVendor + "/" + CDIClass
)

// CDIDeviceID is the fully qualified CDI name of device in claim, as the
// kubelet hands it to the container runtime.
func CDIDeviceID(claim types.UID, device string) string {
	return CDIKind + "=" + cdiDeviceName(claim, device)
}

func cdiDeviceName(claim types.UID, device string) string { return string(claim) + "-" + device }

// SpecFile is where the driver writes the CDI spec of a prepared claim
// in dir; it exists exactly while the claim is prepared.
func SpecFile(dir string, claim types.UID) string { return specFile(dir, claim) }

// specFile is the claim's spec file in dir, named as the CDI library
// names transient specs ("<vendor>-<class>_<id>.json"), so that a
// runtime's CDI cache sees one file per claim.
func specFile(dir string, claim types.UID) string {
	return filepath.Join(dir, CDIVendor+"-"+CDIClass+"_"+string(claim)+".json")
}

// allocated is one GPU of a claim on this node.
type allocated struct {
	request string
	name    string
	index   int
}

// allocatedGPUs are the claim's devices from this driver, sorted by index.
// A device of this driver in another pool (node), or not one of count,
// is an error: the allocation cannot be prepared here.
func allocatedGPUs(claim *resourceapi.ResourceClaim, pool string, count int) ([]allocated, error) {
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s/%s is not allocated", claim.Namespace, claim.Name)
	}
	var gpus []allocated
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != DriverName {
			continue
		}
		if r.Pool != pool {
			return nil, fmt.Errorf("claim %s/%s: device %s is in pool %q, this node's pool is %q", claim.Namespace, claim.Name, r.Device, r.Pool, pool)
		}
		i, err := deviceIndex(r.Device, count)
		if err != nil {
			return nil, fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)
		}
		gpus = append(gpus, allocated{request: r.Request, name: r.Device, index: i})
	}
	sort.Slice(gpus, func(a, b int) bool { return gpus[a].index < gpus[b].index })
	return gpus, nil
}

// claimSpec is the CDI spec of a claim's GPUs on node: per GPU a device
// node at DevicePath bound to hostDevice, and for the whole claim
// NVIDIA_VISIBLE_DEVICES listing the GPUs' UUIDs in index order. (NVIDIA's
// driver sets it to "void" and leaves the devices to CDI, since its
// container toolkit would otherwise act on it too; with no toolkit here,
// it names what a workload would see, as the device plugin does.)
func claimSpec(claim types.UID, node, hostDevice string, gpus []allocated) (*cdispec.Spec, error) {
	spec := &cdispec.Spec{Kind: CDIKind}
	uuids := make([]string, 0, len(gpus))
	for _, g := range gpus {
		uuids = append(uuids, GPUUUID(node, g.index))
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name: cdiDeviceName(claim, g.name),
			ContainerEdits: cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{
				Path: DevicePath(g.index), HostPath: hostDevice, Permissions: "rw",
			}}},
		})
	}
	spec.ContainerEdits.Env = []string{"NVIDIA_VISIBLE_DEVICES=" + strings.Join(uuids, ",")}
	v, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, fmt.Errorf("CDI spec version of claim %s: %w", claim, err)
	}
	spec.Version = v
	return spec, nil
}

// writeSpec writes the claim's spec into dir atomically (a rename), so a
// runtime watching dir never reads half a file.
func writeSpec(dir string, claim types.UID, spec *cdispec.Spec) error {
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding CDI spec of claim %s: %w", claim, err)
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("writing CDI spec of claim %s: %w", claim, err)
	}
	if _, err := tmp.Write(data); err != nil {
		_ = tmp.Close()
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing CDI spec of claim %s: %w", claim, err)
	}
	if err := tmp.Close(); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing CDI spec of claim %s: %w", claim, err)
	}
	if err := os.Rename(tmp.Name(), specFile(dir, claim)); err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// removeSpec removes the claim's spec; a missing one is already removed.
func removeSpec(dir string, claim types.UID) error {
	if err := os.Remove(specFile(dir, claim)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing CDI spec of claim %s: %w", claim, err)
	}
	return nil
}

// preparedDevices maps each device prepared in dir's claim specs to its
// claim. The spec files are the driver's only state, so a restarted
// driver knows what is prepared.
func preparedDevices(dir string) (map[string]types.UID, error) {
	files, err := filepath.Glob(filepath.Join(dir, CDIVendor+"-"+CDIClass+"_*.json"))
	if err != nil {
		return nil, fmt.Errorf("listing CDI specs: %w", err)
	}
	held := map[string]types.UID{}
	for _, f := range files {
		claim := types.UID(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), CDIVendor+"-"+CDIClass+"_"), ".json"))
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading CDI spec %s: %w", f, err)
		}
		var spec cdispec.Spec
		if err := json.Unmarshal(data, &spec); err != nil {
			return nil, fmt.Errorf("reading CDI spec %s: %w", f, err)
		}
		for _, d := range spec.Devices {
			held[strings.TrimPrefix(d.Name, string(claim)+"-")] = claim
		}
	}
	return held, nil
}
