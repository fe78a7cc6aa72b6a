package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runplane/runplane/test/kit"
	"github.com/runplane/runplane/test/runplanebin"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender"
	"github.com/runplane/runplane/extender/config"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/test/cluster"
	"github.com/runplane/runplane/test/scrape"
)

var env *cluster.Cluster

func TestMain(m *testing.M) {
	cluster.Main(m, cluster.Options{}, func(c *cluster.Cluster) { env = c })
}

// catalogData is the test catalog: two Preferred specs and a Required one.
var catalogData = map[string]string{
	"g1":   "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
	"g2":   "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
	"greq": "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\nstock: Required\n",
	"g4":   "gpu: 4\ncpu: \"16\"\nmemory: 64Gi\n",
	"g8":   "gpu: 8\ncpu: \"32\"\nmemory: 128Gi\n",
	// g1.1: make dev's spec (TestPreemptionMakesProgress).
	"g1.1": "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
	// gstatus: only TestStockStatusCondition's placeholders, so its counts
	// are its own.
	"gstatus": "gpu: 1\ncpu: \"4\"\nmemory: 16Gi\n",
	// mig1: one MIG slice and no whole GPU; nv4: four GPUs in one NVLink
	// domain (TestMIGSpec, TestNVLinkSpec).
	"mig1": "gpu: 0\ncpu: \"2\"\nmemory: 8Gi\nresources: {" + migResource + ": 1}\n",
	"nv4":  "gpu: 4\ncpu: \"16\"\nmemory: 64Gi\nnvlink: true\n",
	// d1: the Pods of a DRA spec (dra_test.go) name it; what the catalog
	// says of its devices is the webhook's business, not the extender's.
	"d1": "gpu: 0\ncpu: \"4\"\nmemory: 16Gi\n",
}

// migResource is the MIG slice the harness's scheduler and extender manage
// besides nvidia.com/gpu.
const migResource = "nvidia.com/mig-1g.10gb"

// managed are the resources the harness's extenders manage (the shared
// catalog's).
var managed = []corev1.ResourceName{api.DefaultGPUResource, migResource}

// harness is the extender process and the runplane-scheduler, shared by the
// tests of the package (each test uses its own namespace and nodes).
type harness struct {
	client kubernetes.Interface
	bin    string
	addr   string
	// config is the extender's configuration file.
	config string
	https  *http.Client
	// scrapers: the reader's token reads /metrics.
	scrapers scrape.Scrapers
	// pprof is the extender's net/http/pprof address; schedulerPort the
	// runplane-scheduler's secure port (its /debug/pprof): the benchmarks
	// profile both when RUNPLANE_BENCH_PROFILE_DIR is set.
	pprof         string
	schedulerPort string
	// leaseNamespace/leaseName is the extender's Lease (expireLease).
	leaseNamespace, leaseName string
	mu                        sync.Mutex
	proc                      *exec.Cmd
	exited                    chan struct{}
	restart                   int
	// crashes counts the times the extender exited on its own and was
	// restarted.
	crashes int
}

var (
	setupOnce sync.Once
	shared    *harness
	setupErr  error
)

func setup(t testing.TB) *harness {
	t.Helper()
	setupOnce.Do(func() { shared, setupErr = newHarness() })
	require.NoError(t, setupErr, "setup")
	return shared
}

func newHarness() (*harness, error) {
	ctx := context.Background()
	c := env.Client()
	h := &harness{client: c}
	if err := env.CreateNamespace(ctx, api.DefaultNamespace); err != nil {
		return nil, err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: api.CatalogConfigMap, Namespace: api.DefaultNamespace}, Data: catalogData}
	if _, err := c.CoreV1().ConfigMaps(api.DefaultNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating catalog: %w", err)
	}
	// What the chart installs: placeholders lowest, workloads above.
	for name, value := range map[string]int32{api.PriorityClassStock: -100, api.PriorityClassWorkload: 1000,
		api.PriorityClassWorkloadHigh: 2000, api.PriorityClassBatch: 100} {
		pc := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: name}, Value: value}
		if _, err := c.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("creating PriorityClass %s: %w", name, err)
		}
	}
	bin, err := runplanebin.Dir(ctx, env.Dir(), "runplane-extender")
	if err != nil {
		return nil, err
	}
	h.bin = filepath.Join(bin, "runplane-extender")
	ports, err := kit.FreePorts("127.0.0.1", 2)
	if err != nil {
		return nil, err
	}
	h.addr, h.pprof = "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	ec := configfile.New[config.ExtenderConfiguration]()
	ec.TLS.CertFile, ec.TLS.KeyFile = filepath.Join(env.Dir(), "extender.crt"), filepath.Join(env.Dir(), "extender.key")
	caPEM, err := extender.WriteSelfSignedCert(ec.TLS.CertFile, ec.TLS.KeyFile, []string{"127.0.0.1"})
	if err != nil {
		return nil, err
	}
	// The default Lease timings: shorter ones (4s) lost the Lease, and so
	// the extender, whenever the shared machine was loaded.
	ec.Addr, ec.PprofAddr, ec.ManagedResources = h.addr, h.pprof, managed
	h.leaseNamespace, h.leaseName = ec.Namespace, ec.LeaderElection.ResourceName
	ec.Stock.Namespace, ec.Stock.StatusPeriod.Duration = stockStatusNamespace, 500*time.Millisecond
	h.config = filepath.Join(env.Dir(), "extender.yaml")
	if err := configfile.WriteFile(h.config, ec); err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	h.https = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	if h.scrapers, err = scrape.New(ctx, env); err != nil {
		return nil, err
	}
	if err := h.startExtender(ctx); err != nil {
		return nil, err
	}
	cfg, err := profile.SchedulerConfig(profile.Options{URLPrefix: "https://" + h.addr, CAData: caPEM, ManagedResources: []string{migResource}, DRA: true})
	if err != nil {
		return nil, err
	}
	sched, err := env.StartScheduler(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("starting runplane-scheduler: %w", err)
	}
	h.schedulerPort = strings.TrimPrefix(sched.Name, "kube-scheduler-")
	return h, nil
}

