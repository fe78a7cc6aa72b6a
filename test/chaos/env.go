package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// Binaries are the programs a case runs.
type Binaries struct {
	Queue, Sidecar, Framework, NATS string
}

// Build builds runplane-queue, runplane-sidecar and framework-recorder into
// dir (run from inside the module, as go test does), and picks the
// nats-server: the pinned binary of test/testbin when RUNPLANE_TESTBIN_DIR
// has it, else cmd/natsd (the same server module, built here).
func Build(ctx context.Context, dir string) (Binaries, error) {
	b := Binaries{
		Queue:     filepath.Join(dir, "runplane-queue"),
		Sidecar:   filepath.Join(dir, "runplane-sidecar"),
		Framework: filepath.Join(dir, "framework-recorder"),
		NATS:      filepath.Join(dir, "natsd"),
	}
	pkgs := []string{"./cmd/runplane-queue", "./cmd/runplane-sidecar", "./test/chaos/cmd/framework-recorder"}
	if tb := os.Getenv("RUNPLANE_TESTBIN_DIR"); tb != "" {
		if _, err := os.Stat(filepath.Join(tb, "nats-server")); err == nil {
			b.NATS = filepath.Join(tb, "nats-server")
		}
	}
	if b.NATS == filepath.Join(dir, "natsd") {
		pkgs = append(pkgs, "./test/chaos/cmd/natsd")
	}
	root, err := moduleRoot()
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

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(string(out[:len(out)-1])), nil
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NATS is a nats-server process with JetStream on file storage, on a fixed
// port so a restart keeps its URL.
type NATS struct {
	*Proc
	URL string
}

// NATSOptions shape the server.
type NATSOptions struct {
	// MaxFileStore caps JetStream file storage in bytes (0: the server's
	// default, a share of the disk).
	MaxFileStore int64
}

// StartNATS writes a configuration into dir and starts the server.
func StartNATS(bins Binaries, dir string, o NATSOptions) (*NATS, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	js := fmt.Sprintf("store_dir: %q", filepath.Join(dir, "jetstream"))
	if o.MaxFileStore > 0 {
		js += fmt.Sprintf(", max_file_store: %d", o.MaxFileStore)
	}
	conf := fmt.Sprintf("listen: \"127.0.0.1:%d\"\njetstream { %s }\n", port, js)
	confPath := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	n := &NATS{Proc: NewProc("nats-server", filepath.Join(dir, "nats.log"), bins.NATS, []string{"-c", confPath}, nil),
		URL: "nats://127.0.0.1:" + strconv.Itoa(port)}
	if err := n.Restart(); err != nil {
		return nil, err
	}
	return n, nil
}

// Restart starts the server (after a stop or kill) and waits until
// JetStream answers.
func (n *NATS) Restart() error {
	if err := n.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
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
	return fmt.Errorf("nats-server at %s not ready within 30s (see %s)", n.URL, n.log)
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
	// Args are extra flags.
	Args []string
}

// StartQueue starts a replica named name on a free port and waits for
// /readyz.
func StartQueue(bins Binaries, dir, name, natsURL string, o QueueOptions) (*Queue, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if port, err = FreePort(); err != nil {
		return nil, err
	}
	metricsAddr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"-listen", addr, "-metrics-addr", metricsAddr, "-nats-url", natsURL, "-insecure-disable-caller-auth",
		// The harness measures loss and duplicates, not fairness limits.
		"-max-backlog", "-1", "-namespace-max-backlog", "-1", "-namespace-max-in-flight", "-1"}
	if o.Kubeconfig == "" {
		pools := ""
		for i, p := range o.Pools {
			if i > 0 {
				pools += ","
			}
			pools += p
		}
		args = append(args, "-no-kube", "-pools", pools)
	} else {
		args = append(args, "-kubeconfig", o.Kubeconfig, "-namespace", o.Namespace, "-leader-election-namespace", o.Namespace)
	}
	args = append(args, o.Args...)
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
		if httpOK(q.URL + "/readyz") {
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
	port, err := FreePort()
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

func httpOK(url string) bool {
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}
