package queue_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/sidecar/sidecartest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProcessKilledUnderLoad builds cmd/runplane-queue, runs it against the
// embedded NATS, SIGKILLs it while async invocations pour in, restarts it,
// and checks that every accepted invocation succeeds exactly once.
func TestProcessKilledUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir, err := runplanebin.Dir(t.Context(), t.TempDir(), "runplane-queue")
	require.NoError(t, err)
	bin := filepath.Join(dir, "runplane-queue")
	// The in-process service is only used for its NATS and helpers; stop it
	// so the binary is the only activator.
	e := newEnv(t, func(c *queue.Config) {})
	e.stop()
	e.stop = nil
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	e.base = "http://" + addr
	logf, _ := os.Create(filepath.Join(t.TempDir(), "queue.log"))
	qc := configfile.New[config.QueueConfiguration]()
	qc.StaticPools, qc.LeaderElection.LeaderElect, qc.InsecureDisableCallerAuth = []string{testPool}, ptr(false), true
	qc.Listen, qc.Metrics.BindAddress, qc.NATS.URL = addr, "0", e.natsURL()
	qc.Stream.DuplicateWindow, qc.Stream.RecordTTL = metav1.Duration{Duration: time.Second}, metav1.Duration{Duration: time.Hour}
	qc.Workers.HeartbeatTimeout, qc.Workers.HeartbeatInterval = metav1.Duration{Duration: time.Second}, metav1.Duration{Duration: 100 * time.Millisecond}
	qc.Limits.PoolMaxBacklog = 100000
	file := filepath.Join(t.TempDir(), "queue.yaml")
	require.NoError(t, configfile.WriteFile(file, qc))
	start := func() *exec.Cmd {
		cmd := exec.Command(bin, "-config", file)
		cmd.Stdout, cmd.Stderr = logf, logf
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		require.NoError(t, cmd.Start())
		require.Eventually(t, func() bool { _, err := httpGet(e.base + "/readyz"); return err == nil }, 15*time.Second, 50*time.Millisecond,
			"queue process not ready")
		return cmd
	}
	cmd := start()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for i := range 3 {
		e.worker(fmt.Sprintf("w%d", i), 4, sidecartest.Sleep(5*time.Millisecond))
	}

	var mu sync.Mutex
	var accepted []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				id := "load-" + strconv.Itoa(g) + "-" + strconv.Itoa(n)
				code, err := postAsync(e.base, id)
				if err == nil && code == 202 {
					mu.Lock()
					accepted = append(accepted, id)
					mu.Unlock()
				} else {
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	mu.Lock()
	atKill := len(accepted)
	mu.Unlock()
	time.Sleep(300 * time.Millisecond)
	cmd = start()
	time.Sleep(1000 * time.Millisecond)
	close(stop)
	wg.Wait()
	require.False(t, atKill == 0 || len(accepted) == atKill, "load did not span the kill: %d accepted before, %d total", atKill, len(accepted))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		for _, id := range accepted {
			assert.Equal(c, messages.StateSucceeded, e.record(id).State, "accepted invocation %s lost (%d accepted)", id, len(accepted))
		}
	}, 30*time.Second, 50*time.Millisecond)
	for _, id := range accepted {
		assert.Len(t, e.log.Runs(id), 1, "invocation %s ran more than once", id)
	}
	t.Logf("%d invocations accepted (%d before SIGKILL), all succeeded once", len(accepted), atKill)
}

func postAsync(base, id string) (int, error) {
	c := httpClient()
	r, err := c.Post(base+"/v1/namespaces/default/pools/"+testPool+"/invocations", "application/json",
		stringsReader(`{"mode":"async","invocationID":"`+id+`","ttlSeconds":300}`))
	if err != nil {
		return 0, err
	}
	r.Body.Close()
	return r.StatusCode, nil
}