// startExtender runs the extender binary and waits until it is ready and
// leads.
func (h *harness) startExtender(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.restart++
	logPath := filepath.Join(env.Dir(), fmt.Sprintf("runplane-extender-%d.log", h.restart))
	logFile, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("creating extender log: %w", err)
	}
	cmd := exec.Command(h.bin, "--kubeconfig="+env.Kubeconfig(), "--config="+h.config)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("starting extender: %w", err)
	}
	h.proc, h.exited = cmd, make(chan struct{})
	exited := h.exited
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
		h.mu.Lock()
		crashed := h.proc == cmd // not ended by killExtender
		if crashed {
			h.proc = nil
			h.crashes++
		}
		h.mu.Unlock()
		if crashed {
			// A leader that misses its Lease renewal exits (the short
			// test Lease, on a loaded machine); restart it, as the kubelet
			// restarts the container.
			fmt.Fprintf(os.Stderr, "runplane-extender exited (%s); restarting\n", cmd.ProcessState)
			if err := h.startExtender(context.Background()); err != nil {
				fmt.Fprintf(os.Stderr, "restarting runplane-extender: %v\n", err)
			}
		}
	}()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case <-exited:
			return false, errors.New("extender exited during startup")
		default:
		}
		body, err := h.get("/metrics")
		return err == nil && containsLine(body, "runplane_extender_leader 1"), nil
	})
	if err != nil {
		data, _ := os.ReadFile(logPath)
		return fmt.Errorf("extender not leading: %w\n%s", err, data)
	}
	return nil
}

// killExtender ends the extender the hard way: no lease release, no
// graceful end of in-flight binds.
func (h *harness) killExtender() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc != nil {
		_ = h.proc.Process.Kill()
		<-h.exited
		h.proc = nil
	}
}

// expireLease makes the killed extender's Lease run out now instead of
// after its 15 s: its record says 1 s (the holder stays the dead one, no
// release), and a candidate, which times a record from the moment it sees
// it change, takes the Lease at its next try (2 s). For the tests of a new
// leader, to which how long the Lease lasts is no matter.
func (h *harness) expireLease(ctx context.Context) error { return h.leaseLasts(ctx, 1) }

// holdLease makes the killed extender's Lease last an hour from now: the
// next extender does not lead until expireLease, whatever the load.
func (h *harness) holdLease(ctx context.Context) error { return h.leaseLasts(ctx, 3600) }

func (h *harness) leaseLasts(ctx context.Context, seconds int) error {
	leases := h.client.CoordinationV1().Leases(h.leaseNamespace)
	patch := []byte(fmt.Sprintf(`{"spec":{"leaseDurationSeconds":%d}}`, seconds))
	if _, err := leases.Patch(ctx, h.leaseName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("setting the extender's Lease to %d s: %w", seconds, err)
	}
	return nil
}

// get reads path as the metrics reader.
func (h *harness) get(path string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, "https://"+h.addr+path, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+h.scrapers.Reader)
	resp, err := h.https.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(body), nil
}

func containsLine(body, line string) bool { return slices.Contains(strings.Split(body, "\n"), line) }

const groupLabel = "e2e.runplane.io/group"

// addNodes creates count kwok nodes of gpus GPUs, labelled with group so
// only the test's Pods (which select the group) land there.
func addNodes(t testing.TB, group string, count, gpus int) []string {
	t.Helper()
	var nodes []cluster.Node
	var names []string
	for i := range count {
		n := fmt.Sprintf("%s-%d", group, i)
		names = append(names, n)
		nodes = append(nodes, cluster.Node{Name: n, GPUs: gpus, Labels: map[string]string{groupLabel: group}})
	}
	require.NoError(t, env.AddNodes(t.Context(), nodes...))
	return names
}

func specResources() corev1.ResourceRequirements {
	list := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("16Gi"),
		api.DefaultGPUResource: resource.MustParse("1"),
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}
}

// podSpec is a Pod in the shape the webhook gives it.
func podSpec(group, priorityClass string, grace int64) corev1.PodSpec {
	return corev1.PodSpec{
		SchedulerName:                 api.SchedulerName,
		PriorityClassName:             priorityClass,
		TerminationGracePeriodSeconds: &grace,
		NodeSelector:                  map[string]string{groupLabel: group},
		Containers:                    []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10", Resources: specResources()}},
	}
}

// gpuPod is a GPU workload of spec, already mutated.
func gpuPod(name, spec, group string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.LabelGPUSpec: spec}},
		Spec:       podSpec(group, api.PriorityClassWorkload, 30),
	}
}

// placeholderTemplate is a stock placeholder of spec, already mutated.
func placeholderTemplate(spec, group, app string) corev1.PodTemplateSpec {
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{api.LabelStock: spec, "app": app}},
		Spec:       podSpec(group, api.PriorityClassStock, 0),
	}
}

// poll is the interval of the tests' waits for the cluster.
const poll = 100 * time.Millisecond
