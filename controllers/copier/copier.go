// Package copier copies a directory tree in parallel, keeping what `cp -a`
// keeps: modes (including setuid/setgid/sticky), ownership, timestamps,
// symlinks and hard links. The storage controller's prepare-from-pvc Job runs
// it (through cmd/runplane-copy) to fill a PVC from another one.
//
// Why parallel: a volume with many small files is bound by per-file syscall
// latency (open, write, chown, utimes), not by bandwidth, so several workers
// keep the filesystem busy where a single `cp -a` waits on each call in turn.
package copier

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Options tune a copy. The zero value is usable.
type Options struct {
	// Workers is the number of parallel workers; 0 means 4×GOMAXPROCS
	// (workers mostly wait in syscalls, so more than the CPU count pays).
	Workers int
	// Progress, when set, is called every ProgressInterval and once at the end.
	Progress func(Progress)
	// ProgressInterval defaults to 5s.
	ProgressInterval time.Duration
}

// Progress counts what has been copied so far.
type Progress struct {
	Files int64 // regular files, symlinks and hard links created
	Dirs  int64
	Bytes int64 // bytes of regular-file content written
	Done  bool  // set on the final report
}

func (p Progress) String() string {
	return fmt.Sprintf("files=%d dirs=%d bytes=%d done=%t", p.Files, p.Dirs, p.Bytes, p.Done)
}

// smallFile is the size under which a file is copied with one read and one
// write through a pooled buffer: copy_file_range's setup costs more than it
// saves there.
const smallFile = 128 << 10

// batchSize is how many entries of one directory a single task handles, so a
// huge flat directory is still spread across the workers.
const batchSize = 256

type inodeKey struct{ dev, ino uint64 }

type entry struct {
	src, dst string
	st       *syscall.Stat_t
	mode     fs.FileMode
}

type task struct {
	dir     *entry  // a directory to read, or
	entries []entry // non-directory entries to create
}

type linkReq struct{ first, dst string }

type copier struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	euid     int
	progress Progress // updated atomically

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []task
	pending int // tasks queued or running
	dirs    []entry
	inodes  map[inodeKey]string // first destination path of a multiply linked inode
	links   []linkReq

	bufs sync.Pool
}

// Copy copies the tree at from into to. to is created if missing; an existing
// to must be a directory, and existing entries inside it make the copy fail
// (it fills fresh volumes, it does not merge).
func Copy(ctx context.Context, from, to string, opts Options) (Progress, error) {
	rootInfo, err := os.Lstat(from)
	if err != nil {
		return Progress{}, fmt.Errorf("copier: source: %w", err)
	}
	if !rootInfo.IsDir() {
		return Progress{}, fmt.Errorf("copier: source %s is not a directory", from)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return Progress{}, fmt.Errorf("copier: destination: %w", err)
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = 4 * runtime.GOMAXPROCS(0)
	}
	interval := opts.ProgressInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c := &copier{ctx: ctx, cancel: cancel, euid: os.Geteuid(), inodes: map[inodeKey]string{}}
	c.cond = sync.NewCond(&c.mu)
	// Wake idle workers when the copy fails or the caller gives up; the
	// lock makes sure no worker is between its check and its Wait.
	stopWake := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stopWake()
	c.bufs.New = func() any { b := make([]byte, smallFile); return &b }

	root := entry{src: from, dst: to, st: rootInfo.Sys().(*syscall.Stat_t), mode: rootInfo.Mode()}
	c.dirs = append(c.dirs, root)
	c.push(task{dir: &root})

	stopProgress := make(chan struct{})
	var progressDone sync.WaitGroup
	if opts.Progress != nil {
		progressDone.Add(1)
		go func() {
			defer progressDone.Done()
			t := time.NewTicker(interval)
			defer t.Stop()
			for {
				select {
				case <-stopProgress:
					return
				case <-t.C:
					opts.Progress(c.snapshot())
				}
			}
		}()
	}

	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() { defer wg.Done(); c.work() }()
	}
	wg.Wait()
	close(stopProgress)
	progressDone.Wait()

	if err := context.Cause(ctx); err != nil {
		return c.snapshot(), err
	}
	// Hard links need their first copy in place; directory metadata goes last
	// because creating children changes a directory's mtime, and a read-only
	// directory mode would have blocked the children.
	for _, l := range c.links {
		if err := os.Link(l.first, l.dst); err != nil {
			return c.snapshot(), fmt.Errorf("copier: hard link %s: %w", l.dst, err)
		}
		atomic.AddInt64(&c.progress.Files, 1)
	}
	for i := len(c.dirs) - 1; i >= 0; i-- { // deepest first: parents' mtimes are final
		if err := c.applyMeta(c.dirs[i], -1); err != nil {
			return c.snapshot(), err
		}
	}
	p := c.snapshot()
	p.Done = true
	if opts.Progress != nil {
		opts.Progress(p)
	}
	return p, nil
}

