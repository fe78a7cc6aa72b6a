package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"

	"github.com/runplane/runplane/api"
	v1 "github.com/runplane/runplane/api/serverless/v1"
	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/httpjson"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/queue/callback"
)

// CallbackConfig turns on completion callbacks (queue/callback).
type CallbackConfig struct {
	// Targets restricts the callback URLs an invocation may name.
	Targets callback.Targets
	// MasterKey derives the namespaces' signing keys (from the namespace's
	// UID, Config.Namespaces).
	MasterKey []byte
}

// SubresourceCallbackKey is the RBAC subresource of pools that reads the
// namespace's callback signing key: get pools/callbacksigningkey, granted
// namespace-wide (no pool name) and apart from invoking.
const SubresourceCallbackKey = "callbacksigningkey"

// callbackStatus is the Record's callback of an invocation: its own
// callbackURL, else its pool's runplane.io/callback-url, with the events
// asked for; nil when none.
func (s *Server) callbackStatus(reqURL, poolURL string, events []v1.CallbackEvent) (*messages.CallbackStatus, error) {
	u, field := reqURL, "field callbackURL"
	if u == "" {
		u, field = poolURL, "the pool's annotation "+api.AnnotationCallbackURL
	}
	if u == "" {
		if len(events) > 0 {
			return nil, errors.New("field callbackEvents: no callbackURL, and the pool has no " + api.AnnotationCallbackURL)
		}
		return nil, nil
	}
	if s.cfg.Callbacks == nil {
		return nil, fmt.Errorf("%s: completion callbacks are not enabled on this queue (chart queue.callbacks.enabled)", field)
	}
	if err := s.cfg.Callbacks.Targets.ValidateURL(u); err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	if err := validEvents(events); err != nil {
		return nil, err
	}
	st := &messages.CallbackStatus{URL: u, State: messages.CallbackPending}
	for _, e := range events {
		st.Events = append(st.Events, messages.CallbackEvent(e))
	}
	return st, nil
}

// validEvents: known events, each once.
func validEvents(events []v1.CallbackEvent) error {
	seen := map[v1.CallbackEvent]bool{}
	for _, e := range events {
		if !slices.Contains(v1.CallbackEvents, e) {
			return fmt.Errorf("field callbackEvents: %q is not an event: start or completed", e)
		}
		if seen[e] {
			return fmt.Errorf("field callbackEvents: %q twice", e)
		}
		seen[e] = true
	}
	return nil
}

func (s *Server) handleSigningKey(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	if err := validNamespace(ns); err != nil {
		problem(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if !s.allowed(w, r, callerauth.Request{Verb: VerbRead, Namespace: ns, Subresource: SubresourceCallbackKey}) {
		return
	}
	if s.cfg.Callbacks == nil {
		problem(w, r, http.StatusNotFound, "completion callbacks are not enabled on this queue (chart queue.callbacks.enabled)")
		return
	}
	// Read fresh, never from a cache: a namespace made again under this
	// name must not be handed its predecessor's key.
	uid, err := s.cfg.Namespaces.UID(r.Context(), ns, true)
	if errors.Is(err, callback.ErrNoNamespace) {
		problem(w, r, http.StatusNotFound, fmt.Sprintf("namespace %q not found", ns))
		return
	}
	if err != nil {
		problem(w, r, http.StatusServiceUnavailable, "reading the namespace: "+err.Error())
		return
	}
	httpjson.Write(w, http.StatusOK, v1.SigningKey{Namespace: ns, Key: fmt.Sprintf("%x", callback.NamespaceKey(s.cfg.Callbacks.MasterKey, ns, uid)),
		KeyID: callback.KeyID(uid), Algorithm: "HMAC-SHA256", Header: callback.SignatureHeader})
}

// namespaceUID is the UID of namespace ns for a new invocation's Record
// and callback (one read serves both); the error is the HTTP status and why.
func (s *Server) namespaceUID(ctx context.Context, ns string) (string, int, error) {
	uid, err := s.cfg.Namespaces.UID(ctx, ns, false)
	if errors.Is(err, callback.ErrNoNamespace) {
		return "", http.StatusNotFound, fmt.Errorf("namespace %q not found", ns)
	}
	if err != nil {
		return "", http.StatusServiceUnavailable, fmt.Errorf("reading the namespace: %w", err)
	}
	return uid, 0, nil
}

// sameNamespace tells whether rec belongs to the current namespace of its
// name: a Record without a UID (written before they were stamped, or
// without Kubernetes) does. The cached UID settles a match; a mismatch is
// read again fresh before it refuses, so a cached UID of a namespace made
// again never hides its owner's own Records.
func (s *Server) sameNamespace(ctx context.Context, rec messages.Record) (bool, error) {
	if rec.NamespaceUID == "" {
		return true, nil
	}
	for _, fresh := range []bool{false, true} {
		uid, err := s.cfg.Namespaces.UID(ctx, rec.Namespace, fresh)
		if errors.Is(err, callback.ErrNoNamespace) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading the namespace: %w", err)
		}
		if uid == rec.NamespaceUID {
			return true, nil
		}
	}
	return false, nil
}
