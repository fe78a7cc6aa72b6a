// Package natsaccounts is runplane's NATS trust chain: nats-server runs in
// operator mode, and the account, not a permission inside one, is the
// boundary between tenants.
//
//   - The operator signs every account. Its key never leaves the queue.
//   - SYS is the system account; the queue's SYS user pushes account JWTs
//     to the server's resolver.
//   - RUNPLANE holds every stream, bucket and the queue's own user. It
//     exports, as services and streams, the subjects workers use, and it is
//     the auth callout's account (its users are exempt from the callout).
//   - Each worker Pod gets an account of its own, made when the callout
//     admits it: no JetStream, no users but the worker's, and imports of
//     exactly its subjects. A request a worker makes through an import gets
//     its reply mapped by the server into a subject of RUNPLANE's own
//     (_R_…), routed back into the worker's account, so no reply subject a
//     worker names can make JetStream publish into RUNPLANE.
//
// Every key is derived from one secret (HMAC-SHA256 of a label), so the
// queue's replicas agree on every account without sharing state, and the
// only thing an install keeps is that secret.
package natsaccounts

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/nats-io/nkeys"
)

// SecretSize is the length of the secret every key is derived from.
const SecretSize = 32

// NewSecret returns a new random secret.
func NewSecret() ([]byte, error) {
	b := make([]byte, SecretSize)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("generating the NATS trust secret: %w", err)
	}
	return b, nil
}

// Trust holds runplane's keys, derived from one secret.
type Trust struct {
	secret []byte
	// Operator signs accounts; System and Runplane are the SYS and RUNPLANE
	// accounts; Queue is the queue's user in RUNPLANE (the callout's
	// auth user) and SystemUser the queue's user in SYS. WorkerSigner is a
	// signing key of every worker account: the callout signs the workers'
	// users with it.
	// Sentinel is the user clients without a JWT of their own connect as.
	Operator, System, Runplane, Queue, SystemUser, WorkerSigner, Sentinel Key
}

// Key is a key pair and its public key.
type Key struct {
	nkeys.KeyPair
	Pub string
}

// Derive derives every key from secret (at least SecretSize bytes).
func Derive(secret []byte) (*Trust, error) {
	if len(secret) < SecretSize {
		return nil, fmt.Errorf("the NATS trust secret has %d bytes, want at least %d", len(secret), SecretSize)
	}
	t := &Trust{secret: append([]byte(nil), secret...)}
	for _, k := range []struct {
		dst    *Key
		prefix nkeys.PrefixByte
		label  string
	}{
		{&t.Operator, nkeys.PrefixByteOperator, "operator"},
		{&t.System, nkeys.PrefixByteAccount, "account/SYS"},
		{&t.Runplane, nkeys.PrefixByteAccount, "account/RUNPLANE"},
		{&t.Queue, nkeys.PrefixByteUser, "user/RUNPLANE/queue"},
		{&t.SystemUser, nkeys.PrefixByteUser, "user/SYS/queue"},
		{&t.WorkerSigner, nkeys.PrefixByteAccount, "signer/worker"},
		{&t.Sentinel, nkeys.PrefixByteUser, "user/RUNPLANE/sentinel"},
	} {
		kp, err := t.derive(k.prefix, k.label)
		if err != nil {
			return nil, err
		}
		*k.dst = kp
	}
	return t, nil
}

// WorkerAccount is the account key of one worker (ns/pool/worker): the
// same on every replica and across restarts.
func (t *Trust) WorkerAccount(ns, pool, worker string) (Key, error) {
	// NUL cannot occur in a Kubernetes name: no two workers share a label.
	return t.derive(nkeys.PrefixByteAccount, "account/worker\x00"+ns+"\x00"+pool+"\x00"+worker)
}

func (t *Trust) derive(prefix nkeys.PrefixByte, label string) (Key, error) {
	mac := hmac.New(sha256.New, t.secret)
	mac.Write([]byte(label))
	kp, err := nkeys.FromRawSeed(prefix, mac.Sum(nil))
	if err != nil {
		return Key{}, fmt.Errorf("deriving the NATS key %s: %w", label, err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return Key{}, fmt.Errorf("deriving the NATS key %s: %w", label, err)
	}
	return Key{KeyPair: kp, Pub: pub}, nil
}
