package framework_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// pythonSDKHandler serves, with the Python SDK, a handler that reports on
// stdout when an invocation starts and when it sees the cancel.
const pythonSDKHandler = `
import asyncio, sys, runplane_framework as rf

def say(word):
    print(word, flush=True)

def sync_handler(req):
    if req.payload == "quick":
        return rf.Response(body="quick")
    say("started")
    if req.cancelled.wait(30):
        say("cancelled")
    return rf.Response(body="late")

async def async_handler(req):
    if req.payload == "quick":
        return rf.Response(body="quick")
    say("started")
    try:
        await asyncio.sleep(30)
    except asyncio.CancelledError:
        say("cancelled" if req.cancelled.is_set() else "cancelled without the flag")
        raise
    return rf.Response(body="late")

if sys.argv[2] == "uvicorn":
    import uvicorn
    app = rf.asgi_app(async_handler if sys.argv[1] == "async" else sync_handler)
    uvicorn.run(app, uds=rf.config_from_env().socket_path, log_level="warning")
else:
    rf.serve(async_handler if sys.argv[1] == "async" else sync_handler)
`

// TestPythonSDKCancel: the sidecar's client cancels an invocation (its
// context ends, as on a caller's cancel or timeoutSeconds) and the Python
// SDK's handler sees it, sync or async, under the built-in server and
// uvicorn; the framework then serves the next invocation.
func TestPythonSDKCancel(t *testing.T) {
	py := "/usr/bin/python3" // Debian's: hack/install-deps.sh installs uvicorn for it
	if _, err := os.Stat(py); err != nil {
		t.Skip("Debian python3 not installed")
	}
	dir, err := filepath.Abs("python")
	require.NoError(t, err)
	for _, server := range []string{"builtin", "uvicorn"} {
		for _, kind := range []string{"sync", "async"} {
			t.Run(server+"/"+kind, func(t *testing.T) {
				if server == "uvicorn" && exec.Command(py, "-c", "import uvicorn").Run() != nil {
					t.Skip("python3-uvicorn not installed")
				}
				sock := filepath.Join(t.TempDir(), "framework.sock")
				cmd := exec.Command(py, "-c", pythonSDKHandler, kind, server)
				cmd.Env = append(os.Environ(), "RUNPLANE_FRAMEWORK_SOCKET="+sock, "PYTHONPATH="+dir)
				cmd.Stderr = os.Stderr
				out, err := cmd.StdoutPipe()
				require.NoError(t, err)
				require.NoError(t, cmd.Start())
				t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
				lines := make(chan string, 16)
				go func() {
					sc := bufio.NewScanner(out)
					for sc.Scan() {
						lines <- sc.Text()
					}
					close(lines)
				}()
				c := frameworkclient.NewClient(sock, "", "")
				require.Eventually(t, func() bool { return c.Health(context.Background()) == nil }, 20*time.Second, 20*time.Millisecond, "framework up")

				ctx, cancel := context.WithCancel(context.Background())
				errc := make(chan error, 1)
				go func() {
					_, err := c.Invoke(ctx, framework.Request{InvocationID: "slow", Payload: json.RawMessage(`"slow"`)})
					errc <- err
				}()
				expectLine(t, lines, "started")
				cancel()
				require.ErrorIs(t, <-errc, context.Canceled)
				expectLine(t, lines, "cancelled")

				resp, err := c.Invoke(context.Background(), framework.Request{InvocationID: "quick", Payload: json.RawMessage(`"quick"`)})
				require.NoError(t, err)
				require.JSONEq(t, `"quick"`, string(resp.Body))
			})
		}
	}
}

func expectLine(t *testing.T, lines <-chan string, want string) {
	t.Helper()
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "python exited before printing %q", want)
			if l == want {
				return
			}
			if l != "" && l[0] != 'r' { // "runplane framework: serving on …" is the built-in server's banner
				require.Equal(t, want, l)
			}
		case <-time.After(20 * time.Second):
			require.FailNow(t, "timed out waiting for "+want)
		}
	}
}
