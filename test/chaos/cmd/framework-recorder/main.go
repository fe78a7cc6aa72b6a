// Command framework-recorder is the chaos harness's framework: it serves
// the unix-socket framework contract like framework-echo (with the Go
// helper's idempotent invoke) and appends every execution (its start, its
// answer, and each delivery of the answer to a sidecar) to a shared
// execution log, so the harness can count how often
// each invocation really ran. CHAOS_* env steers it:
//
//	CHAOS_EXEC_LOG      the log file (required)
//	CHAOS_SLEEP         time every invocation takes (Go duration, default 0)
//	CHAOS_MODE          ok (default), fail (500 with an error) or hang (until cancelled)
//	CHAOS_RESULT_BYTES  size of the result body (a JSON string), default a small echo
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/runplane/runplane/api"
	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/test/chaos/execlog"
)

func main() {
	if err := run(); err != nil {
		log.Fatalf("framework-recorder: %v", err)
	}
}

func run() error {
	cfg, err := configFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	w, err := execlog.Open(cfg.logPath)
	if err != nil {
		return err
	}
	defer w.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	socket := os.Getenv(api.EnvFrameworkSocket)
	if socket == "" {
		socket = api.DefaultFrameworkSocket
	}
	log.Printf("framework-recorder: serving on %s (mode %s, sleep %v, result %d bytes)", socket, cfg.mode, cfg.sleep, cfg.resultBytes)
	return framework.ServeUnix(ctx, socket, recordAnswers(framework.NewHandler(handler(cfg, w)), w))
}

type config struct {
	logPath     string
	sleep       time.Duration
	mode        string
	resultBytes int
}

func configFromEnv(getenv func(string) string) (config, error) {
	c := config{logPath: getenv("CHAOS_EXEC_LOG"), mode: getenv("CHAOS_MODE")}
	if c.logPath == "" {
		return c, fmt.Errorf("CHAOS_EXEC_LOG must be set")
	}
	if c.mode == "" {
		c.mode = "ok"
	}
	if c.mode != "ok" && c.mode != "fail" && c.mode != "hang" {
		return c, fmt.Errorf("CHAOS_MODE %q: one of ok, fail, hang", c.mode)
	}
	if v := getenv("CHAOS_SLEEP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("CHAOS_SLEEP %q: %w", v, err)
		}
		c.sleep = d
	}
	if v := getenv("CHAOS_RESULT_BYTES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return c, fmt.Errorf("CHAOS_RESULT_BYTES %q: a byte count", v)
		}
		c.resultBytes = n
	}
	return c, nil
}

// recordAnswers logs a Delivered entry for every invoke whose answer (an
// envelope, status 200) was written and flushed to the socket: a write or
// flush error means the sidecar was gone and the answer never arrived.
// The run's End is the handler's; a sidecar that re-attaches to a call
// (the idempotent invoke) collects an answer another connection missed.
func recordAnswers(next http.Handler, w *execlog.Writer) http.Handler {
	pid := os.Getpid()
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var id, worker string
		if r.Method == http.MethodPost && r.Header.Get(framework.CancelHeader) == "" {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(rw, err.Error(), http.StatusBadRequest)
				return
			}
			var req framework.Request
			if json.Unmarshal(body, &req) == nil {
				id, worker = req.InvocationID, req.WorkerName
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		ew := &errWriter{ResponseWriter: rw}
		next.ServeHTTP(ew, r)
		if id == "" || ew.status != http.StatusOK || !ew.wrote {
			return
		}
		if ew.err != nil || http.NewResponseController(rw).Flush() != nil {
			return
		}
		if err := w.Write(execlog.Entry{Event: execlog.Delivered, ID: id, Worker: worker, PID: pid, At: time.Now()}); err != nil {
			log.Printf("framework-recorder: %v", err)
		}
	})
}

// errWriter keeps the status and the first write error.
type errWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
	err    error
}

func (e *errWriter) WriteHeader(code int) {
	if e.status == 0 {
		e.status = code
	}
	e.ResponseWriter.WriteHeader(code)
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.status == 0 {
		e.status = http.StatusOK
	}
	e.wrote = true
	n, err := e.ResponseWriter.Write(b)
	if err != nil && e.err == nil {
		e.err = err
	}
	return n, err
}

func handler(c config, w *execlog.Writer) framework.HandlerFunc {
	pid := os.Getpid()
	var big json.RawMessage
	if c.resultBytes > 0 {
		big = json.RawMessage(`"` + strings.Repeat("x", max(0, c.resultBytes-2)) + `"`)
	}
	return func(ctx context.Context, req framework.Request) (framework.Response, error) {
		// The start is logged before any work, so a run cut off by a kill
		// still counts as started.
		if err := w.Write(execlog.Entry{Event: execlog.Start, ID: req.InvocationID, Worker: req.WorkerName, PID: pid, At: time.Now()}); err != nil {
			return framework.Response{}, err
		}
		if c.mode == "hang" {
			<-ctx.Done()
			return framework.Response{}, context.Cause(ctx)
		}
		if c.sleep > 0 {
			t := time.NewTimer(c.sleep)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return framework.Response{}, context.Cause(ctx)
			}
		}
		resp := framework.Response{StatusCode: 200, ContentType: "application/json", Body: big}
		if big == nil {
			resp.Body = json.RawMessage(fmt.Sprintf(`{"id":%q,"worker":%q}`, req.InvocationID, req.WorkerName))
		}
		if c.mode == "fail" {
			resp = framework.Response{StatusCode: 500, Error: "framework-recorder: CHAOS_MODE=fail"}
		}
		// Answered, whether or not a sidecar is left to read it.
		if err := w.Write(execlog.Entry{Event: execlog.End, ID: req.InvocationID, Worker: req.WorkerName, PID: pid, Status: resp.StatusCode, At: time.Now()}); err != nil {
			log.Printf("framework-recorder: %v", err)
		}
		return resp, nil
	}
}
