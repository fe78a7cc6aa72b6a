// Command runplane-ssh is the SSH sidecar of runplane's dev-box Pods: key-only
// SSH, SFTP and port forwarding into the Pod. See sidecar/sshserver.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/sidecar/sshserver"
)

func main() {
	var cfg sshserver.Config
	var debug bool
	var installTo string
	flag.StringVar(&installTo, "install-to", "", "copy this binary to the given path and exit (the webhook's init container uses it)")
	flag.StringVar(&cfg.Listen, "listen", sshserver.DefaultListen, "SSH listen address")
	flag.StringVar(&cfg.AuthorizedKeys, "authorized-keys", "", "OpenSSH authorized_keys file (required; re-read when it changes)")
	flag.StringVar(&cfg.HostKey, "host-key", "", "host key file; an ed25519 key is generated there if it does not exist (required)")
	flag.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve Prometheus /metrics on this address (off if empty)")
	flag.DurationVar(&cfg.IdleTimeout, "idle-timeout", sshserver.DefaultIdleTimeout, "close connections idle this long (negative: never)")
	flag.DurationVar(&cfg.KeysPollInterval, "keys-poll-interval", sshserver.DefaultKeysPollInterval, "how often authorized-keys is checked for changes")
	flag.BoolVar(&cfg.AllowRemoteForward, "allow-remote-forward", false, "allow remote port forwarding (ssh -R)")
	flag.BoolVar(&cfg.AllowRoot, "allow-root", false, "allow running as root")
	flag.StringVar(&cfg.Shell, "shell", "", "shell for sessions (default $SHELL, /bin/bash, /bin/sh)")
	flag.BoolVar(&debug, "debug", false, "debug logging")
	flag.Parse()
	if installTo != "" {
		if err := sshserver.InstallSelf(installTo); err != nil {
			fmt.Fprintln(os.Stderr, "runplane-ssh:", err)
			os.Exit(1)
		}
		return
	}

	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	cfg.Logger = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sshserver.Run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "runplane-ssh:", err)
		os.Exit(1)
	}
}
