package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	configv1 "k8s.io/kube-scheduler/config/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/extender/profile"
	"github.com/runplane/runplane/hack/images"
	"github.com/runplane/runplane/test/kit"
)

// KubernetesVersion is the version of the control-plane binaries.
const KubernetesVersion = "v1.37.2"

// Node is a fake (kwok-managed) node.
type Node struct {
	Name string
	// CPU, Memory and Pods default to 32, 256Gi and 110.
	CPU, Memory string
	Pods        int
	// GPUs is the node's count of GPUResource (default nvidia.com/gpu).
	GPUs        int
	GPUResource corev1.ResourceName
	// Extended are more extended resources, e.g. MIG slices
	// {nvidia.com/mig-1g.10gb: 7}.
	Extended map[corev1.ResourceName]int64
	Labels   map[string]string
	Taints   []corev1.Taint
	// DRAGPUs are GPUs published through Dynamic Resource Allocation: a
	// ResourceSlice of driver gpu.nvidia.com, pool = the node's name (see
	// GPUSlice), for claims of DeviceClass gpu.nvidia.com. They are beside
	// GPUs (node allocatable); a node managed through DRA alone has GPUs 0.
	DRAGPUs int
	// NVLinkDomain, when set, is every DRA GPU's runplane.io/nvlinkDomain.
	NVLinkDomain string
}

// Options configure a cluster.
type Options struct {
	// Nodes are created once the control plane serves.
	Nodes []Node
	// Dir is where state and logs go; a new temp dir when empty.
	Dir string
	// KeepDir keeps Dir after Stop (make dev sets it to let users read logs).
	KeepDir bool
	// Logf receives progress lines; silent when nil.
	Logf func(format string, args ...any)
	// RealNodes is how many real kubelet nodes to start beside the kwok
	// nodes (see realnode.go): tainted RealNodeTaint, RealNodeGPUs fake GPUs
	// each, the images of hack/images imported. Root only: Start fails with
	// RealNodeSupport's reason elsewhere.
	RealNodes int
	// RealNodeDRA also runs the fake DRA driver (test/cluster/fakedra) on
	// each real node: RealNodeGPUs more fake GPUs, published as a
	// ResourceSlice of driver gpu.nvidia.com (pool = node name) and
	// prepared through CDI; the DeviceClasses gpu.nvidia.com and
	// mig.nvidia.com are created. See realnode_dra.go.
	RealNodeDRA bool
	// ExtraImages builds more images into the real nodes' image archive
	// (tmp is a scratch dir for their layers), e.g. images.NATS for a chart
	// install; the standard images of hack/images are always there.
	ExtraImages func(tmp string) ([]images.Image, error)
	// PodTerminationBound bounds how long a deleted kwok Pod stays
	// Terminating: min(its grace period, this); default
	// DefaultPodTerminationBound. See stages/pod-delete-graceful.yaml.
	PodTerminationBound time.Duration
}

// Cluster is a running local control plane.
type Cluster struct {
	dir        string
	keepDir    bool
	bin        string
	kubeconfig string
	restConfig *rest.Config
	client     kubernetes.Interface
	pki        *certFiles
	logf       func(string, ...any)
	// extraImages is Options.ExtraImages.
	extraImages func(tmp string) ([]images.Image, error)
	// realNodeDRA is Options.RealNodeDRA.
	realNodeDRA bool

	// kwok is the process that makes kwok nodes Ready and runs their Pods.
	kwok      *Process
	mu        sync.Mutex
	processes []*Process
	realNodes []*RealNode
	// realNets are the real nodes' networks, chosen before the apiserver
	// starts (it advertises the first one's host address); apiPort is its port.
	realNets []nodeNet
	apiPort  int
	cancel   context.CancelFunc
}

// Dir is the cluster's working directory (state, logs, PV contents).
func (c *Cluster) Dir() string { return c.dir }

// Kubeconfig is the path of an admin kubeconfig for the cluster.
func (c *Cluster) Kubeconfig() string { return c.kubeconfig }

// RESTConfig returns a copy of the admin client configuration.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// Client is an admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Binary returns the path of a testbin binary (kubectl, helm, nats-server...).
func (c *Cluster) Binary(name string) string { return filepath.Join(c.bin, name) }

// CAFile is the path of the cluster CA, which signed the apiserver's certificate.
func (c *Cluster) CAFile() string { return c.pki.caFile }

// Processes lists the processes the cluster started, in start order.
func (c *Cluster) Processes() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.processes...)
}

func (c *Cluster) start(name, bin string, args ...string) (*Process, error) {
	return c.startCommand(name, filepath.Join(c.bin, bin), args...)
}

