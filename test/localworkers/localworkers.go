// Package localworkers runs serverless worker Pods of a local (kwok)
// cluster as real processes: for every Pod labelled runplane.io/pool that
// is Running on a kwok node it starts runplane-sidecar and a framework
// (framework-echo) with that Pod's identity and env, and stops them when the
// Pod stops running or is deleted. kwok runs no containers, so this is what
// lets test/cluster based e2e tests and make dev exercise the real path.
package localworkers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/test/kit"
)

// Config configures Run.
type Config struct {
	// Client reaches the cluster (e.g. cluster.Cluster.Client()).
	Client kubernetes.Interface
	// NATSURL replaces the Pods' RUNPLANE_NATS_URL.
	NATSURL string
	// NATSTokenLifetime is the life of each sidecar's NATS token (default
	// api.NATSTokenExpirationSeconds; at least 10 minutes, the apiserver's
	// minimum). Every sidecar gets a token of its Pod's ServiceAccount,
	// bound to its Pod, with the NATS audience, in a file renewed at 80% of
	// its life, as the kubelet does for the projected volume the webhook
	// injects; a NATS with runplane's auth callout admits it, one without
	// auth ignores it.
	NATSTokenLifetime time.Duration
	// PlainJetStream: the NATS has no runplane accounts (no auth), so the
	// sidecar uses the plain JetStream API, not the worker prefix the
	// webhook injects (api.EnvNATSJSAPIPrefix).
	PlainJetStream bool
	// SidecarBinary and FrameworkBinary are the programs run per Pod
	// (runplane-sidecar and framework-echo, or any framework that reads
	// RUNPLANE_FRAMEWORK_SOCKET).
	SidecarBinary   string
	FrameworkBinary string
	// SidecarArgs and FrameworkArgs are extra arguments (e.g. shorter
	// heartbeats for tests).
	SidecarArgs   []string
	FrameworkArgs []string
	// Namespace limits the watch; empty watches all namespaces.
	Namespace string
	// Dir receives one log directory per Pod; a temp dir when empty.
	Dir string
	// StopGrace is how long a process gets between SIGTERM and SIGKILL
	// (default 30s, a Pod's default termination grace).
	StopGrace time.Duration
	// RestartDelay is how long a process that exited on its own waits before
	// it is started again, as the kubelet restarts containers (default 1s).
	RestartDelay time.Duration
	// IsLocalNode says whether Pods on node run here; default: nodes with
	// the annotation kwok.x-k8s.io/node.
	IsLocalNode func(*corev1.Node) bool
	// Logf receives lifecycle lines; silent when nil.
	Logf func(format string, args ...any)
}

// KwokNodeAnnotation marks a node that kwok manages.
const KwokNodeAnnotation = "kwok.x-k8s.io/node"

