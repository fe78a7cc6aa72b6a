// Package bootstrapsecret creates, at run time, the Secrets runplane's
// bundled NATS needs, so the chart's render holds no key material and two
// renders are identical (GitOps tools render the chart without a cluster):
// the NATS trust chain (internal/natsaccounts) and the route password of a
// NATS cluster. A Secret that exists (created by an
// earlier replica, or by the installer: an existing Secret) is never
// changed; replicas racing to create one all read the winner's.
package bootstrapsecret

import (
	"context"
	"crypto/rand"
	"fmt"

	"github.com/nats-io/jwt/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/runplane/runplane/internal/natsaccounts"
)

// Generator makes a new Secret's data.
type Generator func() (map[string][]byte, error)

// Ensure returns the data of Secret namespace/name, creating it with gen
// (and labels) when it does not exist. The keys a caller needs are checked
// so a hand-made Secret missing one fails with its name.
func Ensure(ctx context.Context, client kubernetes.Interface, namespace, name string, labels map[string]string, gen Generator, keys ...string) (map[string][]byte, error) {
	secrets := client.CoreV1().Secrets(namespace)
	s, err := secrets.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		data, genErr := gen()
		if genErr != nil {
			return nil, fmt.Errorf("generating Secret %s/%s: %w", namespace, name, genErr)
		}
		s, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels},
			Type:       corev1.SecretTypeOpaque, Data: data,
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // another replica won the race: use its Secret
			s, err = secrets.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap Secret %s/%s: %w", namespace, name, err)
	}
	for _, k := range keys {
		if len(s.Data[k]) == 0 {
			return nil, fmt.Errorf("bootstrap Secret %s/%s has no key %q", namespace, name, k)
		}
	}
	return s.Data, nil
}

// Password generates {"password": 52 random base32 characters (260
// bits)}: letters and digits only, safe in a NATS configuration and in a
// nats-route:// URL without escaping.
func Password() (map[string][]byte, error) {
	return map[string][]byte{"password": []byte(rand.Text() + rand.Text())}, nil
}

// Keys of the NATS trust Secret.
const (
	// TrustSecretKey holds the secret every key of runplane's NATS trust
	// chain is derived from (internal/natsaccounts); only the queue reads it.
	TrustSecretKey = "secret"
	// TrustConfigKey holds the trust part of nats-server's configuration
	// (operator, system account, resolver, preloaded accounts, sentinel),
	// which the bundled NATS includes; it holds no private key.
	TrustConfigKey = "trust.conf"
)

// NATSTrust generates a new trust secret and the nats-server configuration
// that trusts it, its resolver storing account JWTs in resolverDir and
// RUNPLANE exporting exports.
func NATSTrust(resolverDir string, exports jwt.Exports) Generator {
	return func() (map[string][]byte, error) {
		secret, err := natsaccounts.NewSecret()
		if err != nil {
			return nil, err
		}
		t, err := natsaccounts.Derive(secret)
		if err != nil {
			return nil, err
		}
		conf, err := t.ServerConfig(resolverDir, exports)
		if err != nil {
			return nil, err
		}
		return map[string][]byte{TrustSecretKey: secret, TrustConfigKey: []byte(conf)}, nil
	}
}
