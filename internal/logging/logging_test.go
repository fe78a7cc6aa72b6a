package logging

import (
	"bytes"
	"encoding/json"
	"log"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string
		json    bool
		debug   bool
	}{
		{name: "default json info", opts: Options{}, json: true},
		{name: "text debug", opts: Options{Format: "text", Level: "debug"}, debug: true},
		{name: "warn", opts: Options{Format: "json", Level: "warn"}, json: true},
		{name: "bad format", opts: Options{Format: "logfmt"}, wantErr: `log format "logfmt": want json or text`},
		{name: "bad level", opts: Options{Level: "loud"}, wantErr: `log level "loud": want debug, info, warn or error`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l, err := New(&buf, tc.opts)
			if tc.wantErr != "" {
				require.EqualError(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			l.Debug("d")
			l.Warn("w", "k", "v")
			out := buf.String()
			require.Equal(t, tc.debug, strings.Contains(out, "msg=d"))
			last := strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:])
			if tc.json {
				var m map[string]any
				require.NoError(t, json.Unmarshal([]byte(last), &m), last)
				require.Equal(t, "w", m["msg"])
			} else {
				require.Contains(t, last, "level=WARN msg=w k=v")
			}
		})
	}
}

// TestInstall: klog (client-go), controller-runtime and the standard log
// package all write through the one slog handler, as JSON.
func TestInstall(t *testing.T) {
	var buf bytes.Buffer
	l, err := New(&buf, Options{Format: "json", Level: "info"})
	require.NoError(t, err)
	Install(l)
	klog.InfoS("from klog", "k", 1)
	klog.Flush()
	crlog.Log.WithName("cr").Info("from controller-runtime")
	log.Print("from log")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	var msgs []string
	for _, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "not JSON: %s", line)
		msgs = append(msgs, m["msg"].(string))
	}
	require.Equal(t, []string{"from klog", "from controller-runtime", "from log"}, msgs)
}
