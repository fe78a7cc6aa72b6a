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