// startCommand starts a command by path or by name in PATH.
func (c *Cluster) startCommand(name, bin string, args ...string) (*Process, error) {
	p, err := startProcess(c.dir, name, bin, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.processes = append(c.processes, p)
	c.mu.Unlock()
	return p, nil
}

// Start brings up etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok and the PVC provisioner, and creates opts.Nodes. On
// error everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	began := time.Now()
	bin, err := Binaries(ctx)
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "runplane-cluster-"); err != nil {
			return nil, fmt.Errorf("creating cluster dir: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cluster dir: %w", err)
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	c := &Cluster{dir: dir, keepDir: opts.KeepDir || opts.Dir != "", bin: bin, logf: logf, extraImages: opts.ExtraImages, realNodeDRA: opts.RealNodeDRA}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.pki, err = newPKI(dir); err != nil {
		return nil, err
	}
	ports, err := kit.FreePorts("127.0.0.1", 6)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort, kcmPort, schedPort, kwokPort := ports[0], ports[1], ports[2], ports[3], ports[4], ports[5]
	c.apiPort = apiPort
	if opts.RealNodes > 0 {
		if c.realNets, err = planRealNodes(opts.RealNodes, logf); err != nil {
			return nil, err
		}
	}
	if err := c.startEtcd(ctx, etcdPort, peerPort); err != nil {
		return nil, err
	}
	if err := c.startAPIServer(ctx, apiPort, etcdPort); err != nil {
		return nil, err
	}
	if _, err := c.start("kube-controller-manager", "kube-controller-manager",
		"--kubeconfig="+c.kubeconfig, "--authentication-kubeconfig="+c.kubeconfig, "--authorization-kubeconfig="+c.kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(kcmPort),
		"--service-account-private-key-file="+c.pki.serviceAccountKey, "--root-ca-file="+c.pki.caFile,
		"--use-service-account-credentials=false", "--controllers=*", "--concurrent-deployment-syncs=10",
		"--concurrent-replicaset-syncs=10", "--concurrent-job-syncs=10", "--kube-api-qps=500", "--kube-api-burst=1000",
	); err != nil {
		return nil, err
	}
	if _, err := c.start("kube-scheduler", "kube-scheduler",
		"--kubeconfig="+c.kubeconfig, "--authentication-kubeconfig="+c.kubeconfig, "--authorization-kubeconfig="+c.kubeconfig,
		"--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(schedPort),
	); err != nil {
		return nil, err
	}
	bound := opts.PodTerminationBound
	if bound <= 0 {
		bound = DefaultPodTerminationBound
	}
	if err := c.startKwok(kwokPort, bound); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go runProvisioner(runCtx, c.client, filepath.Join(dir, "volumes"), logf)
	if err := c.createDeviceClasses(ctx); err != nil {
		return nil, err
	}
	if err := c.AddNodes(ctx, opts.Nodes...); err != nil {
		return nil, err
	}
	if opts.RealNodes > 0 {
		if err := c.startRealNodes(ctx); err != nil {
			return nil, err
		}
	}
	if err := c.waitServiceAccount(ctx, "default"); err != nil {
		return nil, err
	}
	logf("cluster: serving in %s (dir %s)", time.Since(began).Round(100*time.Millisecond), dir)
	return c, nil
}

func (c *Cluster) startEtcd(ctx context.Context, port, peerPort int) error {
	client := "http://127.0.0.1:" + strconv.Itoa(port)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	p, err := c.start("etcd", "etcd",
		"--data-dir="+filepath.Join(c.dir, "etcd"), "--name=default",
		"--listen-client-urls="+client, "--advertise-client-urls="+client,
		"--listen-peer-urls="+peer, "--initial-advertise-peer-urls="+peer, "--initial-cluster=default="+peer,
		"--unsafe-no-fsync", "--log-level=warn", "--quota-backend-bytes=4294967296",
	)
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return waitFor(waitCtx, p, "etcd health", func() error {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("etcd /health: %s", resp.Status)
		}
		return nil
	})
}

