package queue

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/internal/natscallout"
	"github.com/runplane/runplane/queue/stream"
)

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestNATSAuthOptions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		cfg      Config
		wantOpts int
		wantErr  string
	}{
		{name: "none", cfg: Config{}},
		{name: "user and password", cfg: Config{NATSUser: "q", NATSPasswordFile: writeFile(t, "pw\n")}, wantOpts: 1},
		{name: "user alone", cfg: Config{NATSUser: "q"}, wantErr: "go together"},
		{name: "password alone", cfg: Config{NATSPasswordFile: "/x"}, wantErr: "go together"},
		{name: "empty password", cfg: Config{NATSUser: "q", NATSPasswordFile: writeFile(t, " \n")}, wantErr: "is empty"},
		{name: "missing password file", cfg: Config{NATSUser: "q", NATSPasswordFile: "/nonexistent/pw"}, wantErr: "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts, err := natsAuthOptions(tc.cfg)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Len(t, opts, tc.wantOpts)
		})
	}
}

func TestNewCallout(t *testing.T) {
	account, err := nkeys.CreateAccount()
	require.NoError(t, err)
	accountSeed, err := account.Seed()
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	userSeed, err := user.Seed()
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	permit := WorkerPermit(stream.Config{}.WithDefaults())
	for _, tc := range []struct {
		name    string
		seed    string
		noKube  bool
		wantErr string
	}{
		{name: "account seed", seed: writeFile(t, string(accountSeed))},
		{name: "user seed", seed: writeFile(t, string(userSeed)), wantErr: "not an account key"},
		{name: "not a seed", seed: writeFile(t, "SAnonsense"), wantErr: "issuer seed"},
		{name: "missing file", seed: "/nonexistent/seed", wantErr: "no such file"},
		{name: "no Kubernetes", seed: writeFile(t, string(accountSeed)), noKube: true, wantErr: "needs a Kubernetes config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var kube kubernetes.Interface
			if !tc.noKube {
				kube = fake.NewClientset()
			}
			c, err := newCallout(CalloutConfig{IssuerSeedFile: tc.seed, MaxSubscriptions: 32, MaxPayload: 4096}, nil, kube, &fakeConsumers{}, nil, nil, permit, nil, log)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, DefaultCalloutAccount, c.responder.Account)
			assert.Equal(t, natscallout.Limits{Subscriptions: 32, Payload: 4096}, c.responder.Limits)
			assert.False(t, c.NeedLeaderElection(), "every replica answers")
		})
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
