package bootstrapsecret

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/runplane/runplane/internal/natsaccounts"
)

// The fake clientset is enough here: Ensure's logic is get, create, and
// re-get on AlreadyExists, which the fake implements as the API server does.
func TestEnsure(t *testing.T) {
	client := fake.NewClientset(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "given", Namespace: "rp"}, Data: map[string][]byte{"password": []byte("mine")},
	}, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "incomplete", Namespace: "rp"}, Data: map[string][]byte{"other": []byte("x")},
	})
	ctx := t.Context()

	data, err := Ensure(ctx, client, "rp", "given", nil, Password, "password")
	require.NoError(t, err)
	require.Equal(t, "mine", string(data["password"]), "an existing Secret is used as it is")

	first, err := Ensure(ctx, client, "rp", "made", map[string]string{"app": "runplane"}, Password, "password")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile(`^[A-Z2-7]{52}$`), string(first["password"]))
	again, err := Ensure(ctx, client, "rp", "made", nil, Password, "password")
	require.NoError(t, err)
	require.Equal(t, first, again, "a second replica reads the first one's password")
	s, err := client.CoreV1().Secrets("rp").Get(ctx, "made", metav1.GetOptions{})
	require.NoError(t, err)
	require.Equal(t, "runplane", s.Labels["app"])

	_, err = Ensure(ctx, client, "rp", "incomplete", nil, Password, "password")
	require.EqualError(t, err, `bootstrap Secret rp/incomplete has no key "password"`)
}

// TestNATSTrust: the generated configuration trusts the generated secret
// (its operator and accounts are the secret's) and holds no private key.
func TestNATSTrust(t *testing.T) {
	data, err := NATSTrust("/data/jwt", nil)()
	require.NoError(t, err)
	trust, err := natsaccounts.Derive(data[TrustSecretKey])
	require.NoError(t, err)
	conf := string(data[TrustConfigKey])
	assert.Contains(t, conf, trust.System.Pub)
	assert.Contains(t, conf, trust.Runplane.Pub)
	assert.Contains(t, conf, `dir: "/data/jwt"`)
	for _, k := range []natsaccounts.Key{trust.Operator, trust.System, trust.Runplane, trust.Queue, trust.WorkerSigner} {
		seed, err := k.Seed()
		require.NoError(t, err)
		assert.NotContains(t, conf, string(seed))
	}
	other, err := NATSTrust("/data/jwt", nil)()
	require.NoError(t, err)
	assert.NotEqual(t, data[TrustSecretKey], other[TrustSecretKey], "every install gets its own secret")
}
