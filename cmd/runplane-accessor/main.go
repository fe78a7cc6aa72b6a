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
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/filebrowser"
	"github.com/runplane/runplane/internal/filebrowser/claimauth"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "runplane-accessor: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	root := flag.String("root", "/data", "directory to serve")
	listen := flag.String("listen", ":8080", "HTTP listen address")
	namespace := flag.String("namespace", "", "namespace of the served PVC (required): callers must be allowed to get it")
	claim := flag.String("claim", "", "name of the served PVC (required)")
	apiServer := flag.String("api-server", "", "API server URL (default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT)")
	caFile := flag.String("ca-file", "/var/run/runplane/kube-ca/ca.crt", "CA bundle of the API server (the kube-root-ca.crt ConfigMap)")
	flag.Parse()
	host := *apiServer
	if host == "" {
		h, p := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if h == "" || p == "" {
			return errors.New("--api-server is required outside a cluster (KUBERNETES_SERVICE_HOST/PORT unset)")
		}
		host = "https://" + net.JoinHostPort(h, p)
	}
	rc, err := claimauth.RESTClient(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAFile: *caFile}})
	if err != nil {
		return err
	}
	gate, err := claimauth.New(claimauth.Claim{Namespace: *namespace, Name: *claim}, claimauth.SelfReviewer{Client: rc}, claimauth.Options{})
	if err != nil {
		return err
	}
	fb, err := filebrowser.New(*root)
	if err != nil {
		return err
	}
	defer fb.Close()
	srv := &http.Server{Addr: *listen, Handler: gate.Wrap(fb), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
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
