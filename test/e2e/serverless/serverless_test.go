package serverless

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/messages"

	"github.com/stretchr/testify/assert"
)

// echoed decodes the framework-echo body of a record.
func echoed(t *testing.T, rec messages.Record) framework.Request {
	t.Helper()
	require.NotNil(t, rec.Response, "record %s (%s) has no response: %s", rec.InvocationID, rec.State, rec.Error)
	var r framework.Request
	err := json.Unmarshal(rec.Response.Body, &r)
	require.NoError(t, err, "echo body %s: %v", rec.Response.Body, err)
	return r
}

func TestSyncInvocationScalesFromZero(t *testing.T) {
	pool(t, "sync", 0, 1, nil)
	r := replicas(t, "sync")
	require.EqualValues(t, 0, r, "pool starts with %d replicas, want 0", r)
	start := time.Now()
	var rec messages.Record
	code := invoke(t, "sync", map[string]any{"mode": "sync", "timeoutSeconds": 90, "payload": map[string]string{"prompt": "draw a robot"},
		"headers": map[string]string{"x-request-id": "abc"}}, &rec)
	require.False(t, code != http.StatusOK || rec.State != messages.StateSucceeded, "sync invoke = HTTP %d %+v, want 200 succeeded", code, rec)
	t.Logf("cold sync invocation took %v", time.Since(start))
	req := echoed(t, rec)
	pods := poolPods(t, "sync")
	if assert.Len(t, pods, 1) {
		assert.Equal(t, pods[0].Name, req.WorkerName, "the envelope as seen by the single pool Pod")
	}
	assert.Equal(t, ns, req.WorkerNamespace)
	assert.Equal(t, "sync", req.ServerlessRequestID)
	assert.JSONEq(t, `{"prompt":"draw a robot"}`, string(req.Payload))
	assert.Equal(t, "abc", req.Headers["x-request-id"])
	r = replicas(t, "sync")
	assert.EqualValues(t, 1, r, "replicas after the first invocation = %d, want 1", r)

	// The user container holds no NATS settings or credentials.
	pod := pods[0]
	for _, c := range pod.Spec.Containers {
		for _, e := range c.Env {
			assert.False(t, strings.HasPrefix(e.Name, "RUNPLANE_NATS") || e.Name == api.EnvSubjectPrefix || e.Name == api.EnvStreamName, "container %s has env %s", c.Name, e.Name)
		}
		for _, m := range c.VolumeMounts {
			assert.False(t, m.MountPath == api.NATSCredentialsMountDir, "container %s mounts the NATS credentials (%s)", c.Name, m.Name)
		}
	}
}

func TestAsyncInvocationAndGet(t *testing.T) {
	pool(t, "async", 0, 1, nil)
	var ack struct {
		InvocationID string         `json:"invocationID"`
		State        messages.State `json:"state"`
	}
	code := invoke(t, "async", map[string]any{"mode": "async", "invocationID": "async-1", "payload": []int{1, 2}}, &ack)
	require.Equal(t, http.StatusAccepted, code, "async invoke = HTTP %d, want 202", code)
	assert.Equal(t, "async-1", ack.InvocationID, "ack = %+v", ack)
	var rec messages.Record
	require.Eventually(t, func() bool {
		getJSON(t, st.QueueURL+"/v1/namespaces/"+ns+"/invocations/async-1", &rec)
		return rec.State.Terminal()
	}, 90*time.Second, 200*time.Millisecond, "async-1 succeeded")
	assert.False(t, rec.State != messages.StateSucceeded || string(echoed(t, rec).Payload) != "[1,2]" || echoed(t, rec).Mode != "async", "record = %+v", rec)
}

