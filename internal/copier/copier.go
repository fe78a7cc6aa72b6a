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
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

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

// entry is a directory (or the root) whose metadata is applied at the end.
type entry struct {
	src, dst string
	st       *unix.Stat_t
}

// dirent is one name from getdents with its d_type, which spares an lstat
// per entry: regular files are stat'ed through their open descriptor.
type dirent struct {
	name string
	typ  uint8
}

type task struct {
	dir            *entry   // a directory to read, or
	srcDir, dstDir string   // the directories of
	entries        []dirent // non-directory entries to create
}

type linkReq struct{ first, dst string }

type copier struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	euid   int
	egid   int
	// inheritGID: the destination root is setgid, so new entries take its
	// group rather than the copier's and ownership must always be set.
	inheritGID bool
	// foreignRoot: the destination root belongs to another user and the
	// copier is unprivileged, so it may not set the root's mode or times.
	foreignRoot bool
	// umask as read at start; modeExact is false when the creation mode
	// cannot be trusted (umask unknown, default ACL on the destination).
	umask     uint32
	modeExact bool
	progress  Progress // updated atomically

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []task
	pending int // tasks queued or running
	dirs    []entry
	inodes  map[inodeKey]string // first destination path of a multiply linked inode
	links   []linkReq

	bufs       sync.Pool
	direntBufs sync.Pool
}

