package natscallout

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/runplane/runplane/internal/natsaccounts"
	"github.com/runplane/runplane/webhook/mutate"
)

// tokens is a fake Authenticator: token → identity.
type tokens map[string]Identity

func (t tokens) Authenticate(_ context.Context, token string) (Identity, error) {
	id, ok := t[token]
	if !ok {
		return Identity{}, errors.New("unknown token")
	}
	return id, nil
}

// madeAccounts is a fake Accounts: the derived account key, remembered.
type madeAccounts struct {
	trust *natsaccounts.Trust
	made  []string
}

func (m *madeAccounts) Ensure(_ context.Context, id Identity, _ WorkerSubjects) (string, error) {
	k, err := m.trust.WorkerAccount(id.Namespace, id.Pool, id.Worker)
	if err != nil {
		return "", err
	}
	m.made = append(m.made, id.Namespace+"/"+id.Pool+"/"+id.Worker)
	return k.Pub, nil
}

func newTrust(t *testing.T) *natsaccounts.Trust {
	t.Helper()
	secret, err := natsaccounts.NewSecret()
	require.NoError(t, err)
	trust, err := natsaccounts.Derive(secret)
	require.NoError(t, err)
	return trust
}

func newRequest(t *testing.T, token, password string) (req []byte, userPub, serverID string) {
	t.Helper()
	server, err := nkeys.CreateServer()
	require.NoError(t, err)
	serverID, err = server.PublicKey()
	require.NoError(t, err)
	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	userPub, err = user.PublicKey()
	require.NoError(t, err)
	rc := jwt.NewAuthorizationRequestClaims("runplane-test")
	rc.Server.ID = serverID
	rc.UserNkey = userPub
	rc.ConnectOptions.Token = token
	rc.ConnectOptions.Password = password
	s, err := rc.Encode(server)
	require.NoError(t, err)
	return []byte(s), userPub, serverID
}

func TestRespond(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	alice := Identity{Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1", Expires: now.Add(time.Hour)}
	stale := Identity{Name: "team-a/old", Namespace: "team-a", Pool: "echo", Worker: "old", Expires: now.Add(-time.Second)}
	cases := []struct {
		name            string
		token, password string
		maxTTL          time.Duration
		wantRefusal     string // substring of Result.Err; "" means admitted
		wantExpires     time.Time
	}{
		{name: "worker token admitted until the token expires", token: "alice", wantExpires: alice.Expires},
		{name: "token sent as password", password: "alice", wantExpires: alice.Expires},
		{name: "max TTL caps the user", token: "alice", maxTTL: 10 * time.Minute, wantExpires: now.Add(10 * time.Minute)},
		{name: "no token", wantRefusal: "no token presented"},
		{name: "unknown token", token: "mallory", wantRefusal: "unknown token"},
		{name: "expired credential", token: "stale", wantRefusal: "expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			trust := newTrust(t)
			accounts := &madeAccounts{trust: trust}
			r := &Responder{
				Trust: trust, Layout: testLayout, Accounts: accounts, MaxTTL: tc.maxTTL,
				Auth:  tokens{"alice": alice, "stale": stale},
				Clock: clocktesting.NewFakePassiveClock(now),
			}
			req, userPub, serverID := newRequest(t, tc.token, tc.password)

			res, err := r.Respond(context.Background(), req)
			require.NoError(t, err)

			resp, err := jwt.DecodeAuthorizationResponseClaims(string(res.Response))
			require.NoError(t, err)
			assert.Equal(t, trust.Runplane.Pub, resp.Issuer, "signed by the callout's account")
			assert.Equal(t, userPub, resp.Subject, "answers for the connection's user key")
			assert.Equal(t, serverID, resp.Audience, "addressed to the asking server")
			if tc.wantRefusal != "" {
				require.Error(t, res.Err)
				assert.Contains(t, res.Err.Error(), tc.wantRefusal)
				assert.Equal(t, "not authorized", resp.Error, "the client learns nothing about why")
				assert.Empty(t, resp.Jwt)
				assert.Empty(t, accounts.made, "no account for a refused client")
				return
			}
			require.NoError(t, res.Err)
			user, err := jwt.DecodeUserClaims(resp.Jwt)
			require.NoError(t, err)
			assert.Equal(t, userPub, user.Subject)
			own, err := trust.WorkerAccount("team-a", "echo", "echo-1")
			require.NoError(t, err)
			assert.Equal(t, own.Pub, user.IssuerAccount, "placed in the worker's own account")
			assert.Equal(t, trust.WorkerSigner.Pub, user.Issuer, "signed by the workers' signing key")
			assert.Equal(t, []string{"team-a/echo/echo-1"}, accounts.made)
			assert.Equal(t, tc.wantExpires.Unix(), user.Expires)
			assert.Equal(t, WorkerPermissions(testLayout(alice)), user.Permissions)
			assert.Equal(t, jwt.StringList{jwt.ConnectionTypeStandard}, user.AllowedConnectionTypes)
		})
	}
}

