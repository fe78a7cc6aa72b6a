package framework_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/framework"
	"github.com/runplane/runplane/sidecar/frameworkclient"
)

// pythonStreamHandler streams tokens from a generator with the Python SDK.
const pythonStreamHandler = `
import asyncio, sys, runplane_framework as rf

def tokens(req):
    for tok in ["Once", " upon", " a", " time"]:
        yield tok

async def atokens(req):
    for tok in ["Once", " upon", " a", " time"]:
        await asyncio.sleep(0.001)
        yield tok

fn = atokens if sys.argv[1] == "async" else tokens
if sys.argv[2] == "uvicorn":
    import uvicorn
    uvicorn.run(rf.asgi_app(fn), uds=rf.config_from_env().socket_path, log_level="warning")
else:
    rf.serve(fn)
`

// TestPythonSDKStream: the sidecar's client reads a Python generator
// handler's chunks, sync and async, one by one and in order, under the
// built-in server and uvicorn (the ASGI adapter).
func TestPythonSDKStream(t *testing.T) {
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Skip("Debian python3 not installed")
	}
	dir, err := filepath.Abs("python")
	require.NoError(t, err)
	for _, tc := range []struct{ kind, server string }{{"sync", "builtin"}, {"async", "builtin"}, {"sync", "uvicorn"}, {"async", "uvicorn"}} {
		t.Run(tc.kind+"/"+tc.server, func(t *testing.T) {
			if tc.server == "uvicorn" && exec.Command(py, "-c", "import uvicorn").Run() != nil {
				t.Skip("python3-uvicorn not installed")
			}
			sock := filepath.Join(t.TempDir(), "framework.sock")
			cmd := exec.Command(py, "-c", pythonStreamHandler, tc.kind, tc.server)
			cmd.Env = append(os.Environ(), "RUNPLANE_FRAMEWORK_SOCKET="+sock, "PYTHONPATH="+dir)
			cmd.Stderr = os.Stderr
			require.NoError(t, cmd.Start())
			t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
			c := frameworkclient.NewClient(sock, "", "")
			require.Eventually(t, func() bool { return c.Health(context.Background()) == nil }, 20*time.Second, 20*time.Millisecond, "framework up")
			var got []string
			resp, err := c.InvokeStream(context.Background(), framework.Request{InvocationID: "s1"}, frameworkclient.StreamLimits{}, func(b []byte) error {
				got = append(got, string(b))
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, []string{"Once", " upon", " a", " time"}, got)
			assert.Empty(t, resp.Error)
		})
	}
}