func (c *Cluster) startAPIServer(ctx context.Context, port, etcdPort int) error {
	host := "https://127.0.0.1:" + strconv.Itoa(port)
	// With real nodes the apiserver listens where their namespaces reach
	// the host, advertises (as the kubernetes Service's endpoint) the first
	// node's host address, and calls webhooks at their Pods' IPs: the host
	// has no route to Service VIPs, only the nodes do.
	// Without them nothing runs in a Pod, so the kubernetes Service needs no
	// endpoint: kube-apiserver 1.37 refuses a loopback advertise address to
	// its endpoint reconciler ("may not be in the loopback range").
	bind, advertise, routing, reconciler := "127.0.0.1", "127.0.0.1", "false", "none"
	if len(c.realNets) > 0 {
		bind, advertise, routing, reconciler = "0.0.0.0", c.realNets[0].hostIP, "true", "lease"
	}
	p, err := c.start("kube-apiserver", "kube-apiserver",
		"--etcd-servers=http://127.0.0.1:"+strconv.Itoa(etcdPort),
		"--bind-address="+bind, "--advertise-address="+advertise, "--enable-aggregator-routing="+routing, "--secure-port="+strconv.Itoa(port),
		"--endpoint-reconciler-type="+reconciler,
		"--tls-cert-file="+c.pki.servingCert, "--tls-private-key-file="+c.pki.servingKey,
		"--client-ca-file="+c.pki.caFile,
		"--authorization-mode=RBAC", "--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file="+c.pki.serviceAccountPub,
		"--service-account-signing-key-file="+c.pki.serviceAccountKey,
		"--service-cluster-ip-range=10.96.0.0/16",
		"--enable-admission-plugins=MutatingAdmissionWebhook,ValidatingAdmissionWebhook,ServiceAccount,Priority,NamespaceLifecycle",
		"--max-requests-inflight=1000", "--max-mutating-requests-inflight=500",
		"--enable-priority-and-fairness=false", "--v=1",
		// /debug/pprof for cluster-admin (the benchmarks' RUNPLANE_BENCH_PROFILE_DIR):
		// served only when asked, it costs nothing otherwise.
		"--profiling=true",
		// Real nodes are reached at their InternalIP (their names do not resolve).
		"--kubelet-preferred-address-types=InternalIP,Hostname",
	)
	if err != nil {
		return err
	}
	cfg := &clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: host, CertificateAuthorityData: c.pki.caPEM}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"admin": {ClientCertificateData: c.pki.adminCertPEM, ClientKeyData: c.pki.adminKeyPEM}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "admin"}},
		CurrentContext: "local",
	}
	c.kubeconfig = filepath.Join(c.dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, c.kubeconfig); err != nil {
		return fmt.Errorf("writing kubeconfig: %w", err)
	}
	if c.restConfig, err = clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig(); err != nil {
		return fmt.Errorf("building client config: %w", err)
	}
	c.restConfig.QPS, c.restConfig.Burst = 500, 1000
	if c.client, err = kubernetes.NewForConfig(c.restConfig); err != nil {
		return fmt.Errorf("building client: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	return waitFor(waitCtx, p, "kube-apiserver /readyz", func() error {
		body, err := c.client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(waitCtx)
		if err != nil {
			return fmt.Errorf("%w: %s", err, body)
		}
		// The default service account and priority classes come from
		// post-start hooks; /readyz covers them.
		return nil
	})
}

func (c *Cluster) startKwok(port int, terminationBound time.Duration) error {
	stages := filepath.Join(c.dir, "kwok-stages.yaml")
	if err := writeStages(filepath.Join(c.bin, "kwok-stages"), stages, terminationBound); err != nil {
		return err
	}
	var err error
	c.kwok, err = c.start("kwok", "kwok",
		"--kubeconfig="+c.kubeconfig, "--config="+stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--node-ip=127.0.0.1", "--cidr=10.244.0.1/16", "--node-lease-duration-seconds=40",
		"--server-address=127.0.0.1:"+strconv.Itoa(port),
	)
	return err
}