func (c *copier) snapshot() Progress {
	return Progress{
		Files: atomic.LoadInt64(&c.progress.Files),
		Dirs:  atomic.LoadInt64(&c.progress.Dirs),
		Bytes: atomic.LoadInt64(&c.progress.Bytes),
	}
}

func (c *copier) push(t task) {
	c.mu.Lock()
	c.queue = append(c.queue, t)
	c.pending++
	c.mu.Unlock()
	c.cond.Signal()
}

// next blocks until a task is available, or returns false once no task is
// queued or running (the tree is done) or the copy failed.
func (c *copier) next() (task, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.queue) == 0 {
		if c.pending == 0 || c.ctx.Err() != nil {
			return task{}, false
		}
		c.cond.Wait()
	}
	// LIFO keeps the walk depth-first, which bounds the queue and keeps
	// directory entries warm in the cache.
	t := c.queue[len(c.queue)-1]
	c.queue = c.queue[:len(c.queue)-1]
	return t, true
}

func (c *copier) finish() {
	c.mu.Lock()
	c.pending--
	done := c.pending == 0
	c.mu.Unlock()
	if done {
		c.cond.Broadcast()
	}
}

func (c *copier) fail(err error) {
	c.cancel(err) // wakes idle workers through the AfterFunc in Copy
}

func (c *copier) work() {
	for {
		t, ok := c.next()
		if !ok {
			return
		}
		var err error
		if t.dir != nil {
			err = c.readDir(*t.dir)
		} else {
			for _, e := range t.entries {
				if err = c.copyEntry(e); err != nil {
					break
				}
			}
		}
		if err != nil {
			c.fail(err)
		}
		c.finish()
		if c.ctx.Err() != nil {
			return
		}
	}
}

func (c *copier) readDir(d entry) error {
	names, err := readNames(d.src)
	if err != nil {
		return fmt.Errorf("copier: read dir %s: %w", d.src, err)
	}
	batch := make([]entry, 0, min(len(names), batchSize))
	for _, name := range names {
		src := filepath.Join(d.src, name)
		var st syscall.Stat_t
		if err := syscall.Lstat(src, &st); err != nil {
			return fmt.Errorf("copier: lstat %s: %w", src, err)
		}
		e := entry{src: src, dst: filepath.Join(d.dst, name), st: &st, mode: modeOf(&st)}
		if e.mode.IsDir() {
			// Owner-writable until the end so children can be created.
			if err := os.Mkdir(e.dst, 0o700); err != nil {
				return fmt.Errorf("copier: mkdir %s: %w", e.dst, err)
			}
			atomic.AddInt64(&c.progress.Dirs, 1)
			c.mu.Lock()
			c.dirs = append(c.dirs, e)
			c.mu.Unlock()
			c.push(task{dir: &e})
			continue
		}
		batch = append(batch, e)
		if len(batch) == batchSize {
			c.push(task{entries: batch})
			batch = make([]entry, 0, batchSize)
		}
	}
	if len(batch) > 0 {
		c.push(task{entries: batch})
	}
	return nil
}

// readNames lists a directory without sorting it: order does not matter here
// and os.ReadDir's sort is measurable on large directories.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

func (c *copier) copyEntry(e entry) error {
	if e.st.Nlink > 1 && !e.mode.IsDir() {
		key := inodeKey{dev: uint64(e.st.Dev), ino: e.st.Ino}
		c.mu.Lock()
		first, seen := c.inodes[key]
		if seen {
			c.links = append(c.links, linkReq{first: first, dst: e.dst})
		} else {
			c.inodes[key] = e.dst
		}
		c.mu.Unlock()
		if seen {
			return nil
		}
	}
	switch {
	case e.mode.IsRegular():
		return c.copyFile(e)
	case e.mode&fs.ModeSymlink != 0:
		target, err := os.Readlink(e.src)
		if err != nil {
			return fmt.Errorf("copier: readlink %s: %w", e.src, err)
		}
		if err := os.Symlink(target, e.dst); err != nil {
			return fmt.Errorf("copier: symlink %s: %w", e.dst, err)
		}
		if err := c.applyMeta(e, -1); err != nil {
			return err
		}
	case e.mode&(fs.ModeNamedPipe|fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket) != 0:
		// Special files: recreate the node itself, as cp -a does.
		if err := unix.Mknod(e.dst, e.st.Mode, int(e.st.Rdev)); err != nil {
			return fmt.Errorf("copier: mknod %s: %w", e.dst, err)
		}
		if err := c.applyMeta(e, -1); err != nil {
			return err
		}
	default:
		return fmt.Errorf("copier: %s: unsupported file type %v", e.src, e.mode.Type())
	}
	atomic.AddInt64(&c.progress.Files, 1)
	return nil
}

