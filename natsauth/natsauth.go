// Package natsauth reads NATS credentials the way runplane mounts them: a
// directory (a Secret volume) holding "creds" (a NATS user JWT and seed), or
// "token", or "user" and "password". The worker sidecar and the queue service
// both connect this way, so one Secret shape serves both.
package natsauth

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats.go"
)

// FromDir returns the connect options for the credentials in dir: "creds"
// wins over "token", which wins over "user" + "password". An empty dir name,
// or a directory holding none of them, means no authentication (make dev's
// embedded server without auth).
func FromDir(dir string) ([]nats.Option, error) {
	if dir == "" {
		return nil, nil
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("NATS credentials: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("NATS credentials: %s is not a directory", dir)
	}
	read := func(name string) (string, bool, error) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		if err != nil {
			return "", false, fmt.Errorf("NATS credentials: reading %s: %w", name, err)
		}
		return strings.TrimSpace(string(b)), true, nil
	}
	if _, ok, err := read("creds"); err != nil {
		return nil, err
	} else if ok {
		return []nats.Option{nats.UserCredentials(filepath.Join(dir, "creds"))}, nil
	}
	if tok, ok, err := read("token"); err != nil {
		return nil, err
	} else if ok {
		return []nats.Option{nats.Token(tok)}, nil
	}
	user, okU, err := read("user")
	if err != nil {
		return nil, err
	}
	pass, okP, err := read("password")
	if err != nil {
		return nil, err
	}
	switch {
	case okU && okP:
		return []nats.Option{nats.UserInfo(user, pass)}, nil
	case okU || okP:
		return nil, fmt.Errorf("NATS credentials: %s has only one of user and password; both are needed", dir)
	}
	return nil, nil
}
