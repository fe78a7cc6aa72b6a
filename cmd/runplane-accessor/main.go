// Command runplane-accessor serves a directory read-only over HTTP
// (internal/filebrowser): listings, downloads, tar.gz archives. The
// accessor Deployments run it over a PVC mounted read-only.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runplane/runplane/internal/filebrowser"
)

func main() {
	root := flag.String("root", "/data", "directory to serve")
	listen := flag.String("listen", ":8080", "HTTP listen address")
	flag.Parse()
	fb, err := filebrowser.New(*root)
	if err != nil {
		fmt.Fprintf(os.Stderr, "runplane-accessor: %v\n", err)
		os.Exit(1)
	}
	defer fb.Close()
	srv := &http.Server{Addr: *listen, Handler: fb, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(os.Stderr, "runplane-accessor: %v\n", err)
		os.Exit(1)
	}
}
