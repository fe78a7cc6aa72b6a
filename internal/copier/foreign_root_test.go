package copier

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// envForeignRootChild makes the test binary the unprivileged copier of
// TestCopyIntoForeignRoot (it re-executes itself as another user).
const envForeignRootChild = "COPIER_FOREIGN_ROOT_CHILD"

// An unprivileged copy into a volume whose root another user owns (the
// copy Job's UID 65532, a root-owned volume made writable by its mode or
// fsGroup) copies everything and leaves the root's mode as it is: only the
// owner may chmod it.
func TestCopyIntoForeignRoot(t *testing.T) {
	if dirs := os.Getenv(envForeignRootChild); dirs != "" {
		from, to := filepath.Dir(dirs), dirs
		_, err := Copy(context.Background(), filepath.Join(from, "src"), to, Options{})
		require.NoError(t, err)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to run the copy as another user")
	}
	// Everything the child needs, readable by UID 65532: its binary,
	// the source, and a root-owned 0777 destination.
	base := t.TempDir()
	require.NoError(t, os.Chmod(base, 0o755))
	require.NoError(t, os.Chmod(filepath.Dir(base), 0o755))
	self, err := os.Executable()
	require.NoError(t, err)
	bin := filepath.Join(base, "copier.test")
	copyFile(t, self, bin)
	src := filepath.Join(base, "src")
	require.NoError(t, os.Mkdir(src, 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(src, "weights"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(src, "weights", "w.bin"), []byte("w"), 0o604))
	require.NoError(t, os.Chown(filepath.Join(src, "weights"), 65532, 65532))
	require.NoError(t, os.Chown(filepath.Join(src, "weights", "w.bin"), 65532, 65532))
	dst := filepath.Join(base, "volume")
	require.NoError(t, os.Mkdir(dst, 0o777))
	require.NoError(t, os.Chmod(dst, 0o777))

	cmd := exec.Command(bin, "-test.run=^TestCopyIntoForeignRoot$", "-test.count=1")
	cmd.Env = append(os.Environ(), envForeignRootChild+"="+dst)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65532, Gid: 65532}}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the unprivileged copy failed:\n%s", out)

	data, err := os.ReadFile(filepath.Join(dst, "weights", "w.bin"))
	require.NoError(t, err)
	require.Equal(t, "w", string(data))
	st, err := os.Stat(filepath.Join(dst, "weights"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm(), "the copy keeps modes below the root")
	st, err = os.Stat(dst)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o777), st.Mode().Perm(), "the root keeps its own mode")
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}
