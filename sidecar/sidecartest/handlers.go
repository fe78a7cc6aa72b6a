package sidecartest

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/runplane/runplane/framework"
)

// Echo answers 200 with the request's payload as a JSON body.
func Echo(_ context.Context, req framework.Request) (framework.Response, error) {
	return framework.Response{StatusCode: http.StatusOK, ContentType: "application/json", Body: req.Payload}, nil
}

// Sleep is a handler that takes d before echoing, or returns when its call
// is cancelled (the sidecar then reports the cancel or timeout).
func Sleep(d time.Duration) framework.HandlerFunc {
	return func(ctx context.Context, req framework.Request) (framework.Response, error) {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			return Echo(ctx, req)
		case <-ctx.Done():
			return framework.Response{}, ctx.Err()
		}
	}
}

// Log counts the framework's executions per invocation, across workers:
// the one measure of "ran once" the queue's tests assert.
type Log struct {
	mu   sync.Mutex
	runs map[string][]string
}

// NewLog returns an empty Log.
func NewLog() *Log { return &Log{runs: map[string][]string{}} }

func (l *Log) add(id, worker string) {
	if l == nil {
		return
	}
	l.mu.Lock()
	l.runs[id] = append(l.runs[id], worker)
	l.mu.Unlock()
}

// Runs returns the workers whose framework ran invocation id, in order.
func (l *Log) Runs(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.runs[id]...)
}

// Total is the number of executions.
func (l *Log) Total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.runs {
		n += len(r)
	}
	return n
}
