// Command runplane-accessor serves a directory read-only over HTTP
// (internal/filebrowser): listings, downloads, tar.gz archives. The
// accessor Deployments run it over a PVC mounted read-only. Every request
// must carry a bearer token whose owner may get that PVC
// (internal/filebrowser/claimauth); the accessor holds no credential of its
// own and reaches the API server at KUBERNETES_SERVICE_HOST/PORT with the
// cluster's CA (the kube-root-ca.crt ConfigMap, mounted).
package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/filebrowser"
	"github.com/runplane/runplane/internal/filebrowser/claimauth"
	"github.com/runplane/runplane/internal/logging"
)

func main() {
	fs, o := newFlags()
	cmdline.Parse(fs, os.Args[1:], logging.Options{})
	if err := run(*o, os.Getenv); err != nil {
		cmdline.Exit(err)
	}
}

// options are the command line.
type options struct {
	root, listen, namespace, claim, apiServer, caFile string
}

// newFlags defines the command line's flags into the options it returns.
func newFlags() (*flag.FlagSet, *options) {
	o := new(options)
	fs := flag.NewFlagSet("runplane-accessor", flag.ContinueOnError)
	fs.StringVar(&o.root, "root", "/data", "directory to serve")
	fs.StringVar(&o.listen, "listen", ":8080", "HTTP listen address")
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the served PVC (required): callers must be allowed to get it")
	fs.StringVar(&o.claim, "claim", "", "name of the served PVC (required)")
	fs.StringVar(&o.apiServer, "api-server", "", "API server URL (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	fs.StringVar(&o.caFile, "ca-file", "/var/run/runplane/kube-ca/ca.crt", "CA bundle of the API server (the kube-root-ca.crt ConfigMap)")
	return fs, o
}

// parse parses args without the shared flags (tests).
func parse(args []string) (options, error) {
	fs, o := newFlags()
	err := fs.Parse(args)
	return *o, err
}

// handler is the file browser behind the authorization gate.
func handler(o options, getenv func(string) string) (http.Handler, io.Closer, error) {
	host := o.apiServer
	if host == "" {
		h, p := getenv("KUBERNETES_SERVICE_HOST"), getenv("KUBERNETES_SERVICE_PORT")
		if h == "" || p == "" {
			return nil, nil, errors.New("--api-server is required outside a cluster (KUBERNETES_SERVICE_HOST/PORT unset)")
		}
		host = "https://" + net.JoinHostPort(h, p)
	}
	rc, err := claimauth.RESTClient(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAFile: o.caFile}})
	if err != nil {
		return nil, nil, err
	}
	gate, err := claimauth.New(claimauth.Claim{Namespace: o.namespace, Name: o.claim}, claimauth.SelfReviewer{Client: rc}, claimauth.Options{})
	if err != nil {
		return nil, nil, err
	}
	fb, err := filebrowser.New(o.root)
	if err != nil {
		return nil, nil, err
	}
	return gate.Wrap(fb), fb, nil
}

func run(o options, getenv func(string) string) error {
	h, closer, err := handler(o, getenv)
	if err != nil {
		return err
	}
	defer closer.Close()
	srv := &http.Server{Addr: o.listen, Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
