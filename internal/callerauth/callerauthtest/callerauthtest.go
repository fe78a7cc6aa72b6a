// Package callerauthtest stands in for callerauth.Gate in tests of what
// the queue ingress does with its answers: a bearer token names a user,
// May says what a user may do, and refusals are the Gate's (401, 403).
package callerauthtest

import (
	"net/http"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/runplane/runplane/internal/callerauth"
	"github.com/runplane/runplane/internal/refusal"
)

// Static answers from its tables.
type Static struct {
	Users map[string]string // bearer token → user
	May   func(user string, req callerauth.Request) bool
}

// Authenticate is callerauth.Gate's.
func (s Static) Authenticate(r *http.Request) (user.Info, error) {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	name, known := s.Users[tok]
	if !ok || !known {
		return nil, refusal.New(http.StatusUnauthorized, "", "a valid bearer token is required (Authorization: Bearer <token>)")
	}
	return &user.DefaultInfo{Name: name}, nil
}

// Check is callerauth.Gate's.
func (s Static) Check(r *http.Request, req callerauth.Request) (user.Info, error) {
	u, err := s.Authenticate(r)
	if err != nil {
		return nil, err
	}
	if !s.May(u.GetName(), req) {
		return nil, refusal.New(http.StatusForbidden, "", "%q cannot %s", u.GetName(), req)
	}
	return u, nil
}