// copyFile uses raw descriptors rather than *os.File: the runtime poller's
// registration costs several syscalls per file, which dominates small files.
func (c *copier) copyFile(e entry) error {
	in, err := unix.Open(e.src, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("copier: open %s: %w", e.src, err)
	}
	defer unix.Close(in)
	out, err := unix.Open(e.dst, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("copier: create %s: %w", e.dst, err)
	}
	n, err := c.copyData(out, in, e.st.Size)
	if err != nil {
		unix.Close(out)
		return fmt.Errorf("copier: copy %s: %w", e.src, err)
	}
	atomic.AddInt64(&c.progress.Bytes, n)
	if err := c.applyMeta(e, out); err != nil {
		unix.Close(out)
		return err
	}
	if err := unix.Close(out); err != nil {
		return fmt.Errorf("copier: close %s: %w", e.dst, err)
	}
	atomic.AddInt64(&c.progress.Files, 1)
	return nil
}

// copyData copies the content: copy_file_range for large files (in-kernel,
// reflink or server-side where the filesystem can), one pooled buffer
// otherwise, falling back to the buffer when copy_file_range is refused.
func (c *copier) copyData(out, in int, size int64) (int64, error) {
	var total int64
	if size > smallFile {
		for {
			n, err := unix.CopyFileRange(in, nil, out, nil, 1<<30, 0)
			if err != nil {
				if total == 0 && (errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EOPNOTSUPP)) {
					break // e.g. across filesystems on old kernels: copy by hand
				}
				return total, err
			}
			if n == 0 {
				return total, nil
			}
			total += int64(n)
		}
	}
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	buf := *bp
	for {
		n, err := unix.Read(in, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return total, err
		}
		if n == 0 {
			return total, nil
		}
		for w := 0; w < n; {
			m, err := unix.Write(out, buf[w:n])
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil {
				return total, err
			}
			w += m
		}
		total += int64(n)
	}
}

// applyMeta sets ownership, mode and timestamps of e.dst from e.st. fd is an
// open descriptor of a regular file (saves path lookups) or -1.
func (c *copier) applyMeta(e entry, fd int) error {
	isLink := e.mode&fs.ModeSymlink != 0
	uid, gid := int(e.st.Uid), int(e.st.Gid)
	// Only root may give files away; like cp -a, an unprivileged copy keeps
	// the copier's own ownership rather than failing.
	if c.euid == 0 || uid == c.euid {
		var err error
		switch {
		case fd >= 0:
			err = unix.Fchown(fd, uid, gid)
		default:
			err = os.Lchown(e.dst, uid, gid)
		}
		if err != nil && !(c.euid != 0 && errors.Is(err, syscall.EPERM)) {
			return fmt.Errorf("copier: chown %s: %w", e.dst, err)
		}
	}
	if !isLink {
		// After chown, because chown clears setuid/setgid.
		perm := uint32(e.st.Mode & 0o7777)
		var err error
		if fd >= 0 {
			err = unix.Fchmod(fd, perm)
		} else {
			err = unix.Chmod(e.dst, perm)
		}
		if err != nil {
			return fmt.Errorf("copier: chmod %s: %w", e.dst, err)
		}
	}
	ts := []unix.Timespec{
		{Sec: e.st.Atim.Sec, Nsec: e.st.Atim.Nsec},
		{Sec: e.st.Mtim.Sec, Nsec: e.st.Mtim.Nsec},
	}
	flags := 0
	if isLink {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, e.dst, ts, flags); err != nil {
		return fmt.Errorf("copier: utimes %s: %w", e.dst, err)
	}
	return nil
}

func modeOf(st *syscall.Stat_t) fs.FileMode {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= fs.ModeDir
	case syscall.S_IFLNK:
		m |= fs.ModeSymlink
	case syscall.S_IFIFO:
		m |= fs.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= fs.ModeSocket
	case syscall.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case syscall.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}
