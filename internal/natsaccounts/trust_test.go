package natsaccounts

import (
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDerive: the same secret gives the same keys on every replica, another
// secret other keys, and every key of one trust is distinct (a worker
// account can never be RUNPLANE or another worker's).
func TestDerive(t *testing.T) {
	secret := make([]byte, SecretSize)
	for i := range secret {
		secret[i] = byte(i)
	}
	a, err := Derive(secret)
	require.NoError(t, err)
	b, err := Derive(append([]byte(nil), secret...))
	require.NoError(t, err)
	assert.Equal(t, a.Runplane.Pub, b.Runplane.Pub)
	other, err := NewSecret()
	require.NoError(t, err)
	c, err := Derive(other)
	require.NoError(t, err)
	assert.NotEqual(t, a.Runplane.Pub, c.Runplane.Pub)

	_, err = Derive(secret[:SecretSize-1])
	require.ErrorContains(t, err, "want at least 32")

	seen := map[string]string{}
	add := func(what, pub string) {
		t.Helper()
		require.NotContains(t, seen, pub, "%s shares its key with %s", what, seen[pub])
		seen[pub] = what
	}
	for what, k := range map[string]Key{"operator": a.Operator, "SYS": a.System, "RUNPLANE": a.Runplane, "queue": a.Queue,
		"SYS user": a.SystemUser, "worker signer": a.WorkerSigner, "sentinel": a.Sentinel} {
		add(what, k.Pub)
	}
	for _, w := range [][3]string{{"a", "b", "c"}, {"a", "bc", ""}, {"ab", "c", ""}, {"a", "b", "d"}} {
		k, err := a.WorkerAccount(w[0], w[1], w[2])
		require.NoError(t, err)
		add("worker "+w[0]+"/"+w[1]+"/"+w[2], k.Pub)
		again, err := b.WorkerAccount(w[0], w[1], w[2])
		require.NoError(t, err)
		assert.Equal(t, k.Pub, again.Pub, "the same on every replica")
	}
}

// TestWorkerAccountJWT: a worker's account has no JetStream, no exports and
// no leaf nodes, trusts the workers' signing key, and a revocation revokes
// every user issued before it.
func TestWorkerAccountJWT(t *testing.T) {
	secret, err := NewSecret()
	require.NoError(t, err)
	tr, err := Derive(secret)
	require.NoError(t, err)
	k, err := tr.WorkerAccount("team-a", "echo", "echo-1")
	require.NoError(t, err)
	var imps jwt.Imports
	imps.Add(&jwt.Import{Name: "r", Subject: "rs.result.team-a.echo", Account: tr.Runplane.Pub, Type: jwt.Service})
	s, err := tr.WorkerAccountJWT(WorkerAccount{Key: k, Name: "team-a/echo/echo-1", Imports: imps, Connections: 4, RevokedBefore: 1_700_000_000})
	require.NoError(t, err)
	ac, err := jwt.DecodeAccountClaims(s)
	require.NoError(t, err)
	assert.Equal(t, tr.Operator.Pub, ac.Issuer)
	assert.False(t, ac.Limits.IsJSEnabled())
	assert.Empty(t, ac.Exports)
	assert.Zero(t, ac.Limits.LeafNodeConn)
	assert.Equal(t, int64(4), ac.Limits.Conn)
	assert.True(t, ac.SigningKeys.Contains(tr.WorkerSigner.Pub))
	assert.True(t, ac.Revocations.IsRevoked("any-user", time.Unix(1_699_999_999, 0)))
	vr := jwt.CreateValidationResults()
	ac.Validate(vr)
	assert.Empty(t, vr.Errors())
}
