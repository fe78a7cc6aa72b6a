// Package rbac proves that the Helm chart's RBAC is enough for runplane's
// components, and its tests (run: go test ./test/e2e/rbac/) do the proof:
// they helm install charts/runplane into a local control plane
// (test/cluster), then run the webhook, the controllers, the queue and the
// extender in-process, each with a rest.Config that impersonates the
// chart's ServiceAccount for it, and check that each does its job while
// the API server never answers it 403 Forbidden.
//
// The package itself holds the one piece the tests share: Recorder, which
// builds the impersonating rest.Config and records every denial.
package rbac

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// ServiceAccountUser is the user name the API server gives the
// ServiceAccount name in namespace.
func ServiceAccountUser(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Recorder collects the denials one component meets: every HTTP 403 the
// API server answers through a config from As, and every log line written
// to Logger (or to the Recorder as an io.Writer) that mentions "forbidden".
// It keeps the whole log so a failing test can show it. Safe for
// concurrent use.
type Recorder struct {
	mu      sync.Mutex
	denied  []string
	used    map[string]bool
	log     bytes.Buffer
	partial []byte
}

// As returns a copy of base that acts as the ServiceAccount name in
// namespace (with the groups the API server gives ServiceAccounts), whose
// 403 answers r records.
func (r *Recorder) As(base *rest.Config, namespace, name string) *rest.Config {
	c := rest.CopyConfig(base)
	c.Impersonate = rest.ImpersonationConfig{
		UserName: ServiceAccountUser(namespace, name),
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace},
	}
	c.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &recordingTransport{next: rt, r: r} })
	return c
}

// Logger writes text logs into r.
func (r *Recorder) Logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(r, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// Write keeps p in the log and records each complete line that mentions
// "forbidden" (any case) as a denial.
func (r *Recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.log.Write(p)
	r.partial = append(r.partial, p...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			break
		}
		line := string(r.partial[:i])
		r.partial = r.partial[i+1:]
		if strings.Contains(strings.ToLower(line), "forbidden") {
			r.denied = append(r.denied, "log: "+line)
		}
	}
	return len(p), nil
}

// Denied returns the denials recorded so far, in order.
func (r *Recorder) Denied() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.denied...)
}

// Log returns everything written to the Recorder.
func (r *Recorder) Log() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

// Used returns the API requests made through configs from As, as sorted
// RBAC terms ("list secrets", "create pods/binding",
// "update apps/deployments/scale"): what the component actually needed.
func (r *Recorder) Used() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.used))
	for k := range r.used {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *Recorder) use(req *http.Request) {
	term := RBACTerm(req.Method, req.URL)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.used == nil {
		r.used = map[string]bool{}
	}
	r.used[term] = true
}

// RBACTerm names a request to a resource the way an RBAC rule does: verb,
// then group/resource[/subresource] (no group for the core API). Other
// paths (discovery, /version) are named by method and path.
func RBACTerm(method string, u *url.URL) string {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	var group string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		group, parts = parts[1], parts[3:]
	default:
		return method + " " + u.Path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:] // namespaced: drop namespaces/<ns>
	}
	if len(parts) == 0 {
		return method + " " + u.Path
	}
	resource, named := parts[0], len(parts) >= 2
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	if group != "" {
		resource = group + "/" + resource
	}
	verb := map[string]string{http.MethodPost: "create", http.MethodPut: "update", http.MethodPatch: "patch", http.MethodDelete: "delete"}[method]
	switch {
	case method == http.MethodGet && u.Query().Get("watch") == "true":
		verb = "watch"
	case method == http.MethodGet && named:
		verb = "get"
	case method == http.MethodGet:
		verb = "list"
	case method == http.MethodDelete && !named:
		verb = "deletecollection"
	case verb == "":
		verb = strings.ToLower(method)
	}
	return verb + " " + resource
}

func (r *Recorder) deny(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.denied = append(r.denied, s)
}

// recordingTransport records 403 answers; the body is read and put back so
// the client still sees the API server's Status.
type recordingTransport struct {
	next http.RoundTripper
	r    *Recorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.r.use(req)
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		return resp, err
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	msg := strconv.Quote(string(body))
	// The Status comes as JSON or, for clients that ask for it, protobuf.
	if obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(body, nil, nil); err == nil {
		if st, ok := obj.(*metav1.Status); ok {
			msg = st.Message
		}
	}
	if rerr != nil {
		msg += fmt.Sprintf(" (reading the body: %v)", rerr)
	}
	t.r.deny(fmt.Sprintf("403 %s %s: %s", req.Method, req.URL.RequestURI(), msg))
	return resp, nil
}
