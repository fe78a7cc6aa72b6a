package kubetest_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/runplane/runplane/test/runplanebin"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/internal/configfile"
	"github.com/runplane/runplane/queue/config"
	"github.com/runplane/runplane/test/natsauth"
)

// TestQueueBinaryCleanShutdown: the runplane-queue binary, holding the
// activator's Lease, stopped by SIGTERM: exit 0, and its JSON log has no
// ERROR record (controller-runtime reported its own release of the Lease
// as "leader election lost"; a log pipeline pages on ERROR).
func TestQueueBinaryCleanShutdown(t *testing.T) {
	ctx := t.Context()
	const ns = "queue-shutdown"
	require.NoError(t, env.CreateNamespace(ctx, ns))
	dir, err := runplanebin.Dir(ctx, t.TempDir(), "runplane-queue")
	require.NoError(t, err)
	bin := filepath.Join(dir, "runplane-queue")
	nsrv := natsauth.JetStream(t, nil)

	qc := configfile.New[config.QueueConfiguration]()
	qc.NATS.URL, qc.WatchNamespace, qc.Namespace, qc.Listen, qc.Metrics.BindAddress = nsrv.ClientURL(), ns, ns, "127.0.0.1:0", "127.0.0.1:0"
	file := filepath.Join(t.TempDir(), "queue.yaml")
	require.NoError(t, configfile.WriteFile(file, qc))
	cmd := exec.Command(bin, "-kubeconfig", env.Kubeconfig(), "-config", file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })

	// The barrier: the binary holds the Lease (the activator runs).
	require.Eventually(t, func() bool {
		l, err := env.Client().CoordinationV1().Leases(ns).Get(ctx, "runplane-queue-activator", metav1.GetOptions{})
		return err == nil && ptr.Deref(l.Spec.HolderIdentity, "") != ""
	}, time.Minute, 100*time.Millisecond, "the queue never held its Lease:\n%s", &stderr)

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "exit after SIGTERM:\n%s", &stderr)
	case <-time.After(time.Minute):
		t.Fatalf("still running a minute after SIGTERM:\n%s", &stderr)
	}
	l, err := env.Client().CoordinationV1().Leases(ns).Get(ctx, "runplane-queue-activator", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Empty(t, ptr.Deref(l.Spec.HolderIdentity, ""), "the Lease is released at shutdown")
	sc := bufio.NewScanner(&stderr)
	lines := 0
	for sc.Scan() {
		lines++
		var rec struct{ Level, Msg string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &rec), "every line is JSON: %s", sc.Text())
		assert.NotEqual(t, "ERROR", rec.Level, "a clean shutdown logs no ERROR: %s", sc.Text())
	}
	assert.Positive(t, lines)
}
