// Command runplane-ssh is the SSH server of runplane's dev-box Pods: key-only
// SSH, SFTP and port forwarding into the Pod, run inside its main container
// by --launch (the webhook puts it in front of the container's command).
// See sidecar/sshserver.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/sidecar/sshserver"
	"github.com/runplane/runplane/sidecar/sshserver/launcher"
)

func main() {
	var cfg sshserver.Config
	var installTo string
	var launch bool
	flag.StringVar(&installTo, "install-to", "", "copy this binary to the given path and exit (the webhook's init container uses it)")
	flag.BoolVar(&launch, "launch", false, "run the command after -- as this container's main process and serve SSH beside it (the webhook puts this in front of an SSH Pod's main container command)")
	flag.StringVar(&cfg.Listen, "listen", sshserver.DefaultListen, "SSH listen address")
	flag.StringVar(&cfg.AuthorizedKeys, "authorized-keys", "", "OpenSSH authorized_keys file (required; re-read when it changes)")
	flag.StringVar(&cfg.HostKey, "host-key", "", "host key file; an ed25519 key is generated there if it does not exist (required)")
	flag.StringVar(&cfg.MetricsListen, "metrics-listen", "", "serve Prometheus /metrics on this loopback address (127.0.0.1:port or [::1]:port: the server runs in a tenant's container; off if empty)")
	flag.DurationVar(&cfg.IdleTimeout, "idle-timeout", sshserver.DefaultIdleTimeout, "close connections idle this long (negative: never)")
	flag.DurationVar(&cfg.KeysPollInterval, "keys-poll-interval", sshserver.DefaultKeysPollInterval, "how often authorized-keys is checked for changes")
	flag.IntVar(&cfg.MaxChannels, "max-channels", sshserver.DefaultMaxChannels, "channels (sessions and forwards) open at once per connection; more are rejected")
	flag.IntVar(&cfg.MaxUnauthenticated, "max-unauthenticated", sshserver.DefaultMaxUnauthenticated, "connections in the handshake at once; more are closed before it (like sshd MaxStartups)")
	flag.IntVar(&cfg.MaxUnauthenticatedPerSource, "max-unauthenticated-per-source", sshserver.DefaultMaxUnauthenticatedPerSource, "connections in the handshake at once from one client address; more from it are closed before it (like sshd PerSourceMaxStartups)")
	flag.DurationVar(&cfg.LoginGraceTime, "login-grace-time", sshserver.DefaultLoginGraceTime, "close connections not authenticated within this time (like sshd LoginGraceTime)")
	flag.BoolVar(&cfg.AllowRemoteForward, "allow-remote-forward", false, "allow remote port forwarding (ssh -R)")
	flag.BoolVar(&cfg.AllowRoot, "allow-root", false, "allow running as root")
	flag.StringVar(&cfg.Shell, "shell", "", "shell for sessions (default $SHELL, /bin/bash, /bin/sh)")
	cfg.Logger = cmdline.ParseCommand(flag.CommandLine, os.Args[1:], logging.Options{})
	if installTo != "" {
		if err := sshserver.InstallSelf(installTo); err != nil {
			cmdline.Exit(err)
		}
		return
	}

	if launch {
		os.Exit(runLauncher(cfg))
	}
	if flag.NArg() > 0 {
		cmdline.Exit(cmdline.Usage(fmt.Errorf("unexpected arguments %q (a command to run needs --launch)", flag.Args())))
	}

	// Zero means "default" in sshserver.Config; on the command line it is a
	// mistake, not a request for the default.
	if cfg.MaxChannels < 1 || cfg.MaxUnauthenticated < 1 || cfg.MaxUnauthenticatedPerSource < 1 || cfg.LoginGraceTime <= 0 {
		cmdline.Exit(cmdline.Usage(errors.New("--max-channels, --max-unauthenticated and --max-unauthenticated-per-source must be at least 1, --login-grace-time positive")))
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := sshserver.Run(ctx, cfg); err != nil {
		stop()
		cmdline.Exit(err)
	}
}

// runLauncher runs the user's command (the arguments after --) with the
// SSH server beside it: the server is this binary again, with the same
// flags but --launch. It returns the container's exit status; its errors
// are logged as every fatal error is (internal/cmdline).
func runLauncher(cfg sshserver.Config) int {
	if flag.NArg() == 0 {
		cmdline.Exit(cmdline.Usage(errors.New("--launch needs the command to run after --")))
	}
	self, err := os.Executable()
	if err != nil {
		cfg.Logger.Error("runplane-ssh failed", "err", fmt.Sprintf("locating own executable: %v", err), "exitCode", launcher.ExitStartFailed)
		return launcher.ExitStartFailed
	}
	flags := os.Args[1 : len(os.Args)-flag.NArg()]
	server := []string{self}
	for _, f := range flags {
		switch f {
		case "--", "--launch", "-launch", "--launch=true", "-launch=true":
			continue
		}
		server = append(server, f)
	}
	code, err := launcher.Run(launcher.Config{Command: flag.Args(), Server: server, Logger: cfg.Logger})
	if err != nil {
		cfg.Logger.Error("runplane-ssh failed", "err", err.Error(), "exitCode", code)
	}
	return code
}
