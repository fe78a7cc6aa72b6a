package cmdline

import (
	"bytes"
	"flag"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/logging"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name             string
		args             []string
		code             int
		done             bool
		stdout, stderr   string // substrings
		noStdout, noErrs bool
	}{
		{name: "help on stdout", args: []string{"--help"}, code: 0, done: true, stdout: "Usage of runplane-x:", noErrs: true},
		{name: "h on stdout", args: []string{"-h"}, code: 0, done: true, stdout: "-log-format string", noErrs: true},
		{name: "version", args: []string{"--version"}, code: 0, done: true, stdout: "runplane-x ", noErrs: true},
		{name: "bad flag on stderr", args: []string{"-nope"}, code: 2, done: true, stderr: "flag provided but not defined: -nope", noStdout: true},
		{name: "bad format", args: []string{"-log-format", "xml"}, code: 2, done: true, stderr: `log format "xml": want json or text`, noStdout: true},
		{name: "bad level", args: []string{"-log-level=loud"}, code: 2, done: true, stderr: `log level "loud"`, noStdout: true},
		{name: "ok", args: []string{"-addr", ":1", "-log-level", "debug"}, noStdout: true, noErrs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("runplane-x", flag.ExitOnError)
			addr := fs.String("addr", ":0", "listen address")
			var stdout, stderr bytes.Buffer
			l, code, done := parse(fs, tc.args, logging.Options{}, &stdout, &stderr)
			require.Equal(t, tc.done, done)
			require.Equal(t, tc.code, code)
			require.Contains(t, stdout.String(), tc.stdout)
			require.Contains(t, stderr.String(), tc.stderr)
			if tc.noStdout {
				require.Empty(t, stdout.String())
			}
			if tc.noErrs {
				require.Empty(t, stderr.String())
			}
			if !done {
				require.NotNil(t, l)
				require.Equal(t, ":1", *addr)
			}
		})
	}
}

// TestParseDefaults: a binary's defaults (make dev passes none; it sets
// -log-format=text) apply unless a flag overrides them.
func TestParseDefaults(t *testing.T) {
	fs := flag.NewFlagSet("runplane-x", flag.ContinueOnError)
	var stderr bytes.Buffer
	l, _, done := parse(fs, nil, logging.Options{Format: "text"}, &bytes.Buffer{}, &stderr)
	require.False(t, done)
	l.Info("hello")
	require.Contains(t, stderr.String(), "level=INFO msg=hello")
	require.Equal(t, "text", fs.Lookup("log-format").DefValue)
}