func (c Config) withDefaults() (Config, error) {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("localworkers: Config.Client must be set"))
	}
	if c.NATSURL == "" {
		errs = append(errs, errors.New("localworkers: Config.NATSURL must be set"))
	}
	for name, p := range map[string]string{"SidecarBinary": c.SidecarBinary, "FrameworkBinary": c.FrameworkBinary} {
		if p == "" {
			errs = append(errs, fmt.Errorf("localworkers: Config.%s must be set", name))
		} else if _, err := os.Stat(p); err != nil {
			errs = append(errs, fmt.Errorf("localworkers: Config.%s: %w", name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 30 * time.Second
	}
	if c.NATSTokenLifetime <= 0 {
		c.NATSTokenLifetime = api.NATSTokenExpirationSeconds * time.Second
	}
	if c.RestartDelay <= 0 {
		c.RestartDelay = time.Second
	}
	if c.IsLocalNode == nil {
		c.IsLocalNode = func(n *corev1.Node) bool { _, ok := n.Annotations[KwokNodeAnnotation]; return ok }
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	if c.Dir == "" {
		d, err := os.MkdirTemp("", "localworkers")
		if err != nil {
			return c, fmt.Errorf("localworkers: temp dir: %w", err)
		}
		c.Dir = d
	}
	return c, nil
}

// Runner is a running set of local workers.
type Runner struct {
	cfg  Config
	done chan struct{}

	mu      sync.Mutex
	workers map[string]*worker // namespace/name → worker
	closed  bool
	wg      sync.WaitGroup
}

// Run runs local workers until ctx ends, then stops every process.
func Run(ctx context.Context, cfg Config) error {
	r, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	r.Wait()
	return nil
}

// Start begins watching Pods and returns once the informers have synced.
// Every process is stopped when ctx ends; Wait returns after that.
func Start(ctx context.Context, cfg Config) (*Runner, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Runner{cfg: cfg, done: make(chan struct{}), workers: map[string]*worker{}}

	req, err := labels.NewRequirement(api.LabelPool, selection.Exists, nil)
	if err != nil {
		return nil, fmt.Errorf("localworkers: selector: %w", err)
	}
	podFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0,
		informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = labels.NewSelector().Add(*req).String() }))
	nodeFactory := informers.NewSharedInformerFactory(cfg.Client, 0)
	pods := podFactory.Core().V1().Pods()
	nodes := nodeFactory.Core().V1().Nodes()
	nodeLister := nodes.Lister()

	// One goroutine applies changes, so a Pod's start and stop never race.
	queue := make(chan string, 1024)
	enqueue := func(obj any) {
		key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
		if err == nil {
			select {
			case queue <- key:
			case <-ctx.Done():
			}
		}
	}
	if _, err := pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, o any) { enqueue(o) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("localworkers: pod handler: %w", err)
	}
	// A node turning up late (or its annotation) can make Pods local.
	if _, err := nodes.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) {
			objs := pods.Informer().GetStore().List()
			for _, o := range objs {
				enqueue(o)
			}
		},
	}); err != nil {
		return nil, fmt.Errorf("localworkers: node handler: %w", err)
	}
	podFactory.Start(ctx.Done())
	nodeFactory.Start(ctx.Done())
	for typ, ok := range podFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("localworkers: %v informer did not sync", typ)
		}
	}
	for typ, ok := range nodeFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("localworkers: %v informer did not sync", typ)
		}
	}
	podLister := pods.Lister()

	go func() {
		defer close(r.done)
		for {
			select {
			case <-ctx.Done():
				r.stopAll()
				podFactory.Shutdown()
				nodeFactory.Shutdown()
				return
			case key := <-queue:
				ns, name, _ := cache.SplitMetaNamespaceKey(key)
				pod, err := podLister.Pods(ns).Get(name)
				if err != nil {
					pod = nil // deleted
				}
				r.sync(ctx, key, pod, func(node string) bool {
					n, err := nodeLister.Get(node)
					return err == nil && cfg.IsLocalNode(n)
				})
			}
		}
	}()
	return r, nil
}

// Wait blocks until the context given to Start ended and every process
// has stopped.
func (r *Runner) Wait() {
	<-r.done
	r.wg.Wait()
}

// Workers lists the Pods (namespace/name) that have local processes.
func (r *Runner) Workers() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.workers))
	for k := range r.workers {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// SidecarAddr is the local HTTP address (/livez, /readyz) of a
// Pod's sidecar.
func (r *Runner) SidecarAddr(namespace, name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	w, ok := r.workers[namespace+"/"+name]
	if !ok {
		return "", false
	}
	return w.httpAddr, true
}

// Kill SIGKILLs a Pod's processes without a drain and does not restart
// them, as if the worker's node died: its unacked dispatches stay in its
// consumer. The Pod object is left alone (delete it to let the activator
// notice).
func (r *Runner) Kill(namespace, name string) error {
	r.mu.Lock()
	w, ok := r.workers[namespace+"/"+name]
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("localworkers: no local worker for Pod %s/%s", namespace, name)
	}
	w.kill()
	return nil
}

func (r *Runner) sync(ctx context.Context, key string, pod *corev1.Pod, local func(node string) bool) {
	want := pod != nil && pod.DeletionTimestamp == nil && pod.Status.Phase == corev1.PodRunning &&
		pod.Spec.NodeName != "" && local(pod.Spec.NodeName)
	r.mu.Lock()
	w, have := r.workers[key]
	if have && (!want || w.uid != pod.UID) {
		delete(r.workers, key)
		r.cfg.Logf("localworkers: stopping %s", key)
		// Drain in the background so one Pod's grace period does not hold
		// up the others.
		r.wg.Add(1)
		go func() { defer r.wg.Done(); w.stop() }()
		have = false
	}
	if want && !have && !r.closed {
		w, err := r.startWorker(ctx, pod)
		if err != nil {
			r.cfg.Logf("localworkers: %s: %v", key, err)
		} else {
			r.workers[key] = w
			r.cfg.Logf("localworkers: started %s (sidecar http %s, logs %s)", key, w.httpAddr, w.dir)
		}
	}
	r.mu.Unlock()
}

func (r *Runner) stopAll() {
	r.mu.Lock()
	r.closed = true
	ws := r.workers
	r.workers = map[string]*worker{}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); w.stop() }()
	}
	wg.Wait()
}

// worker is the processes of one Pod.
type worker struct {
	uid       any
	dir       string
	sockDir   string
	httpAddr  string
	sidecar   *proc
	framework *proc
	token     *tokenKeeper
}

