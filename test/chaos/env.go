package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	"github.com/nats-io/nats.go"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/natssync"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/kit"
)

// Binaries are the programs a case runs.
type Binaries struct {
	Queue, Sidecar, Framework, NATS string
}

// Build builds framework-recorder into dir (run from inside the module, as
// go test does), takes runplane-queue and runplane-sidecar from
// test/runplanebin (make test's build, or built into dir), and picks the
// nats-server: the pinned binary of test/testbin when RUNPLANE_TESTBIN_DIR
// has it, else cmd/natsd (the same server module, built here).
func Build(ctx context.Context, dir string) (Binaries, error) {
	runplane, err := runplanebin.Dir(ctx, dir, "runplane-queue", "runplane-sidecar")
	if err != nil {
		return Binaries{}, err
	}
	b := Binaries{
		Queue:     filepath.Join(runplane, "runplane-queue"),
		Sidecar:   filepath.Join(runplane, "runplane-sidecar"),
		Framework: filepath.Join(dir, "framework-recorder"),
		NATS:      filepath.Join(dir, "natsd"),
	}
	pkgs := []string{"./test/chaos/cmd/framework-recorder"}
	if tb := os.Getenv("RUNPLANE_TESTBIN_DIR"); tb != "" {
		if _, err := os.Stat(filepath.Join(tb, "nats-server")); err == nil {
			b.NATS = filepath.Join(tb, "nats-server")
		}
	}
	if b.NATS == filepath.Join(dir, "natsd") {
		pkgs = append(pkgs, "./test/chaos/cmd/natsd")
	}
	root, err := runplanebin.ModuleRoot()
	if err != nil {
		return b, err
	}
	cmd := exec.CommandContext(ctx, "go", append([]string{"build", "-o", dir + "/"}, pkgs...)...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return b, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return b, nil
}

// NATS is a nats-server process with JetStream on file storage, on a fixed
// port so a restart keeps its URL.
type NATS struct {
	*Proc
	URL string
	// Name is its server_name (n0, n1, …): what a stream's cluster info
	// names as leader.
	Name string
}

// NATSOptions shape the server.
type NATSOptions struct {
	// MaxFileStore caps JetStream file storage in bytes (0: the server's
	// default, a share of the disk).
	MaxFileStore int64
}

// StartNATS writes a configuration into dir and starts the server.
func StartNATS(bins Binaries, dir string, o NATSOptions) (*NATS, error) {
	ns, err := StartNATSCluster(bins, dir, 1, o)
	if err != nil {
		return nil, err
	}
	return ns[0], nil
}

// StartNATSCluster starts n servers (n > 1: one JetStream cluster, every
// server routed to every other, server_name n<i>, its own store under
// dir/n<i>), each on fixed ports so a restart keeps its URL and routes.
// JetStream syncs as the chart's bundled NATS does (natssync.Default:
// fsync before every acknowledgement). Routes are plain TCP on loopback:
// the harness's clients have neither TLS nor auth either (the chart's
// routes are TLS with a password; test/natsauth.StartCluster runs those).
func StartNATSCluster(bins Binaries, dir string, n int, o NATSOptions) ([]*NATS, error) {
	ports, err := kit.FreePorts("127.0.0.1", 2*n)
	if err != nil {
		return nil, err
	}
	clientPorts, routePorts := ports[:n], ports[n:]
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, strconv.Quote("nats-route://127.0.0.1:"+strconv.Itoa(p)))
	}
	servers := make([]*NATS, n)
	for i := range n {
		sdir := dir
		if n > 1 {
			sdir = filepath.Join(dir, "n"+strconv.Itoa(i))
			if err := os.MkdirAll(sdir, 0o755); err != nil {
				return nil, err
			}
		}
		js := fmt.Sprintf("store_dir: %q, %s", filepath.Join(sdir, "jetstream"), natssync.Config(natssync.Default))
		if o.MaxFileStore > 0 {
			js += fmt.Sprintf(", max_file_store: %d", o.MaxFileStore)
		}
		conf := fmt.Sprintf("server_name: n%d\nlisten: \"127.0.0.1:%d\"\njetstream { %s }\n", i, clientPorts[i], js)
		if n > 1 {
			conf += fmt.Sprintf("cluster { name: chaos, listen: \"127.0.0.1:%d\", routes: [%s] }\n", routePorts[i], strings.Join(routes, ", "))
		}
		confPath := filepath.Join(sdir, "nats.conf")
		if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
			return nil, err
		}
		servers[i] = &NATS{Proc: NewProc("nats-server n"+strconv.Itoa(i), filepath.Join(sdir, "nats.log"), bins.NATS, []string{"-c", confPath}, nil),
			URL: "nats://127.0.0.1:" + strconv.Itoa(clientPorts[i]), Name: "n" + strconv.Itoa(i)}
	}
	// Together: a clustered server's JetStream answers once a quorum is up.
	if err := RestartAll(servers); err != nil {
		for _, s := range servers {
			s.Kill()
		}
		return nil, err
	}
	return servers, nil
}

