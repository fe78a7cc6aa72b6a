package pki

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Keys of a rotated Secret besides tls.crt and tls.key.
const (
	KeyCACert   = "ca.crt"        // the current CA certificate
	KeyCAKey    = "ca.key"        // its private key
	KeyCABundle = "ca-bundle.crt" // what clients trust: current CA, then the previous one while valid
	KeyCACross  = "ca-cross.crt"  // the current CA certified by the previous one, while that is valid (Bundle.CrossCert)
)

// SecretRef names the Secret a Bundle is kept in.
type SecretRef struct{ Namespace, Name string }

// Ensure creates the Secret or loads it, renewing (Renew) whatever is due.
// It reports whether it wrote the Secret. Two replicas racing are safe: the
// one whose create loses uses the winner's Secret (every queue replica
// ensures the NATS certificate at start, and failing there would restart
// it); an update that loses gets a conflict error and is retried on the
// next pass, loading the winner's certificate.
func Ensure(ctx context.Context, client kubernetes.Interface, ref SecretRef, o Options) (*Bundle, bool, error) {
	secrets := client.CoreV1().Secrets(ref.Namespace)
	sec, err := secrets.Get(ctx, ref.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		b, renewErr := Renew(nil, o)
		if renewErr != nil {
			return nil, false, renewErr
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ref.Name, Namespace: ref.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "runplane"}},
			Type: corev1.SecretTypeTLS,
			Data: b.secretData(),
		}
		_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		if err == nil {
			return b, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("creating TLS Secret %s/%s: %w", ref.Namespace, ref.Name, err)
		}
		sec, err = secrets.Get(ctx, ref.Name, metav1.GetOptions{}) // another replica won: use its Secret
	}
	if err != nil {
		return nil, false, fmt.Errorf("reading TLS Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	old := FromSecretData(sec.Data)
	b, err := Renew(old, o)
	if err != nil || b == old {
		return b, false, err
	}
	sec = sec.DeepCopy()
	if sec.Data == nil {
		sec.Data = map[string][]byte{}
	}
	maps.Copy(sec.Data, b.secretData())
	if _, err := secrets.Update(ctx, sec, metav1.UpdateOptions{}); err != nil {
		return nil, false, fmt.Errorf("updating TLS Secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return b, true, nil
}

func (b *Bundle) secretData() map[string][]byte {
	return map[string][]byte{
		corev1.TLSCertKey:       b.CertPEM,
		corev1.TLSPrivateKeyKey: b.KeyPEM,
		KeyCACert:               b.CACert,
		KeyCAKey:                b.CAKey,
		KeyCABundle:             b.CABundle,
		KeyCACross:              b.CrossCert,
	}
}

// FromSecretData reads a Bundle from a Secret's data.
func FromSecretData(d map[string][]byte) *Bundle {
	b := &Bundle{CABundle: d[KeyCABundle], CertPEM: d[corev1.TLSCertKey], KeyPEM: d[corev1.TLSPrivateKeyKey],
		CACert: d[KeyCACert], CAKey: d[KeyCAKey], CrossCert: d[KeyCACross]}
	if leaf, err := ParseCert(b.CertPEM); err == nil {
		b.NotAfter = leaf.NotAfter
	}
	return b
}