func TestBurstScalesUpThenIdlesDownToFloor(t *testing.T) {
	pool(t, "burst", 0, 2, map[string]string{api.AnnotationMinAvailable: "1", api.AnnotationMaxReplicas: "6", api.AnnotationIdleTimeout: "3s"})
	require.Eventually(t, func() bool { return replicas(t, "burst") == 1 }, 60*time.Second, 200*time.Millisecond, "prewarm floor of 1")

	var peak atomic.Int32
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			sc, err := st.Cluster.Client().AppsV1().Deployments(ns).GetScale(context.Background(), "burst", metav1.GetOptions{})
			if err == nil && sc.Spec.Replicas > peak.Load() {
				peak.Store(sc.Spec.Replicas)
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	const n = 50
	var wg sync.WaitGroup
	workers := sync.Map{}
	var failed atomic.Int32
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rec messages.Record
			code := invoke(t, "burst", map[string]any{"mode": "sync", "invocationID": fmt.Sprintf("burst-%d", i), "timeoutSeconds": 120,
				"attributes": map[string]string{framework.EchoAttrSleep: "1s"}}, &rec)
			if code != http.StatusOK || rec.State != messages.StateSucceeded {
				failed.Add(1)
				t.Errorf("burst-%d: HTTP %d %s %s", i, code, rec.State, rec.Error)
				return
			}
			workers.Store(rec.Worker, true)
		}()
	}
	wg.Wait()
	close(stopWatch)
	<-watchDone
	distinct := 0
	workers.Range(func(any, any) bool { distinct++; return true })
	t.Logf("50 invocations: peak replicas %d, %d distinct workers answered", peak.Load(), distinct)
	assert.False(t, peak.Load() < 2 || distinct < 2, "peak replicas %d, distinct workers %d; want the pool scaled past one worker", peak.Load(), distinct)
	require.False(t, failed.Load() > 0, "%d of %d invocations failed", failed.Load(), n)
	require.Eventually(t, func() bool {
		return replicas(t, "burst") == 1 && len(poolPods(t, "burst")) == 1
	}, 90*time.Second, 200*time.Millisecond, "idle scale-down to the floor of 1")
}

func TestKilledWorkerIsRedeliveredAndCompletesOnce(t *testing.T) {
	pool(t, "kill", 1, 1, nil)
	// Warm up: find the worker.
	var warm messages.Record
	code := invoke(t, "kill", map[string]any{"mode": "sync", "timeoutSeconds": 90}, &warm)
	require.False(t, code != http.StatusOK || warm.State != messages.StateSucceeded, "warm-up = HTTP %d %+v", code, warm)
	victim := warm.Worker

	var results atomic.Int32
	sub, err := st.NATSConn(t).Subscribe(messages.Subjects{Prefix: api.DefaultSubjectPrefix}.Result(ns, "kill"), func(m *nats.Msg) {
		var r messages.Result
		if json.Unmarshal(m.Data, &r) == nil && r.InvocationID == "killed-1" {
			results.Add(1)
		}
	})
	require.NoError(t, err)
	defer func() { assert.NoError(t, sub.Unsubscribe()) }()

	code = invoke(t, "kill", map[string]any{"mode": "async", "invocationID": "killed-1", "timeoutSeconds": 120,
		"attributes": map[string]string{framework.EchoAttrSleep: "3s"}}, nil)
	require.Equal(t, http.StatusAccepted, code, "async invoke")
	var rec messages.Record
	require.Eventually(t, func() bool {
		getJSON(t, st.QueueURL+"/v1/namespaces/"+ns+"/invocations/killed-1", &rec)
		return rec.State == messages.StateRunning && rec.Worker == victim
	}, 30*time.Second, 200*time.Millisecond, "killed-1 running on "+victim)
	// The node dies: processes gone without a drain, Pod deleted.
	require.NoError(t, st.Workers.Kill(ns, victim))
	require.NoError(t, st.Cluster.Client().CoreV1().Pods(ns).Delete(context.Background(), victim, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}))
	require.Eventually(t, func() bool {
		getJSON(t, st.QueueURL+"/v1/namespaces/"+ns+"/invocations/killed-1", &rec)
		return rec.State.Terminal()
	}, 120*time.Second, 200*time.Millisecond, "killed-1 terminal")
	assert.False(t, rec.State != messages.StateSucceeded || rec.Worker == victim || rec.Attempt < 2, "record = state %s worker %s attempt %d (%s); want succeeded by another worker on a later attempt", rec.State, rec.Worker, rec.Attempt, rec.Error)
	// Barrier: the activator has nothing queued or in flight for the pool,
	// so no other attempt of killed-1 is pending; then count the results
	// published for it (the results stream keeps only unhandled ones).
	require.Eventually(t, func() bool {
		var info struct {
			Status *messages.PoolStatus `json:"status"`
		}
		getJSON(t, st.QueueURL+"/v1/namespaces/"+ns+"/pools/kill", &info)
		return info.Status != nil && info.Status.Backlog == 0 && info.Status.InFlight == 0
	}, 30*time.Second, 200*time.Millisecond, "pool kill quiet")
	require.EqualValues(t, 1, results.Load(), "results published for killed-1")
}
