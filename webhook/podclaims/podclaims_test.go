package podclaims

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/catalog"
)

// claims is a namespace's claims by name; err fails every lookup.
type claims struct {
	byName map[string]*resourcev1.ResourceClaim
	err    error
}

func (c claims) GetResourceClaim(_ context.Context, _, name string) (*resourcev1.ResourceClaim, error) {
	if c.err != nil {
		return nil, c.err
	}
	return c.byName[name], nil
}

func claim(name string, reqs ...resourcev1.DeviceRequest) *resourcev1.ResourceClaim {
	return &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{Requests: reqs}}}
}

func exactly(name, class string) resourcev1.DeviceRequest {
	return resourcev1.DeviceRequest{Name: name, Exactly: &resourcev1.ExactDeviceRequest{DeviceClassName: class}}
}

func firstAvailable(name string, classes ...string) resourcev1.DeviceRequest {
	r := resourcev1.DeviceRequest{Name: name}
	for i, c := range classes {
		r.FirstAvailable = append(r.FirstAvailable, resourcev1.DeviceSubRequest{Name: string(rune('a' + i)), DeviceClassName: c})
	}
	return r
}

func pod(refs ...corev1.PodResourceClaim) *corev1.Pod {
	return &corev1.Pod{Spec: corev1.PodSpec{ResourceClaims: refs, Containers: []corev1.Container{{Name: "main"}}}}
}

func byName(name, claim string) corev1.PodResourceClaim {
	return corev1.PodResourceClaim{Name: name, ResourceClaimName: ptr.To(claim)}
}

func TestCheck(t *testing.T) {
	gpuClasses := []string{catalog.GPUDeviceClass, catalog.MIGDeviceClass}
	have := claims{byName: map[string]*resourcev1.ResourceClaim{
		"gpu-pod-gpu-x7k2q": claim("gpu-pod-gpu-x7k2q", exactly("gpu", catalog.GPUDeviceClass)),
		"mig":               claim("mig", exactly("nic", "nic.example.com"), exactly("part", catalog.MIGDeviceClass)),
		"fallback":          claim("fallback", firstAvailable("dev", "nic.example.com", catalog.GPUDeviceClass)),
		"nic":               claim("nic", exactly("nic", "nic.example.com"), firstAvailable("alt", "rdma.example.com")),
	}}
	tests := []struct {
		name    string
		pod     *corev1.Pod
		claims  claims
		denied  []string // parts of the denial
		lookErr bool     // a lookup error, not a denial
	}{
		{name: "no claims", pod: pod()},
		{name: "a claim from a template is not looked up", pod: pod(corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To("runplane-h100")}),
			claims: claims{err: errors.New("not called")}},
		{name: "another Pod's GPU claim", pod: pod(byName("stolen", "gpu-pod-gpu-x7k2q")),
			denied: []string{`spec.resourceClaims[stolen].resourceClaimName names ResourceClaim "gpu-pod-gpu-x7k2q"`,
				"spec.devices.requests[gpu].exactly.deviceClassName gpu.nvidia.com is a GPU DeviceClass"}},
		{name: "a MIG partition among other requests", pod: pod(byName("n", "nic"), byName("m", "mig")),
			denied: []string{"spec.resourceClaims[m].resourceClaimName", "spec.devices.requests[part].exactly.deviceClassName mig.nvidia.com"}},
		{name: "a GPU among firstAvailable", pod: pod(byName("f", "fallback")),
			denied: []string{"spec.devices.requests[dev].firstAvailable[b].deviceClassName gpu.nvidia.com"}},
		{name: "a claim of other classes", pod: pod(byName("n", "nic"))},
		{name: "a claim that does not exist yet", pod: pod(byName("later", "gpu-pod-gpu-abcde")),
			denied: []string{`spec.resourceClaims[later].resourceClaimName names ResourceClaim "gpu-pod-gpu-abcde", which does not exist in namespace team-a`, "create the claim first"}},
		{name: "the lookup fails", pod: pod(byName("n", "nic")), claims: claims{err: errors.New("connection refused")}, lookErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.claims
			if c.byName == nil && c.err == nil {
				c = have
			}
			err := Check(context.Background(), tt.pod, "team-a", c, gpuClasses)
			denial, isDenial := errors.AsType[*DeniedError](err)
			switch {
			case tt.lookErr:
				require.Error(t, err)
				assert.False(t, isDenial, "a failed lookup is no denial: %v", err)
				assert.ErrorContains(t, err, `looking up ResourceClaim team-a/"nic" that spec.resourceClaims[n].resourceClaimName names: connection refused`)
			case tt.denied == nil:
				require.NoError(t, err)
			default:
				require.True(t, isDenial, "want a denial, got %v", err)
				for _, part := range tt.denied {
					assert.Contains(t, denial.Error(), part)
				}
			}
		})
	}
}

// countingClaims counts the lookups of an inner ClaimGetter.
type countingClaims struct {
	claims
	gets *int
}

func (c countingClaims) GetResourceClaim(ctx context.Context, ns, name string) (*resourcev1.ResourceClaim, error) {
	*c.gets++
	return c.claims.GetResourceClaim(ctx, ns, name)
}

// A Pod naming one claim many times costs one lookup; a Pod naming more
// distinct claims than MaxNamedClaims costs none and is refused (each
// lookup is a live GET on the webhook's API flow, which every tenant's
// admission shares).
func TestCheckBoundsLookups(t *testing.T) {
	nic := claims{byName: map[string]*resourcev1.ResourceClaim{"nic": claim("nic", exactly("nic", "nic.example.com"))}}
	var same, many []corev1.PodResourceClaim
	for i := range 100 {
		same = append(same, byName(fmt.Sprintf("c%d", i), "nic"))
	}
	for i := range MaxNamedClaims + 1 {
		many = append(many, byName(fmt.Sprintf("c%d", i), fmt.Sprintf("nic-%d", i)))
	}
	gets := 0
	require.NoError(t, Check(context.Background(), pod(same...), "team-a", countingClaims{nic, &gets}, nil))
	assert.Equal(t, 1, gets, "one lookup for one claim named 100 times")

	gets = 0
	err := Check(context.Background(), pod(many...), "team-a", countingClaims{nic, &gets}, nil)
	denial, ok := errors.AsType[*DeniedError](err)
	require.True(t, ok, "want a denial, got %v", err)
	assert.Equal(t, "spec.resourceClaims", denial.Field)
	assert.Contains(t, denial.Error(), fmt.Sprintf("name at most %d claims", MaxNamedClaims))
	assert.Zero(t, gets, "refused before any lookup")
}

func TestClasses(t *testing.T) {
	cat := catalog.Catalog{}
	for name, doc := range map[string]string{
		"g1":       "gpu: 1\ncpu: \"8\"\nmemory: 32Gi\n",
		"h100":     "cpu: \"8\"\nmemory: 32Gi\ndra: {}\n",
		"amd":      "cpu: \"8\"\nmemory: 32Gi\ndra: {deviceClassName: gpu.amd.com}\n",
		"h100-mig": "cpu: \"8\"\nmemory: 32Gi\ndra: {migProfile: 1g.10gb}\n",
	} {
		s, err := catalog.ParseSpec(name, doc)
		require.NoError(t, err, name)
		cat[name] = s
	}
	assert.Equal(t, []string{"gpu.amd.com", "gpu.example.com", catalog.GPUDeviceClass, catalog.MIGDeviceClass},
		Classes([]string{catalog.GPUDeviceClass, "gpu.example.com"}, cat))
}