func (r *Runner) startWorker(ctx context.Context, pod *corev1.Pod) (*worker, error) {
	dir := filepath.Join(r.cfg.Dir, pod.Namespace+"_"+pod.Name)
	if err := os.MkdirAll(filepath.Join(dir, "worker-state"), 0o755); err != nil {
		return nil, fmt.Errorf("log dir: %w", err)
	}
	// Unix socket paths are limited to 108 bytes: keep them short.
	sockDir, err := os.MkdirTemp("", "rplw")
	if err != nil {
		return nil, fmt.Errorf("socket dir: %w", err)
	}
	port, err := kit.FreePort("127.0.0.1")
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	w := &worker{uid: pod.UID, dir: dir, sockDir: sockDir, httpAddr: fmt.Sprintf("127.0.0.1:%d", port)}
	tokenFile := filepath.Join(dir, "nats-token")
	scEnv, fwEnv, err := PodEnv(pod, Local{
		NATSURL: r.cfg.NATSURL, NATSTokenFile: tokenFile, PlainJetStream: r.cfg.PlainJetStream,
		Socket: filepath.Join(sockDir, "framework.sock"), SidecarHTTPAddr: w.httpAddr, StateDir: filepath.Join(dir, "worker-state"),
	})
	if err != nil {
		os.RemoveAll(sockDir)
		return nil, err
	}
	w.token = startToken(ctx, r.cfg.Client, pod, tokenFile, r.cfg.NATSTokenLifetime, r.cfg.Logf)
	// Two separate lists: appending both to one base would let the second
	// overwrite the first in the shared backing array.
	base := hostEnv()
	w.framework = startProc(&r.wg, r.cfg, "framework", filepath.Join(dir, "framework.log"), r.cfg.FrameworkBinary, r.cfg.FrameworkArgs, slices.Concat(base, fwEnv))
	w.sidecar = startProc(&r.wg, r.cfg, "sidecar", filepath.Join(dir, "sidecar.log"), r.cfg.SidecarBinary, r.cfg.SidecarArgs, slices.Concat(base, scEnv))
	return w, nil
}

// stop drains the sidecar first (its in-flight calls still reach the
// framework), then stops the framework.
func (w *worker) stop() {
	w.sidecar.stop()
	w.framework.stop()
	w.token.stop()
	os.RemoveAll(w.sockDir)
}

func (w *worker) kill() {
	w.sidecar.kill()
	w.framework.kill()
	w.token.stop()
}

// hostEnv is this process's env without runplane's own variables, so a
// Pod never inherits the runner's settings.
func hostEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RUNPLANE_") || strings.HasPrefix(kv, "SERVERLESS_") || strings.HasPrefix(kv, "FRAMEWORK_ECHO_") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// proc supervises one process: it restarts it when it exits on its own
// (like a container with restartPolicy Always) until stopped or killed.
type proc struct {
	name    string
	grace   time.Duration
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // of the current cmd
	stopped bool
	done    chan struct{} // supervisor ended
}

func startProc(wg *sync.WaitGroup, cfg Config, name, logPath, bin string, args, env []string) *proc {
	p := &proc{name: name, grace: cfg.StopGrace, done: make(chan struct{})}
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(p.done)
		for {
			p.mu.Lock()
			if p.stopped {
				p.mu.Unlock()
				return
			}
			logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
			if err != nil {
				p.mu.Unlock()
				cfg.Logf("localworkers: %s log: %v", name, err)
				return
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = env
			cmd.Stdout, cmd.Stderr = logf, logf
			// Own process group, so a terminal's Ctrl-C reaches the runner
			// only, and the runner decides the order of stopping.
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
			if err := cmd.Start(); err != nil {
				p.mu.Unlock()
				logf.Close()
				cfg.Logf("localworkers: start %s: %v", name, err)
				return
			}
			exited := make(chan struct{})
			p.cmd, p.exited = cmd, exited
			p.mu.Unlock()
			err = cmd.Wait()
			close(exited)
			logf.Close()
			p.mu.Lock()
			stopped := p.stopped
			p.mu.Unlock()
			if stopped {
				return
			}
			cfg.Logf("localworkers: %s (%s) exited: %v; restarting in %v", name, logPath, err, cfg.RestartDelay)
			time.Sleep(cfg.RestartDelay)
		}
	}()
	return p
}

// stop sends SIGTERM and waits up to the grace period, then SIGKILLs.
func (p *proc) stop() { p.terminate(syscall.SIGTERM) }

// kill SIGKILLs at once.
func (p *proc) kill() { p.terminate(syscall.SIGKILL) }

func (p *proc) terminate(sig syscall.Signal) {
	p.mu.Lock()
	p.stopped = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd != nil && cmd.Process != nil {
		_ = cmd.Process.Signal(sig)
		select {
		case <-exited:
		case <-time.After(p.grace):
			_ = cmd.Process.Kill()
		}
	}
	<-p.done
}
