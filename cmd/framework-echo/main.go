// Command framework-echo is the reference framework: it serves the unix
// socket contract and answers every invocation with its own envelope.
// Flags (or FRAMEWORK_ECHO_* env) make it slow, failing or crashing for tests.
package main

import (
	"context"
	"flag"
	"fmt"

	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/internal/cmdline"
	"github.com/runplane/runplane/internal/logging"
	"github.com/runplane/runplane/internal/tracing"
)

func main() {
	if err := run(); err != nil {
		cmdline.Exit(err)
	}
}

func run() error {
	socket := flag.String("socket", firstEnv(api.EnvFrameworkSocket, api.EnvSeedSocketPath, api.DefaultFrameworkSocket), "unix socket to serve ("+api.EnvFrameworkSocket+")")
	invokePath := flag.String("invoke-path", firstEnv(api.EnvFrameworkInvokePath, api.EnvSeedInvokePath, framework.DefaultInvokePath), "invoke path")
	healthPath := flag.String("health-path", firstEnv(api.EnvFrameworkHealthPath, api.EnvSeedHealthPath, framework.DefaultHealthPath), "health path")
	sleep := flag.String("sleep", os.Getenv("FRAMEWORK_ECHO_SLEEP"), "sleep this long in every invocation (FRAMEWORK_ECHO_SLEEP)")
	fail := flag.String("fail", os.Getenv("FRAMEWORK_ECHO_FAIL"), "answer every invocation with this error (FRAMEWORK_ECHO_FAIL)")
	crash := flag.String("crash", os.Getenv("FRAMEWORK_ECHO_CRASH"), "exit mid-invocation: true or false (FRAMEWORK_ECHO_CRASH)")
	var tr tracing.Settings
	tr.AddFlags(flag.CommandLine)
	log := cmdline.Parse(flag.CommandLine, os.Args[1:], logging.Options{})

	opts := framework.EchoOptions{Fail: *fail}
	if *sleep != "" {
		d, err := time.ParseDuration(*sleep)
		if err != nil {
			return fmt.Errorf("-sleep / FRAMEWORK_ECHO_SLEEP: %q is not a duration (e.g. 2s): %w", *sleep, err)
		}
		opts.Sleep = d
	}
	if *crash != "" {
		b, err := strconv.ParseBool(*crash)
		if err != nil {
			return fmt.Errorf("-crash / FRAMEWORK_ECHO_CRASH: %q is not true or false", *crash)
		}
		opts.Crash = b
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	tp, stopTracing, err := tr.Provider(ctx, "framework-echo", os.Getenv)
	if err != nil {
		return cmdline.Usage(err)
	}
	defer tracing.Flush(stopTracing, log)
	log.Info("framework-echo: serving", "socket", *socket, "invoke", *invokePath, "health", *healthPath)
	return framework.ServeUnix(ctx, *socket, framework.NewHandler(framework.Echo(opts), framework.WithPaths(*invokePath, *healthPath), framework.WithTracerProvider(tp)))
}

// firstEnv returns the first non-empty of the named env vars, or def.
func firstEnv(a, b, def string) string {
	if v := os.Getenv(a); v != "" {
		return v
	}
	if v := os.Getenv(b); v != "" {
		return v
	}
	return def
}