// AddNodes creates kwok-managed nodes and waits until they are Ready.
func (c *Cluster) AddNodes(ctx context.Context, nodes ...Node) error {
	for _, n := range nodes {
		if err := c.createNode(ctx, n); err != nil {
			return err
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, n := range nodes {
		// kwok makes the node Ready: if it exits, say so with its log
		// at once (a node never Ready said nothing of why).
		err := waitFor(waitCtx, c.kwok, "node "+n.Name+" Ready", func() error {
			node, err := c.client.CoreV1().Nodes().Get(waitCtx, n.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
					return nil
				}
			}
			return fmt.Errorf("node %s not Ready: %v", n.Name, node.Status.Conditions)
		})
		if err != nil {
			return fmt.Errorf("waiting for node %s to be Ready: %w", n.Name, err)
		}
	}
	return nil
}

func (c *Cluster) createNode(ctx context.Context, n Node) error {
	quantity := func(v, def string) (resource.Quantity, error) {
		if v == "" {
			v = def
		}
		return resource.ParseQuantity(v)
	}
	cpu, err := quantity(n.CPU, "32")
	if err != nil {
		return fmt.Errorf("node %s cpu: %w", n.Name, err)
	}
	mem, err := quantity(n.Memory, "256Gi")
	if err != nil {
		return fmt.Errorf("node %s memory: %w", n.Name, err)
	}
	pods := n.Pods
	if pods == 0 {
		pods = 110
	}
	res := corev1.ResourceList{
		corev1.ResourceCPU: cpu, corev1.ResourceMemory: mem,
		corev1.ResourcePods: *resource.NewQuantity(int64(pods), resource.DecimalSI),
	}
	if n.GPUs > 0 {
		gpu := n.GPUResource
		if gpu == "" {
			gpu = api.DefaultGPUResource
		}
		res[gpu] = *resource.NewQuantity(int64(n.GPUs), resource.DecimalSI)
	}
	for name, v := range n.Extended {
		res[name] = *resource.NewQuantity(v, resource.DecimalSI)
	}
	labels := map[string]string{"kubernetes.io/hostname": n.Name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", "type": "kwok"}
	for k, v := range n.Labels {
		labels[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:       corev1.NodeSpec{Taints: n.Taints},
		Status:     corev1.NodeStatus{Capacity: res, Allocatable: res.DeepCopy()},
	}
	if _, err := c.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating node %s: %w", n.Name, err)
	}
	return c.publishGPUs(ctx, n)
}

// CreateNamespace creates a namespace and waits for its default service
// account, without which Pods are refused.
func (c *Cluster) CreateNamespace(ctx context.Context, name string) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := c.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating namespace %s: %w", name, err)
	}
	return c.waitServiceAccountIn(ctx, name, "default")
}

func (c *Cluster) waitServiceAccount(ctx context.Context, name string) error {
	return c.waitServiceAccountIn(ctx, "default", name)
}

func (c *Cluster) waitServiceAccountIn(ctx context.Context, ns, name string) error {
	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(waitCtx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.client.CoreV1().ServiceAccounts(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for service account %s/%s: %w", ns, name, err)
	}
	return nil
}

// StartScheduler runs another kube-scheduler with cfg (for example the
// runplane-scheduler profile with its extender). The cluster fills in the
// client connection and turns leader election off. Stop the returned
// Process to stop it; Stop of the cluster stops it too.
func (c *Cluster) StartScheduler(ctx context.Context, cfg *configv1.KubeSchedulerConfiguration) (*Process, error) {
	cfg = cfg.DeepCopy()
	cfg.APIVersion, cfg.Kind = configv1.SchemeGroupVersion.String(), "KubeSchedulerConfiguration"
	cfg.ClientConnection.Kubeconfig = c.kubeconfig
	cfg.ClientConnection.QPS, cfg.ClientConnection.Burst = 500, 1000
	off := false
	cfg.LeaderElection.LeaderElect = &off
	data, err := profile.YAML(cfg)
	if err != nil {
		return nil, err
	}
	port, err := kit.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	name := "kube-scheduler-" + strconv.Itoa(port)
	path := filepath.Join(c.dir, name+".yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, fmt.Errorf("writing scheduler config: %w", err)
	}
	p, err := c.start(name, "kube-scheduler", "--config="+path,
		"--authentication-kubeconfig="+c.kubeconfig, "--authorization-kubeconfig="+c.kubeconfig,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(port))
	if err != nil {
		return nil, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The scheduler serves /healthz with a self-signed certificate.
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	err = waitFor(waitCtx, p, name+" /healthz", func() error {
		resp, err := insecure.Get("https://127.0.0.1:" + strconv.Itoa(port) + "/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", resp.Status)
		}
		return nil
	})
	if err != nil {
		p.Stop()
		return nil, err
	}
	return p, nil
}

// Stop stops every process (newest first) and removes the working dir
// unless it is to be kept.
func (c *Cluster) Stop() {
	if c.cancel != nil {
		c.cancel()
	}
	c.stopRealNodes()
	procs := c.Processes()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
	if !c.keepDir {
		os.RemoveAll(c.dir)
	}
}

// DumpLogs passes the tail of every component log, and of every real
// node's containerd and fake DRA driver logs, to logf.
func (c *Cluster) DumpLogs(logf func(format string, args ...any), lines int) {
	for _, p := range c.Processes() {
		logf("===== %s (last %d lines of %s) =====\n%s", p.Name, lines, p.LogPath, p.Tail(lines))
	}
	for _, n := range c.RealNodes() {
		for _, name := range []string{"containerd.log", "fakedra.log"} {
			f := filepath.Join(n.Dir, name)
			if _, err := os.Stat(f); err == nil {
				logf("===== %s %s (last %d lines) =====\n%s", n.Name, f, lines, tailFile(f, lines))
			}
		}
	}
}
