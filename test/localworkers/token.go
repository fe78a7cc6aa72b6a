package localworkers

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/runplane/runplane/api"
)

// tokenKeeper does for a local worker what the kubelet does for the
// projected volume the webhook gives the sidecar: it keeps a file holding
// a token of the Pod's ServiceAccount, bound to the Pod, for the NATS
// audience, and renews it at 80% of its life. The sidecar re-reads the file
// whenever it (re)connects.
type tokenKeeper struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startToken writes the first token before returning when it can; when
// the apiserver refuses, it keeps trying in the background (the sidecar
// fails to start without the file and is restarted until it is there).
func startToken(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, path string, lifetime time.Duration, logf func(string, ...any)) *tokenKeeper {
	ctx, cancel := context.WithCancel(ctx)
	k := &tokenKeeper{cancel: cancel, done: make(chan struct{})}
	next, err := writeToken(ctx, client, pod, path, lifetime)
	go func() {
		defer close(k.done)
		for {
			if err != nil {
				logf("localworkers: NATS token of %s/%s: %v", pod.Namespace, pod.Name, err)
				next = time.Second
			}
			t := time.NewTimer(next)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			next, err = writeToken(ctx, client, pod, path, lifetime)
		}
	}()
	return k
}

func (k *tokenKeeper) stop() {
	k.cancel()
	<-k.done
}

// writeToken mints a bound token, replaces the file atomically and says
// when to renew it.
func writeToken(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, path string, lifetime time.Duration) (time.Duration, error) {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	tr, err := client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences:         []string{api.NATSTokenAudience},
		ExpirationSeconds: ptr.To(int64(lifetime / time.Second)),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("TokenRequest for ServiceAccount %s: %w", sa, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-*")
	if err != nil {
		return 0, fmt.Errorf("token file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(tr.Status.Token); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("token file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("token file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return 0, fmt.Errorf("token file: %w", err)
	}
	life := time.Until(tr.Status.ExpirationTimestamp.Time)
	return max(life*4/5, time.Second), nil
}
