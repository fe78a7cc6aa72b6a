package bootstrapsecret

import (
	"regexp"
	"testing"

	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	require.EqualError(t, err, `Secret rp/incomplete has no key "password"`)
}

func TestAccountNKey(t *testing.T) {
	data, err := AccountNKey()
	require.NoError(t, err)
	kp, err := nkeys.FromSeed(data["seed"])
	require.NoError(t, err)
	pub, err := kp.PublicKey()
	require.NoError(t, err)
	require.Equal(t, pub, string(data["issuer"]))
	require.True(t, nkeys.IsValidPublicAccountKey(pub))
}
