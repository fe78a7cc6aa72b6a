package sidecartest_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/internal/messages"
	"github.com/runplane/runplane/sidecar/sidecartest"
	"github.com/runplane/runplane/test/natsauth"
)

// events records the worker events of pool echo in namespace default.
type events struct {
	mu    sync.Mutex
	types map[string][]messages.EventType
}

func (e *events) of(worker string) []messages.EventType {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]messages.EventType(nil), e.types[worker]...)
}

// TestStopDeregistersKillVanishes: Stop is SIGTERM (the sidecar says
// deregistered), Kill a crashed Pod (nothing more is heard from it, though
// its sidecar's own drain runs to the end).
func TestStopDeregistersKillVanishes(t *testing.T) {
	srv := natsauth.JetStream(t, nil)
	nc := natsauth.Connect(t, srv.ClientURL())
	subj := messages.Subjects{Prefix: api.DefaultSubjectPrefix}
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = js.CreateStream(t.Context(), jetstream.StreamConfig{Name: api.DefaultStreamName, Subjects: subj.StreamSubjects()})
	require.NoError(t, err)
	ev := &events{types: map[string][]messages.EventType{}}
	_, err = nc.Subscribe(subj.Metrics("default", "echo")+".*", func(m *nats.Msg) {
		var e messages.Event
		if json.Unmarshal(m.Data, &e) == nil {
			ev.mu.Lock()
			ev.types[e.Worker] = append(ev.types[e.Worker], e.Type)
			ev.mu.Unlock()
		}
	})
	require.NoError(t, err)
	require.NoError(t, nc.Flush())

	for _, tc := range []struct {
		name     string
		end      func(*sidecartest.Worker) error
		deregist bool
	}{
		{"stopped", (*sidecartest.Worker).Stop, true},
		{"killed", (*sidecartest.Worker).Kill, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			w, err := sidecartest.Start(ctx, sidecartest.Config{NATSURL: srv.ClientURL(), Pool: "echo", Name: tc.name})
			require.NoError(t, err)
			require.Eventually(t, func() bool { return len(ev.of(tc.name)) > 0 }, 10*time.Second, 10*time.Millisecond, "registered")
			require.NoError(t, tc.end(w))
			// Barrier: the sidecar's Run has returned (after a kill too),
			// and whatever it published has reached the server and us.
			require.NoError(t, w.Close())
			require.NoError(t, nc.Flush())
			got := ev.of(tc.name)
			assert.Equal(t, messages.EventRegistered, got[0])
			assert.Equal(t, tc.deregist, got[len(got)-1] == messages.EventDeregistered, "events %v", got)
		})
	}
}