// Copy copies the tree at from into to. to is created if missing; an existing
// to must be a directory, and existing entries inside it make the copy fail
// (it fills fresh volumes, it does not merge).
func Copy(ctx context.Context, from, to string, opts Options) (Progress, error) {
	var rootSt unix.Stat_t
	if err := unix.Lstat(from, &rootSt); err != nil {
		return Progress{}, fmt.Errorf("copier: source: %w", &fs.PathError{Op: "lstat", Path: from, Err: err})
	}
	if rootSt.Mode&unix.S_IFMT != unix.S_IFDIR {
		return Progress{}, fmt.Errorf("copier: source %s is not a directory", from)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return Progress{}, fmt.Errorf("copier: destination: %w", err)
	}
	var toSt unix.Stat_t
	if err := unix.Stat(to, &toSt); err != nil {
		return Progress{}, fmt.Errorf("copier: destination: %w", &fs.PathError{Op: "stat", Path: to, Err: err})
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
	umask, umaskKnown := readUmask()
	c := &copier{
		ctx: ctx, cancel: cancel, euid: os.Geteuid(), egid: os.Getegid(),
		inheritGID: toSt.Mode&unix.S_ISGID != 0,
		// A volume's root is the storage's: root-owned, made writable by
		// its mode or the Pod's fsGroup (the copy Job runs as UID 65532).
		foreignRoot: os.Geteuid() != 0 && int(toSt.Uid) != os.Geteuid(),
		umask:       umask,
		modeExact:   umaskKnown && !hasDefaultACL(to),
		inodes:      map[inodeKey]string{},
	}
	c.cond = sync.NewCond(&c.mu)
	// Wake idle workers when the copy fails or the caller gives up; the
	// lock makes sure no worker is between its check and its Wait.
	stopWake := context.AfterFunc(ctx, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer stopWake()
	// One page more than smallFile so a small file is read in one call that
	// also shows its end (see copyData).
	c.bufs.New = func() any { b := make([]byte, smallFile+4096); return &b }
	c.direntBufs.New = func() any { b := make([]byte, 32<<10); return &b }

	root := entry{src: from, dst: to, st: &rootSt}
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
		d := c.dirs[i]
		if i == 0 && c.foreignRoot {
			// Only the owner may chmod or set times; like chown in an
			// unprivileged copy, the root keeps what it has rather than
			// failing the copy of everything under it.
			continue
		}
		if err := c.applyMetaAt(unix.AT_FDCWD, d.dst, d.st, false); err != nil {
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

// readUmask reads the process umask without changing it (umask(2) can only
// read by setting, which would race with other goroutines creating files).
func readUmask() (uint32, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		v, ok := strings.CutPrefix(line, "Umask:")
		if !ok {
			continue
		}
		m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
		return uint32(m), err == nil
	}
	return 0, false
}

// hasDefaultACL reports whether new entries under dir take their mode from a
// default ACL instead of the umask.
func hasDefaultACL(dir string) bool {
	n, err := unix.Getxattr(dir, "system.posix_acl_default", nil)
	return err == nil && n > 0
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
			err = c.copyBatch(t.srcDir, t.dstDir, t.entries)
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

// readDir creates d's subdirectories (queued for their own reads) and copies
// its first batch of other entries itself, with the directory descriptors it
// already holds and its dentries still warm; further batches go to the queue.
func (c *copier) readDir(d entry) error {
	srcFd, err := openDir(d.src)
	if err != nil {
		return fmt.Errorf("copier: read dir %s: %w", d.src, err)
	}
	defer unix.Close(srcFd)
	ents, err := c.readDirents(srcFd)
	if err != nil {
		return fmt.Errorf("copier: read dir %s: %w", d.src, err)
	}
	dstFd, err := openDir(d.dst)
	if err != nil {
		return fmt.Errorf("copier: open dir %s: %w", d.dst, err)
	}
	defer unix.Close(dstFd)
	files := ents[:0]
	for _, de := range ents {
		if de.typ == unix.DT_UNKNOWN { // some filesystems do not fill d_type
			var st unix.Stat_t
			if err := unix.Fstatat(srcFd, de.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("copier: lstat %s: %w", filepath.Join(d.src, de.name), err)
			}
			de.typ = dtOf(st.Mode)
		}
		if de.typ != unix.DT_DIR {
			files = append(files, de)
			continue
		}
		st := new(unix.Stat_t)
		if err := unix.Fstatat(srcFd, de.name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("copier: lstat %s: %w", filepath.Join(d.src, de.name), err)
		}
		e := entry{src: filepath.Join(d.src, de.name), dst: filepath.Join(d.dst, de.name), st: st}
		// Owner-writable until the end so children can be created.
		if err := unix.Mkdirat(dstFd, de.name, 0o700); err != nil {
			return fmt.Errorf("copier: mkdir %s: %w", e.dst, err)
		}
		atomic.AddInt64(&c.progress.Dirs, 1)
		c.mu.Lock()
		c.dirs = append(c.dirs, e)
		c.mu.Unlock()
		c.push(task{dir: &e})
	}
	first := files[:min(len(files), batchSize)]
	for rest := files[len(first):]; len(rest) > 0; {
		n := min(len(rest), batchSize)
		c.push(task{srcDir: d.src, dstDir: d.dst, entries: rest[:n:n]})
		rest = rest[n:]
	}
	return c.copyEntries(srcFd, dstFd, d.src, d.dst, first)
}

func openDir(path string) (int, error) {
	return unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

// readDirents lists a directory with getdents directly: os.ReadDir sorts
// and drops d_type's cost savings behind a poller-registered *os.File.
func (c *copier) readDirents(fd int) ([]dirent, error) {
	bp := c.direntBufs.Get().(*[]byte)
	defer c.direntBufs.Put(bp)
	buf := *bp
	var out []dirent
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8, name.
		for b := buf[:n]; len(b) >= 19; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			if reclen < 19 || reclen > len(b) {
				return nil, fmt.Errorf("malformed directory entry")
			}
			typ := b[18]
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			b = b[reclen:]
			if s := string(name); s != "." && s != ".." {
				out = append(out, dirent{name: s, typ: typ})
			}
		}
	}
}

// copyBatch copies a further batch of a large directory's entries.
func (c *copier) copyBatch(srcDir, dstDir string, ents []dirent) error {
	srcFd, err := openDir(srcDir)
	if err != nil {
		return fmt.Errorf("copier: open dir %s: %w", srcDir, err)
	}
	defer unix.Close(srcFd)
	dstFd, err := openDir(dstDir)
	if err != nil {
		return fmt.Errorf("copier: open dir %s: %w", dstDir, err)
	}
	defer unix.Close(dstFd)
	return c.copyEntries(srcFd, dstFd, srcDir, dstDir, ents)
}

func (c *copier) copyEntries(srcFd, dstFd int, srcDir, dstDir string, ents []dirent) error {
	for _, de := range ents {
		if c.ctx.Err() != nil {
			return nil // Copy reports the cause
		}
		var err error
		if de.typ == unix.DT_REG {
			err = c.copyFile(srcFd, dstFd, srcDir, dstDir, de.name)
		} else {
			err = c.copyOther(srcFd, dstFd, srcDir, dstDir, de.name)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// linked records a multiply linked inode; it reports true when an earlier
// name already holds the copy, and the link is made after the walk.
func (c *copier) linked(st *unix.Stat_t, dst string) bool {
	if st.Nlink <= 1 {
		return false
	}
	key := inodeKey{dev: st.Dev, ino: st.Ino}
	c.mu.Lock()
	defer c.mu.Unlock()
	if first, seen := c.inodes[key]; seen {
		c.links = append(c.links, linkReq{first: first, dst: dst})
		return true
	}
	c.inodes[key] = dst
	return false
}

// copyOther recreates symlinks and special files (as cp -a does), and
// anything d_type mislabelled as not regular.
func (c *copier) copyOther(srcFd, dstFd int, srcDir, dstDir, name string) error {
	src := filepath.Join(srcDir, name)
	dst := filepath.Join(dstDir, name)
	st := new(unix.Stat_t)
	if err := unix.Fstatat(srcFd, name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("copier: lstat %s: %w", src, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG: // copyFile does its own hard-link bookkeeping
		return c.copyFile(srcFd, dstFd, srcDir, dstDir, name)
	case unix.S_IFDIR:
		return fmt.Errorf("copier: %s: became a directory during the copy", src)
	}
	if c.linked(st, dst) {
		return nil
	}
	isLink := false
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		isLink = true
		buf := make([]byte, max(st.Size+1, 256))
		for {
			n, err := unix.Readlinkat(srcFd, name, buf)
			if err != nil {
				return fmt.Errorf("copier: readlink %s: %w", src, err)
			}
			if n < len(buf) {
				buf = buf[:n]
				break
			}
			buf = make([]byte, 2*len(buf))
		}
		if err := unix.Symlinkat(string(buf), dstFd, name); err != nil {
			return fmt.Errorf("copier: symlink %s: %w", dst, err)
		}
	case unix.S_IFIFO, unix.S_IFSOCK, unix.S_IFCHR, unix.S_IFBLK:
		if err := unix.Mknodat(dstFd, name, st.Mode, int(st.Rdev)); err != nil {
			return fmt.Errorf("copier: mknod %s: %w", dst, err)
		}
	default:
		return fmt.Errorf("copier: %s: unsupported file type %v", src, modeOfMode(st.Mode).Type())
	}
	if err := c.applyMetaAt(dstFd, name, st, isLink); err != nil {
		return fmt.Errorf("%w (in %s)", err, dstDir)
	}
	atomic.AddInt64(&c.progress.Files, 1)
	return nil
}

// copyFile copies a regular file with raw descriptors rather than *os.File
// (the runtime poller's registration costs several syscalls per file, which
// dominates small files), relative to the directory descriptors (no path
// walk), and in as few calls as the metadata allows: openat, fstat, openat
// with the final mode, read, write, futimens, close, close.
func (c *copier) copyFile(srcFd, dstFd int, srcDir, dstDir, name string) error {
	in, err := unix.Openat(srcFd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) { // a symlink where d_type said file
			return c.copyOther(srcFd, dstFd, srcDir, dstDir, name)
		}
		return fmt.Errorf("copier: open %s: %w", filepath.Join(srcDir, name), err)
	}
	defer unix.Close(in)
	var st unix.Stat_t
	if err := unix.Fstat(in, &st); err != nil {
		return fmt.Errorf("copier: stat %s: %w", filepath.Join(srcDir, name), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return c.copyOther(srcFd, dstFd, srcDir, dstDir, name)
	}
	if c.linked(&st, filepath.Join(dstDir, name)) {
		return nil
	}
	perm := st.Mode & 0o777
	out, err := unix.Openat(dstFd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, perm)
	if err != nil {
		return fmt.Errorf("copier: create %s: %w", filepath.Join(dstDir, name), err)
	}
	n, err := c.copyData(out, in, st.Size)
	if err != nil {
		unix.Close(out)
		return fmt.Errorf("copier: copy %s: %w", filepath.Join(srcDir, name), err)
	}
	atomic.AddInt64(&c.progress.Bytes, n)
	if err := c.chown(out, dstFd, name, &st, false); err != nil {
		unix.Close(out)
		return err
	}
	// Set the mode when open's was cut by the umask, or has bits open does
	// not keep: setuid/setgid are cleared by the write and by chown.
	if !c.modeExact || perm&c.umask != 0 || st.Mode&0o7000 != 0 {
		if err := unix.Fchmod(out, st.Mode&0o7777); err != nil {
			unix.Close(out)
			return fmt.Errorf("copier: chmod %s: %w", filepath.Join(dstDir, name), err)
		}
	}
	if err := futimens(out, &st); err != nil {
		unix.Close(out)
		return fmt.Errorf("copier: utimes %s: %w", filepath.Join(dstDir, name), err)
	}
	if err := unix.Close(out); err != nil {
		return fmt.Errorf("copier: close %s: %w", filepath.Join(dstDir, name), err)
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
	if size < int64(len(buf)) {
		// Ask for one byte more than the file holds: getting exactly its
		// size back is the end, which saves the read that returns 0.
		buf = buf[:size+1]
	}
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
		if total == size && n < len(buf) {
			return total, nil
		}
		buf = *bp
	}
}

// chown gives the new entry the source's ownership, through fd when >= 0 or
// else name under dirFd. It skips the call when creation already gave the
// right owner, and, like cp -a, an unprivileged copy keeps its own
// ownership rather than failing.
func (c *copier) chown(fd, dirFd int, name string, st *unix.Stat_t, isLink bool) error {
	uid, gid := int(st.Uid), int(st.Gid)
	if c.euid != 0 && uid != c.euid {
		return nil
	}
	if uid == c.euid && gid == c.egid && !c.inheritGID {
		return nil
	}
	var err error
	if fd >= 0 {
		err = unix.Fchown(fd, uid, gid)
	} else {
		flags := 0
		if isLink {
			flags = unix.AT_SYMLINK_NOFOLLOW
		}
		err = unix.Fchownat(dirFd, name, uid, gid, flags)
	}
	if err != nil {
		if c.euid != 0 && errors.Is(err, unix.EPERM) {
			return nil
		}
		return fmt.Errorf("copier: chown %s: %w", name, err)
	}
	return nil
}

// futimens sets fd's timestamps; x/sys/unix has no wrapper for
// utimensat(fd, NULL, ...), and the path form would walk the path again.
func futimens(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// applyMetaAt sets ownership, mode and timestamps of name under dirFd (a
// path when dirFd is AT_FDCWD) from st.
func (c *copier) applyMetaAt(dirFd int, name string, st *unix.Stat_t, isLink bool) error {
	if err := c.chown(-1, dirFd, name, st, isLink); err != nil {
		return err
	}
	if !isLink {
		// After chown, because chown clears setuid/setgid.
		if err := unix.Fchmodat(dirFd, name, st.Mode&0o7777, 0); err != nil {
			return fmt.Errorf("copier: chmod %s: %w", name, err)
		}
	}
	ts := []unix.Timespec{
		{Sec: st.Atim.Sec, Nsec: st.Atim.Nsec},
		{Sec: st.Mtim.Sec, Nsec: st.Mtim.Nsec},
	}
	flags := 0
	if isLink {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	if err := unix.UtimesNanoAt(dirFd, name, ts, flags); err != nil {
		return fmt.Errorf("copier: utimes %s: %w", name, err)
	}
	return nil
}

func dtOf(mode uint32) uint8 {
	switch mode & unix.S_IFMT {
	case unix.S_IFDIR:
		return unix.DT_DIR
	case unix.S_IFREG:
		return unix.DT_REG
	case unix.S_IFLNK:
		return unix.DT_LNK
	}
	return unix.DT_UNKNOWN // copyOther stats it and decides
}

func modeOf(st *syscall.Stat_t) fs.FileMode { return modeOfMode(st.Mode) }

func modeOfMode(mode uint32) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	switch mode & syscall.S_IFMT {
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
