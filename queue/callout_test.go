package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue/stream"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestLoadTrust(t *testing.T) {
	secret, err := natsaccounts.NewSecret()
	require.NoError(t, err)
	for _, tc := range []struct {
		name      string
		file      string
		wantTrust bool
		wantErr   string
	}{
		{name: "none", file: ""},
		{name: "a secret", file: writeFile(t, string(secret)), wantTrust: true},
		{name: "too short", file: writeFile(t, "short"), wantErr: "want at least 32"},
		{name: "missing file", file: "/nonexistent/secret", wantErr: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trust, err := loadTrust(tc.file)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.wantTrust, trust != nil)
			opts, err := natsAuthOptions(trust)
			require.NoError(t, err)
			assert.Equal(t, tc.wantTrust, len(opts) == 1, "the queue's own credentials go with the trust")
		})
	}
}

func TestNewCallout(t *testing.T) {
	secret, err := natsaccounts.NewSecret()
	require.NoError(t, err)
	trust, err := natsaccounts.Derive(secret)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	layout := WorkerLayout(stream.Config{}.WithDefaults())
	for _, tc := range []struct {
		name    string
		noKube  bool
		wantErr string
	}{
		{name: "with Kubernetes"},
		{name: "no Kubernetes", noKube: true, wantErr: "needs a Kubernetes config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kube kubernetes.Interface
			if !tc.noKube {
				kube = fake.NewClientset()
			}
			c, err := newCallout(CalloutConfig{MaxSubscriptions: 32, MaxPayload: 4096}, nil, kube, trust, nil, &fakeConsumers{}, nil, nil, layout, nil, log)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Same(t, trust, c.responder.Trust)
			assert.Equal(t, natscallout.Limits{Subscriptions: 32, Payload: 4096}, c.responder.Limits)
			assert.False(t, c.NeedLeaderElection(), "every replica answers")
		})
	}
}

// TestWorkerExportsCoverImports: every subject a worker's account imports
// is offered by RUNPLANE's exports (an import the server cannot match to
// an export is dropped, and the worker's call then goes nowhere).
func TestWorkerExportsCoverImports(t *testing.T) {
	sc := stream.Config{}.WithDefaults()
	exports := WorkerExports(sc)
	id := natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo-1"}
	imports := natscallout.WorkerImports(WorkerLayout(sc)(id), "ARUNPLANE")
	require.NotEmpty(t, imports)
	for _, imp := range imports {
		covered := false
		for _, exp := range exports {
			if exp.Type == imp.Type && imp.Subject.IsContainedIn(exp.Subject) {
				covered = true
			}
		}
		assert.True(t, covered, "import %s (%s) has no export", imp.Subject, imp.Type)
	}
}

// TestWorkerMaxPayload: a worker's payload bound is the largest message
// its sidecar publishes: a result, or a chunk when chunks are bigger.
func TestWorkerMaxPayload(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  stream.Config
		want int64
	}{
		{name: "defaults: a result of nats-server's default max_payload", want: 1 << 20},
		{name: "bigger results", cfg: stream.Config{ResultMaxMsgSize: 8 << 20}, want: 8 << 20},
		{name: "chunks bigger than results", cfg: stream.Config{ResultMaxMsgSize: 32 << 10}, want: stream.DefaultMaxChunkBytes + 1<<10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, workerMaxPayload(tc.cfg))
		})
	}
}

// TestWorkerSubjects pins the grant to the namespaced layout the sidecar
// uses.
func TestWorkerSubjects(t *testing.T) {
	got := workerSubjects(messages.Subjects{Prefix: "rs"}, "RS", natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo-1"})
	assert.Equal(t, natscallout.WorkerSubjects{
		Stream: "RS", Consumer: "team-a_echo_echo-1", Dispatch: "rs.dispatch.team-a.echo.echo-1", Cancel: "rs.cancel.team-a.echo.echo-1",
		Publish: []string{"rs.result.team-a.echo", "rs.metrics.team-a.echo.echo-1", "rs.chunks.team-a.echo.echo-1.*"}, Replies: "rs.reply.team-a.echo.>",
		Inbox: "_INBOX_RP.team-a.echo.echo-1", ObjectBucket: "RS_OBJ_team-a",
	}, got)
}

type fakeAuth struct{ id natscallout.Identity }

func (f fakeAuth) Authenticate(context.Context, string) (natscallout.Identity, error) {
	return f.id, nil
}

type fakeConsumers struct {
	created []string
	err     error
}

func (f *fakeConsumers) EnsureWorkerConsumer(_ context.Context, ns, pool, worker string) error {
	f.created = append(f.created, ns+"/"+pool+"/"+worker)
	return f.err
}

// TestAdmitWorker: names that are not single subject tokens are refused
// before any subject or consumer is made; an admitted worker's consumer is
// created first, and a failure to create it refuses the worker.
func TestAdmitWorker(t *testing.T) {
	for _, tc := range []struct {
		name        string
		id          natscallout.Identity
		consumerErr error
		wantErr     string
		wantCreated []string
	}{
		{name: "admitted", id: natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo-1"}, wantCreated: []string{"team-a/echo/echo-1"}},
		{name: "dotted pod", id: natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo.1"}, wantErr: "worker \"echo.1\" must not contain '.'"},
		{name: "wildcard pool", id: natscallout.Identity{Namespace: "team-a", Pool: "*", Worker: "echo-1"}, wantErr: "pool \"*\" must not contain"},
		{name: "no namespace", id: natscallout.Identity{Pool: "echo", Worker: "echo-1"}, wantErr: "namespace must not be empty"},
		{name: "consumer not created", id: natscallout.Identity{Namespace: "team-a", Pool: "echo", Worker: "echo-1"}, consumerErr: errors.New("no JetStream"),
			wantErr: "no JetStream", wantCreated: []string{"team-a/echo/echo-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cons := &fakeConsumers{err: tc.consumerErr}
			a := &admitWorker{Authenticator: fakeAuth{id: tc.id}, Consumers: cons}
			_, err := a.Authenticate(context.Background(), "token")
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tc.wantCreated, cons.created)
		})
	}
}
