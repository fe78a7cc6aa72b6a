package natscallout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// RevocationsBucket is the KV bucket (in RUNPLANE) of revoked worker
// accounts.
const RevocationsBucket = "runplane-nats-revocations"

// KVRevocations keeps the revoked worker accounts in a JetStream KV bucket
// whose entries expire after RevokedHold: every queue replica reads the
// same record, so a replica whose caches still admit a deleted Pod's token
// cannot push its account back.
type KVRevocations struct {
	KV jetstream.KeyValue
}

// OpenRevocations makes (or updates) the bucket.
func OpenRevocations(ctx context.Context, js jetstream.JetStream, replicas int) (*KVRevocations, error) {
	kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: RevocationsBucket, Description: "revoked worker accounts (runplane's NATS auth callout)",
		TTL: RevokedHold, History: 1, Replicas: max(replicas, 1), Storage: jetstream.FileStorage,
	})
	if err != nil {
		return nil, fmt.Errorf("create KV bucket %s: %w", RevocationsBucket, err)
	}
	return &KVRevocations{KV: kv}, nil
}

// Revoked implements Revocations.
func (r *KVRevocations) Revoked(ctx context.Context, account string) (bool, error) {
	_, err := r.KV.Get(ctx, account)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// Revoke implements Revocations.
func (r *KVRevocations) Revoke(ctx context.Context, account string) error {
	_, err := r.KV.Put(ctx, account, []byte(strconv.FormatInt(time.Now().Unix(), 10)))
	return err
}
