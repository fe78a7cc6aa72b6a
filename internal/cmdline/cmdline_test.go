package cmdline

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
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
		stdout           string // a substring
		fatal            string // a substring of the one JSON error record on stderr
		noStdout, noErrs bool
	}{
		{name: "help on stdout", args: []string{"--help"}, code: 0, done: true, stdout: "Usage of runplane-x:", noErrs: true},
		{name: "h on stdout", args: []string{"-h"}, code: 0, done: true, stdout: "-log-format string", noErrs: true},
		{name: "version", args: []string{"--version"}, code: 0, done: true, stdout: "runplane-x ", noErrs: true},
		{name: "bad flag: one JSON record", args: []string{"-nope"}, code: 2, done: true, fatal: "flag provided but not defined: -nope", noStdout: true},
		{name: "bad flag value", args: []string{"-addr"}, code: 2, done: true, fatal: "flag needs an argument: -addr", noStdout: true},
		{name: "bad format", args: []string{"-log-format", "xml"}, code: 2, done: true, fatal: `log format "xml": want json or text`, noStdout: true},
		{name: "bad level", args: []string{"-log-level=loud"}, code: 2, done: true, fatal: `log level "loud"`, noStdout: true},
		{name: "a flag after an argument", args: []string{"stray", "-addr", ":1"}, code: 2, done: true, fatal: `unexpected arguments ["stray" "-addr" ":1"]`, noStdout: true},
		{name: "ok", args: []string{"-addr", ":1", "-log-level", "debug"}, noStdout: true, noErrs: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("runplane-x", flag.ExitOnError)
			addr := fs.String("addr", ":0", "listen address")
			var stdout, stderr bytes.Buffer
			l, code, done := parseFlags(fs, tc.args, logging.Options{}, &stdout, &stderr, false)
			require.Equal(t, tc.done, done)
			require.Equal(t, tc.code, code)
			require.Contains(t, stdout.String(), tc.stdout)
			if tc.fatal != "" {
				var rec struct{ Level, Msg, Err string }
				require.NoError(t, json.Unmarshal(stderr.Bytes(), &rec), "one JSON record: %s", stderr.String())
				require.Equal(t, "ERROR", rec.Level)
				require.Equal(t, "runplane-x failed", rec.Msg)
				require.Contains(t, rec.Err, tc.fatal)
				require.Contains(t, rec.Err, "runplane-x -help")
			}
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
	l, _, done := parseFlags(fs, nil, logging.Options{Format: "text"}, &bytes.Buffer{}, &stderr, false)
	require.False(t, done)
	l.Info("hello")
	require.Contains(t, stderr.String(), "level=INFO msg=hello")
	require.Equal(t, "text", fs.Lookup("log-format").DefValue)
}

// TestFail: a fatal error is one record in the configured format, exit
// code 2 for a Usage error (also wrapped), 1 for any other.
func TestFail(t *testing.T) {
	for _, tc := range []struct {
		format string
		err    error
		code   int
		want   string
	}{
		{logging.FormatJSON, errors.New("boom"), 1, `{"level":"ERROR","msg":"runplane-x failed","err":"boom","exitCode":1}`},
		{logging.FormatJSON, fmt.Errorf("config: %w", Usage(errors.New("bad"))), 2, `{"level":"ERROR","msg":"runplane-x failed","err":"config: bad","exitCode":2}`},
		{logging.FormatText, errors.New("boom"), 1, `level=ERROR msg="runplane-x failed" err=boom exitCode=1`},
	} {
		var b bytes.Buffer
		l, err := logging.New(&b, logging.Options{Format: tc.format, Level: "info"})
		require.NoError(t, err)
		require.Equal(t, tc.code, fail(l, "runplane-x", tc.err))
		line := b.String()
		require.Equal(t, 1, strings.Count(line, "\n"), "one line: %s", line)
		if tc.format == logging.FormatJSON {
			var got map[string]any
			require.NoError(t, json.Unmarshal(b.Bytes(), &got))
			delete(got, "time")
			var want map[string]any
			require.NoError(t, json.Unmarshal([]byte(tc.want), &want))
			require.Equal(t, want, got)
		} else {
			require.Contains(t, line, tc.want)
		}
	}
}

// TestCheckConfigurationArgs: a configuration binary's arguments are
// -config and the log flags, with valid values.
func TestCheckConfigurationArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{name: "the chart's", args: []string{"--config=/etc/runplane/queue/config.yaml", "--log-format=json", "--log-level=info"}},
		{name: "a flag of old", args: []string{"--config=/c", "--leader-elect"}, err: "flag provided but not defined: -leader-elect"},
		{name: "a bad level", args: []string{"--log-level=loud"}, err: `log level "loud"`},
		{name: "a bad format", args: []string{"--log-format=xml"}, err: `log format "xml": want json or text`},
		{name: "a path without -config", args: []string{"/etc/runplane/queue/config.yaml", "--log-level=loud"}, err: `unexpected arguments ["/etc/runplane/queue/config.yaml" "--log-level=loud"]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckConfigurationArgs("runplane-x", tc.args)
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
			require.ErrorContains(t, err, "runplane-x")
		})
	}
}