// RestartAll starts every server at once (after a kill of all of them)
// and waits until each answers JetStream.
func RestartAll(servers []*NATS) error {
	for _, s := range servers {
		if err := s.Start(); err != nil {
			return err
		}
	}
	for _, s := range servers {
		if err := s.WaitReady(); err != nil {
			return err
		}
	}
	return nil
}

// Restart starts the server (after a stop or kill) and waits until
// JetStream answers.
func (n *NATS) Restart() error {
	if err := n.Start(); err != nil {
		return err
	}
	return n.WaitReady()
}

// WaitReady waits until the running server answers JetStream (in a
// cluster: it is routed and the meta group has a leader).
func (n *NATS) WaitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		nc, err := nats.Connect(n.URL, nats.Timeout(time.Second))
		if err == nil {
			js, jerr := nc.JetStream()
			if jerr == nil {
				_, jerr = js.AccountInfo()
			}
			nc.Close()
			if jerr == nil {
				return nil
			}
		}
		if !n.Running() {
			return fmt.Errorf("nats-server exited (see %s)", n.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("nats-server at %s not ready within 60s (see %s)", n.URL, n.log)
}

// Queue is a runplane-queue process.
type Queue struct {
	*Proc
	URL string
	// MetricsURL is its /metrics (HTTPS; with Kubeconfig, for scrapers RBAC
	// allows get on /metrics only).
	MetricsURL string
}

// QueueOptions choose how a queue replica runs.
type QueueOptions struct {
	// Pools are the pools known without Kubernetes (namespace/pool); used
	// when Kubeconfig is empty (-no-kube).
	Pools []string
	// Kubeconfig runs the queue against a cluster with leader election.
	Kubeconfig string
	// Namespace scopes a Kubernetes queue's pools (and holds its Lease).
	Namespace string
	// Configure changes the queue's configuration file (queue/config).
	Configure []func(*config.QueueConfiguration)
}

// StartQueue starts a replica named name on a free port and waits for
// /readyz.
func StartQueue(bins Binaries, dir, name, natsURL string, o QueueOptions) (*Queue, error) {
	ports, err := kit.FreePorts("127.0.0.1", 2)
	if err != nil {
		return nil, err
	}
	addr, metricsAddr := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	qc := configfile.New[config.QueueConfiguration]()
	qc.Listen, qc.Metrics.BindAddress, qc.NATS.URL, qc.InsecureDisableCallerAuth = addr, metricsAddr, natsURL, true
	// The harness measures loss and duplicates, not fairness limits.
	qc.Limits.PoolMaxBacklog, qc.Limits.NamespaceMaxBacklog, qc.Limits.NamespaceMaxInFlight = -1, -1, -1
	args := []string{"-config", filepath.Join(dir, name+".yaml")}
	if o.Kubeconfig == "" {
		qc.StaticPools, qc.LeaderElection.LeaderElect = o.Pools, ptr.To(false)
	} else {
		qc.WatchNamespace, qc.Namespace = o.Namespace, o.Namespace
		args = append(args, "-kubeconfig", o.Kubeconfig)
	}
	for _, c := range o.Configure {
		c(qc)
	}
	if err := configfile.WriteFile(args[1], qc); err != nil {
		return nil, err
	}
	q := &Queue{Proc: NewProc(name, filepath.Join(dir, name+".log"), bins.Queue, args, nil), URL: "http://" + addr,
		MetricsURL: "https://" + metricsAddr + "/metrics"}
	if err := q.Restart(); err != nil {
		return nil, err
	}
	return q, nil
}

// Restart starts the replica and waits until it is ready.
func (q *Queue) Restart() error {
	if err := q.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if kit.HTTPOK(context.Background(), q.URL+"/readyz") {
			return nil
		}
		if !q.Running() {
			return fmt.Errorf("%s exited (see %s)", q.name, q.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready within 60s (see %s)", q.name, q.log)
}

// Worker is one serverless worker run without Kubernetes: a sidecar and
// its framework, as the webhook would inject them into a Pod.
type Worker struct {
	Name      string
	Sidecar   *Proc
	Framework *Proc
}

// WorkerOptions shape a worker.
type WorkerOptions struct {
	Namespace, Pool string
	Concurrency     int
	// ExecLog is the framework's execution log (CHAOS_EXEC_LOG).
	ExecLog string
	// FrameworkEnv adds CHAOS_* settings (sleep, mode, result size).
	FrameworkEnv []string
	// SidecarArgs add sidecar flags.
	SidecarArgs []string
}

// StartWorker starts the framework, then the sidecar, of worker name.
func StartWorker(bins Binaries, dir, name, natsURL string, o WorkerOptions) (*Worker, error) {
	wdir := filepath.Join(dir, name)
	if err := os.MkdirAll(wdir, 0o755); err != nil {
		return nil, err
	}
	// Unix socket paths are limited to 108 bytes: keep them short.
	sockDir, err := os.MkdirTemp("", "chaos")
	if err != nil {
		return nil, err
	}
	port, err := kit.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	// The harness's NATS has no auth: a token file must exist (the sidecar
	// reads it) and the server ignores it.
	tok := filepath.Join(wdir, "token")
	if err := os.WriteFile(tok, []byte("chaos"), 0o600); err != nil {
		return nil, err
	}
	// The sidecar's own directory, as the webhook's emptyDir gives it in a
	// Pod: it outlives a restart of the sidecar (the SIGKILL cases).
	state := filepath.Join(wdir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, err
	}
	conc := max(o.Concurrency, 1)
	base := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"RUNPLANE_POOL=" + o.Pool, "RUNPLANE_WORKER_NAME=" + name, "RUNPLANE_WORKER_NAMESPACE=" + o.Namespace,
		"RUNPLANE_FRAMEWORK_SOCKET=" + filepath.Join(sockDir, "f.sock"), "RUNPLANE_CONCURRENCY=" + strconv.Itoa(conc)}
	fwEnv := append(append([]string{"CHAOS_EXEC_LOG=" + o.ExecLog}, base...), o.FrameworkEnv...)
	scEnv := append(append([]string{}, base...), "RUNPLANE_NATS_URL="+natsURL, "RUNPLANE_NATS_TOKEN_FILE="+tok,
		"RUNPLANE_SIDECAR_HTTP_ADDR=127.0.0.1:"+strconv.Itoa(port),
		"RUNPLANE_SIDECAR_METRICS_ADDR=127.0.0.1:0", "RUNPLANE_WORKER_STATE_DIR="+state)
	w := &Worker{
		Name:      name,
		Framework: NewProc(name+"/framework", filepath.Join(wdir, "framework.log"), bins.Framework, nil, fwEnv),
		Sidecar:   NewProc(name+"/sidecar", filepath.Join(wdir, "sidecar.log"), bins.Sidecar, append([]string{"-create-consumer"}, o.SidecarArgs...), scEnv),
	}
	if err := w.Framework.Start(); err != nil {
		return nil, err
	}
	if err := w.Sidecar.Start(); err != nil {
		w.Framework.Kill()
		return nil, err
	}
	return w, nil
}

// Stop drains the worker as a Pod deletion does: SIGTERM the sidecar (up
// to grace), then the framework.
func (w *Worker) Stop(grace time.Duration) {
	w.Sidecar.Stop(syscall.SIGTERM, grace)
	w.Framework.Stop(syscall.SIGTERM, 5*time.Second)
}

// Kill SIGKILLs both processes.
func (w *Worker) Kill() {
	w.Sidecar.Kill()
	w.Framework.Kill()
}
