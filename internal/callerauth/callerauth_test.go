package callerauth

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/runplane/runplane/internal/refusal"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// fakeAPI is an apiserver that serves only TokenReviews, from users
// (token → username), and SubjectAccessReviews, from grants (username →
// allowed "verb namespace pool"); the reviewers use client-go's REST client
// directly, so a fake clientset cannot stand in for it.
type fakeAPI struct {
	client        kubernetes.Interface
	tokenReviews  atomic.Int32
	accessReviews atomic.Int32
	lastSAR       atomic.Pointer[authzv1.SubjectAccessReviewSpec]
}

func newFakeAPI(t *testing.T, users map[string]string, grants map[string][]string, outage bool) *fakeAPI {
	f := &fakeAPI{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /apis/authentication.k8s.io/v1/tokenreviews", func(w http.ResponseWriter, r *http.Request) {
		f.tokenReviews.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if outage {
			w.WriteHeader(http.StatusServiceUnavailable)
			require.NoError(t, json.NewEncoder(w).Encode(apierrors.NewServiceUnavailable("etcd is down").Status()))
			return
		}
		var tr authnv1.TokenReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&tr))
		if name, ok := users[tr.Spec.Token]; ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: name}}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		tr.APIVersion, tr.Kind = "authentication.k8s.io/v1", "TokenReview"
		require.NoError(t, json.NewEncoder(w).Encode(tr))
	})
	mux.HandleFunc("POST /apis/authorization.k8s.io/v1/subjectaccessreviews", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		f.accessReviews.Add(1)
		var sar authzv1.SubjectAccessReview
		require.NoError(t, json.NewDecoder(r.Body).Decode(&sar))
		f.lastSAR.Store(&sar.Spec)
		ra := sar.Spec.ResourceAttributes
		for _, g := range grants[sar.Spec.User] {
			if g == ra.Verb+" "+ra.Namespace+" "+ra.Name {
				sar.Status.Allowed = true
			}
		}
		sar.APIVersion, sar.Kind = "authorization.k8s.io/v1", "SubjectAccessReview"
		require.NoError(t, json.NewEncoder(w).Encode(sar))
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	require.NoError(t, err)
	f.client = client
	return f
}

func request(token string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/v1/namespaces/team-a/pools/echo/invocations", nil)
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return r
}

func TestCheck(t *testing.T) {
	users := map[string]string{
		"tok-a": "system:serviceaccount:team-a:client",
		"tok-b": "system:serviceaccount:team-b:client",
	}
	grants := map[string][]string{"system:serviceaccount:team-a:client": {"create team-a echo", "get team-a echo"}}
	invoke := Request{Verb: "create", Namespace: "team-a", Pool: "echo", Subresource: SubresourceInvocations}
	cases := []struct {
		name       string
		token      string
		req        Request
		outage     bool
		wantUser   string
		wantStatus int    // a Refusal's status; 0 with wantUser "" means an outage error
		wantMsg    string // substring of the refusal
	}{
		{name: "tenant invokes its own pool", token: "tok-a", req: invoke, wantUser: users["tok-a"]},
		{name: "no token", req: invoke, wantStatus: 401, wantMsg: "bearer token is required"},
		{name: "forged token", token: "forged", req: invoke, wantStatus: 401, wantMsg: "bearer token is required"},
		{name: "another tenant's token", token: "tok-b", req: invoke, wantStatus: 403,
			wantMsg: `"system:serviceaccount:team-b:client" cannot create pools/invocations "echo" in API group "serverless.runplane.io" in namespace "team-a"`},
		{name: "verb not granted", token: "tok-a", req: Request{Verb: "delete", Namespace: "team-a", Pool: "echo", Subresource: SubresourceInvocations},
			wantStatus: 403, wantMsg: "cannot delete pools/invocations"},
		{name: "apiserver down", token: "tok-a", req: invoke, outage: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			api := newFakeAPI(t, users, grants, tc.outage)
			g, err := New(api.client, Options{})
			require.NoError(t, err)

			u, err := g.Check(request(tc.token), tc.req)

			switch {
			case tc.wantUser != "":
				require.NoError(t, err)
				assert.Equal(t, tc.wantUser, u.GetName())
				sar := api.lastSAR.Load()
				require.NotNil(t, sar)
				assert.Equal(t, authzv1.ResourceAttributes{Namespace: "team-a", Verb: "create", Group: Group,
					Resource: Resource, Subresource: SubresourceInvocations, Name: "echo"}, *sar.ResourceAttributes)
			case tc.wantStatus != 0:
				var ref *refusal.Error
				require.ErrorAs(t, err, &ref)
				assert.Equal(t, tc.wantStatus, ref.Status)
				assert.Contains(t, ref.Error(), tc.wantMsg)
			default:
				require.Error(t, err)
				var ref *refusal.Error
				assert.NotErrorAs(t, err, &ref, "an outage is not the caller's fault")
			}
		})
	}
}

// TestCheckCachesTokenReviews: one TokenReview serves repeated calls with
// the same token (the warm path must not pay an apiserver round trip).
func TestCheckCachesTokenReviews(t *testing.T) {
	api := newFakeAPI(t, map[string]string{"tok-a": "alice"}, map[string][]string{"alice": {"create team-a echo"}}, false)
	g, err := New(api.client, Options{})
	require.NoError(t, err)
	for range 5 {
		_, err := g.Check(request("tok-a"), Request{Verb: "create", Namespace: "team-a", Pool: "echo", Subresource: SubresourceInvocations})
		require.NoError(t, err)
	}
	assert.Equal(t, int32(1), api.tokenReviews.Load())
}