func TestRespondRejectsGarbage(t *testing.T) {
	trust := newTrust(t)
	r := &Responder{Trust: trust, Layout: testLayout, Accounts: &madeAccounts{trust: trust}, Auth: tokens{},
		Clock: clocktesting.NewFakePassiveClock(time.Now())}
	_, err := r.Respond(context.Background(), []byte("not a jwt"))
	require.ErrorContains(t, err, "decoding authorization request")
}

// TestRespondUserLimits: the user JWT carries explicit connection limits:
// subscriptions on top of one per unit of the worker's concurrency, a
// payload bound, and no data bound (nats-server keeps none per user).
func TestRespondUserLimits(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name        string
		limits      Limits
		concurrency int
		want        jwt.NatsLimits
	}{
		{name: "defaults", want: jwt.NatsLimits{Subs: DefaultSubscriptions + 1, Payload: DefaultPayload, Data: jwt.NoLimit}},
		{name: "a subscription per concurrent invocation", concurrency: 8,
			want: jwt.NatsLimits{Subs: DefaultSubscriptions + 8, Payload: DefaultPayload, Data: jwt.NoLimit}},
		{name: "configured", limits: Limits{Subscriptions: 10, Payload: 4096}, concurrency: 2,
			want: jwt.NatsLimits{Subs: 12, Payload: 4096, Data: jwt.NoLimit}},
		{name: "unbounded", limits: Limits{Subscriptions: NoLimit, Payload: NoLimit}, concurrency: 2,
			want: jwt.NatsLimits{Subs: jwt.NoLimit, Payload: jwt.NoLimit, Data: jwt.NoLimit}},
		{name: "concurrency beyond the webhook's bound counts as the bound", concurrency: 1 << 30,
			want: jwt.NatsLimits{Subs: DefaultSubscriptions + mutate.MaxConcurrency, Payload: DefaultPayload, Data: jwt.NoLimit}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trust := newTrust(t)
			alice := Identity{Name: "team-a/echo-1", Namespace: "team-a", Pool: "echo", Worker: "echo-1",
				Expires: now.Add(time.Hour), Concurrency: tc.concurrency}
			r := &Responder{Trust: trust, Layout: testLayout, Accounts: &madeAccounts{trust: trust}, Auth: tokens{"alice": alice},
				Limits: tc.limits, Clock: clocktesting.NewFakePassiveClock(now)}
			req, _, _ := newRequest(t, "alice", "")

			res, err := r.Respond(context.Background(), req)
			require.NoError(t, err)
			require.NoError(t, res.Err)
			resp, err := jwt.DecodeAuthorizationResponseClaims(string(res.Response))
			require.NoError(t, err)
			user, err := jwt.DecodeUserClaims(resp.Jwt)
			require.NoError(t, err)
			assert.Equal(t, tc.want, user.NatsLimits)
		})
	}
}
