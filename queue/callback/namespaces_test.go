package callback

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	k8stesting "k8s.io/client-go/testing"
)

// TestFreshUIDReadsAreBounded: a tenant polling its signing-key endpoint
// (fresh reads), even from many connections at once, costs the apiserver
// about one read a second, not one per request (the reads share a
// rate-limited client with every tenant's invocations).
func TestFreshUIDReadsAreBounded(t *testing.T) {
	client := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a", UID: "uid-a"}})
	var gets atomic.Int32
	client.PrependReactor("get", "namespaces", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil
	})
	k := NewKubeNamespaces(client.CoreV1(), 10*time.Second)
	began := time.Now()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			for range 4 {
				uid, err := k.UID(context.Background(), "team-a", true)
				assert.NoError(t, err)
				assert.Equal(t, "uid-a", uid)
			}
		})
	}
	wg.Wait()
	// One read per started second (a loaded machine may cross one).
	require.LessOrEqual(t, int(gets.Load()), 1+int(time.Since(began)/freshTTL), "200 fresh reads")
	_, err := k.UID(context.Background(), "team-b", true)
	require.ErrorIs(t, err, ErrNoNamespace)
}

// TestSharedReadOutlivesItsFirstCaller: the caller whose request started a
// read hangs up; the read goes on for the others, and its answer is kept
// (before, the read failed with that caller's context, and the next caller
// read again).
func TestSharedReadOutlivesItsFirstCaller(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	ns := &blockingNamespaces{NamespaceInterface: fake.NewClientset().CoreV1().Namespaces(), started: started, release: release}
	k := NewKubeNamespaces(namespacesGetter{ns}, 10*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := k.UID(ctx, "team-a", true)
		first <- err
	}()
	<-started
	cancel()
	require.ErrorIs(t, <-first, context.Canceled, "the caller that hung up gets its own error")
	close(release)
	uid, err := k.UID(context.Background(), "team-a", true)
	require.NoError(t, err)
	require.Equal(t, "uid-a", uid)
	require.EqualValues(t, 1, ns.gets.Load(), "one read for both callers")
}

// blockingNamespaces answers a Get once released, or fails it when its
// context ends, as the API server's client does.
type blockingNamespaces struct {
	corev1client.NamespaceInterface
	started chan struct{}
	release chan struct{}
	gets    atomic.Int32
}

func (b *blockingNamespaces) Get(ctx context.Context, name string, _ metav1.GetOptions) (*corev1.Namespace, error) {
	b.gets.Add(1)
	select {
	case b.started <- struct{}{}:
	default:
	}
	select {
	case <-b.release:
		return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, UID: "uid-a"}}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type namespacesGetter struct {
	ns corev1client.NamespaceInterface
}

func (g namespacesGetter) Namespaces() corev1client.NamespaceInterface { return g.ns }
