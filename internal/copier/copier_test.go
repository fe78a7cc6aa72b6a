package copier

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tree builds a source tree covering every kind of entry the copier keeps.
func tree(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	must := func(err error) {
		t.Helper()
		require.NoError(t, err)
	}
	must(os.MkdirAll(filepath.Join(src, "a/b/c"), 0o755))
	must(os.WriteFile(filepath.Join(src, "a/small.txt"), []byte("hello"), 0o640))
	must(os.WriteFile(filepath.Join(src, "a/b/empty"), nil, 0o600))
	big := make([]byte, 3*smallFile+17)
	for i := range big {
		big[i] = byte(i * 7)
	}
	must(os.WriteFile(filepath.Join(src, "a/b/c/big.bin"), big, 0o755))
	must(os.WriteFile(filepath.Join(src, "setuid"), []byte("x"), 0o755))
	must(os.Chmod(filepath.Join(src, "setuid"), 0o755|fs.ModeSetuid))
	must(os.Symlink("a/small.txt", filepath.Join(src, "rel-link")))
	must(os.Symlink("/etc/hostname", filepath.Join(src, "abs-link")))
	must(os.Symlink("does-not-exist", filepath.Join(src, "dangling")))
	must(os.Link(filepath.Join(src, "a/small.txt"), filepath.Join(src, "a/b/hard1")))
	must(os.Link(filepath.Join(src, "a/small.txt"), filepath.Join(src, "hard2")))
	must(syscall.Mkfifo(filepath.Join(src, "fifo"), 0o620))
	must(os.Mkdir(filepath.Join(src, "ro"), 0o755))
	must(os.WriteFile(filepath.Join(src, "ro/inside"), []byte("ro"), 0o444))
	must(os.Chmod(filepath.Join(src, "ro"), 0o555))
	// Modes the umask would cut at creation, so the copy must set them.
	must(os.WriteFile(filepath.Join(src, "a/b/shared"), []byte("rw"), 0o644))
	must(os.Chmod(filepath.Join(src, "a/b/shared"), 0o666))
	must(os.Mkdir(filepath.Join(src, "a/sgid-dir"), 0o755))
	must(os.Chmod(filepath.Join(src, "a/sgid-dir"), 0o777|fs.ModeSetgid))
	if os.Geteuid() == 0 {
		// Foreign owners, which the copier must set (it skips chown only
		// when creation already gave the right owner).
		for _, p := range []string{"a/small.txt", "a/b", "rel-link", "fifo", "setuid"} {
			must(os.Lchown(filepath.Join(src, p), 1234, 5678))
		}
		must(os.Chmod(filepath.Join(src, "setuid"), 0o755|fs.ModeSetuid|fs.ModeSetgid))
	}
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(src, "ro"), 0o755) })
	// Distinct, old timestamps so a copy that forgets them is caught.
	old := time.Date(2001, 2, 3, 4, 5, 6, 789, time.UTC)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink != 0 {
			return err
		}
		return os.Chtimes(p, old, old.Add(time.Duration(len(p))*time.Second))
	})
	must(err)
	return src
}

type fileState struct {
	mode       fs.FileMode
	uid, gid   uint32
	mtime      int64
	size       int64
	link       string
	content    string
	linkGroup  int // index of the hard-link group, 0 if single
	nlink      uint64
	permString string
}

// snapshot describes every entry of a tree by relative path, with hard links
// grouped by inode so both trees can be compared without raw inode numbers.
func snapshot(t *testing.T, root string) map[string]fileState {
	t.Helper()
	out := map[string]fileState{}
	groups := map[uint64]int{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		s := fileState{mode: modeOf(&st) | fs.FileMode(st.Mode&0o7000), uid: st.Uid, gid: st.Gid, nlink: st.Nlink,
			mtime: st.Mtim.Nano(), permString: fmt.Sprintf("%o", st.Mode&0o7777)}
		if rel == "." {
			s.mtime = 0 // the root's own timestamps are the destination's business
		}
		switch {
		case s.mode.IsRegular():
			s.size = st.Size
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s.content = string(b)
			if st.Nlink > 1 {
				if _, ok := groups[st.Ino]; !ok {
					groups[st.Ino] = len(groups) + 1
				}
				s.linkGroup = groups[st.Ino]
			}
		case s.mode&fs.ModeSymlink != 0:
			s.link, _ = os.Readlink(p)
		}
		out[rel] = s
		return nil
	})
	require.NoError(t, err)
	return out
}

func TestCopyKeepsEverything(t *testing.T) {
	for _, workers := range []int{1, 3, 16} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			src := tree(t)
			dst := filepath.Join(t.TempDir(), "dst")
			// Unprivileged, TempDir's cleanup cannot empty the read-only copy.
			t.Cleanup(func() { _ = os.Chmod(filepath.Join(dst, "ro"), 0o755) })
			var reports []Progress
			p, err := Copy(context.Background(), src, dst, Options{Workers: workers, Progress: func(p Progress) { reports = append(reports, p) }})
			require.NoError(t, err)
			want, got := snapshot(t, src), snapshot(t, dst)
			for rel, w := range want {
				g, ok := got[rel]
				if !assert.True(t, ok, "%s: missing in copy", rel) {
					continue
				}
				assert.Equal(t, w, g, "%s:\n got %+v\nwant %+v", rel, g, w)
			}
			for rel := range got {
				assert.Contains(t, want, rel, "extra entry in copy")
			}
			// 12 non-directories (3 names share one inode), 5 directories below the root.
			assert.EqualValues(t, 12, p.Files, "files")
			assert.EqualValues(t, 5, p.Dirs, "dirs")
			assert.Equal(t, int64(5+3*smallFile+17+1+2+2), p.Bytes, "bytes")
			assert.True(t, p.Done, "done")
			if assert.NotEmpty(t, reports, "progress reports") {
				assert.Equal(t, p, reports[len(reports)-1], "final progress report")
			}
		})
	}
}

func TestCopyErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, []byte("x"), 0o644))
	nonEmpty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(nonEmpty, "small.txt"), nil, 0o644))
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "small.txt"), []byte("x"), 0o644))
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name     string
		ctx      context.Context
		from, to string
		want     string
	}{
		{"missing source", context.Background(), filepath.Join(src, "nope"), t.TempDir(), "no such file"},
		{"source is a file", context.Background(), file, t.TempDir(), "not a directory"},
		{"destination has the entry", context.Background(), src, nonEmpty, "file exists"},
		{"cancelled", cancelled, src, t.TempDir(), "context canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Copy(tt.ctx, tt.from, tt.to, Options{})
			require.ErrorContains(t, err, tt.want, "err = %v, want it to contain %q", err, tt.want)
			if tt.ctx.Err() != nil {
				require.ErrorIs(t, err, context.Canceled)
			}
		})
	}
}
