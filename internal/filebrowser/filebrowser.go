// Package filebrowser is the read-only HTTP file browser the accessor
// Deployment runs (cmd/runplane-accessor) over a mounted PVC: directory
// listings (HTML or JSON), file downloads and tar.gz archives of a folder.
//
// It never writes, and it never serves anything outside its root: every
// access goes through an os.Root, which refuses paths that leave the root by
// `..` or through a symlink, and request paths are checked to be local
// before they reach it. It serves regular files and directories only: other
// types (FIFOs, sockets, devices) are refused after an lstat, and files are
// opened non-blocking and checked again, so no request can hang on a FIFO.
// Listings are paged in name order (?limit=, ?continue=) and keep one page
// in memory, whatever the directory's size.
//
// Authorization is not this package's: cmd/runplane-accessor wraps the
// Server in claimauth.Gate.
package filebrowser

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/runplane/runplane/internal/httpjson"
)

// Server serves one directory tree read-only.
type Server struct {
	root *os.Root
	mux  *http.ServeMux
}

// New opens dir as the served root. Close the Server to release it.
func New(dir string) (*Server, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("filebrowser: opening root %s: %w", dir, err)
	}
	s := &Server{root: root, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	// Relative redirects and links throughout: the accessor may be reached
	// under a path prefix (kubectl proxy, the API server's service proxy).
	s.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) { relativeRedirect(w, "files/", http.StatusFound) })
	s.mux.HandleFunc("GET /files/{path...}", s.files)
	s.mux.HandleFunc("GET /archive/{path...}", s.archive)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			writeError(w, http.StatusMethodNotAllowed, "read-only file browser: method %s is not allowed, use GET", r.Method)
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint %q: use /files/<path> or /archive/<path>", r.URL.Path)
	})
	return s, nil
}

// Close releases the root.
func (s *Server) Close() error { return s.root.Close() }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Entry is one item of a JSON directory listing.
type Entry struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"` // file, dir, symlink, other
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"`
	ModTime time.Time `json:"modTime"`
	// Target is a symlink's text; Escapes marks links that lead outside the
	// volume (or nowhere) and so cannot be followed.
	Target  string `json:"target,omitempty"`
	Escapes bool   `json:"escapes,omitempty"`
}

// Listing is the JSON answer for a directory: one page, in name order.
type Listing struct {
	Path    string  `json:"path"`
	Entries []Entry `json:"entries"`
	// Limit is the page size used; Continue, when set, fetches the next
	// page (?continue=<it>); absent on the last page. Previous, when set,
	// fetches the page before (?before=<it>); absent on the first page.
	Limit    int    `json:"limit"`
	Continue string `json:"continue,omitempty"`
	Previous string `json:"previous,omitempty"`
}

// relativeRedirect sends the browser to loc relative to the request's URL,
// as is: http.Redirect would make it an absolute path, which loses a
// proxy's path prefix.
func relativeRedirect(w http.ResponseWriter, loc string, code int) {
	w.Header().Set("Location", loc)
	w.WriteHeader(code)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	httpjson.Error(w, code, fmt.Sprintf(format, args...))
}

// clean turns the request's path value into a root-relative name, refusing
// anything that is not local (absolute, `..`, NUL...).
func clean(p string) (string, error) {
	if p == "" {
		return ".", nil
	}
	if strings.ContainsRune(p, 0) || strings.Contains(p, "\\") {
		return "", fmt.Errorf("path %q contains a forbidden character", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("path %q must not contain '..'", p)
		}
	}
	c := path.Clean(p)
	if !fs.ValidPath(c) {
		return "", fmt.Errorf("path %q is not a valid path inside the volume", p)
	}
	return c, nil
}

// fail maps a filesystem error to a status: escapes are 403, absent is 404.
func fail(w http.ResponseWriter, name string, err error) {
	var ns errNotServed
	switch {
	case errors.As(err, &ns):
		refuseType(w, name, ns.mode)
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, "%s: not found", name)
	case strings.Contains(err.Error(), "escapes from parent"), errors.Is(err, fs.ErrPermission):
		writeError(w, http.StatusForbidden, "%s: outside the volume or not readable", name)
	default:
		writeError(w, http.StatusInternalServerError, "%s: %v", name, err)
	}
}

func (s *Server) files(w http.ResponseWriter, r *http.Request) {
	name, err := clean(r.PathValue("path"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	info, err := s.kind(name)
	if err != nil {
		fail(w, name, err)
		return
	}
	switch {
	case info.IsDir():
		if !strings.HasSuffix(r.URL.Path, "/") {
			target := url.PathEscape(path.Base(r.URL.Path)) + "/"
			if r.URL.RawQuery != "" {
				target += "?" + r.URL.RawQuery
			}
			relativeRedirect(w, target, http.StatusMovedPermanently)
			return
		}
		p, err := parsePage(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		f, err := s.open(name, true)
		if err != nil {
			fail(w, name, err)
			return
		}
		defer f.Close()
		s.list(w, r, name, f, p)
	case info.Mode().IsRegular():
		f, err := s.open(name, false)
		if err != nil {
			fail(w, name, err)
			return
		}
		defer f.Close()
		w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", path.Base(name)))
		http.ServeContent(w, r, path.Base(name), info.ModTime(), f)
	default:
		refuseType(w, name, info.Mode())
	}
}

// errNotServed is an entry that is neither a regular file nor a directory.
type errNotServed struct{ mode fs.FileMode }

func (e errNotServed) Error() string { return "a " + typeName(e.mode) }

func refuseType(w http.ResponseWriter, name string, mode fs.FileMode) {
	writeError(w, http.StatusUnprocessableEntity, "%s is a %s: only regular files and directories are served", name, typeName(mode))
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeCharDevice != 0:
		return "character device"
	case m&fs.ModeDevice != 0:
		return "device"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	case m.IsDir():
		return "directory"
	case m.IsRegular():
		return "regular file"
	}
	return "special file"
}

// kind is what name is, without opening it: Lstat, and a symlink is
// resolved inside the root (one that leaves it is an error, 403).
func (s *Server) kind(name string) (fs.FileInfo, error) {
	info, err := s.root.Lstat(name)
	if err != nil {
		return nil, err
	}
	if info.Mode()&fs.ModeSymlink != 0 {
		return s.root.Stat(name)
	}
	return info, nil
}

// open opens a regular file or a directory, never anything else: the open
// is non-blocking, so a FIFO swapped in since kind looked (the tenant's
// workloads write the volume meanwhile) cannot hang it, and the opened
// file's own type is checked before a byte is served.
func (s *Server) open(name string, dir bool) (*os.File, error) {
	f, err := s.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	info, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	if info.IsDir() != dir || (!dir && !info.Mode().IsRegular()) {
		_ = f.Close()
		return nil, errNotServed{mode: info.Mode()}
	}
	return f, nil
}

// list answers one page of a directory, in name order.
func (s *Server) list(w http.ResponseWriter, r *http.Request, name string, dir *os.File, p page) {
	names, earlier, later, err := selectPage(dir.Readdirnames, p)
	if err != nil {
		fail(w, name, err)
		return
	}
	l := Listing{Path: "/" + strings.TrimPrefix(name, "."), Limit: p.limit, Entries: make([]Entry, 0, len(names))}
	if later && len(names) > 0 {
		l.Continue = continueToken(names[len(names)-1])
	}
	if earlier && len(names) > 0 {
		l.Previous = continueToken(names[0])
	}
	for _, n := range names {
		child := path.Join(name, n)
		info, err := s.root.Lstat(child)
		if err != nil {
			continue // removed meanwhile
		}
		e := Entry{Name: n, Size: info.Size(), Mode: info.Mode().String(), ModTime: info.ModTime().UTC()}
		switch {
		case info.IsDir():
			e.Type = "dir"
		case info.Mode().IsRegular():
			e.Type = "file"
		case info.Mode()&fs.ModeSymlink != 0:
			e.Type = "symlink"
			e.Target, _ = s.root.Readlink(child)
			// Resolve through the root: a link that leaves it is shown, not followed.
			if target, err := s.root.Stat(child); err != nil {
				e.Escapes = true
			} else if target.IsDir() {
				e.Type = "dir"
			}
		default:
			e.Type = "other"
		}
		l.Entries = append(l.Entries, e)
	}
	if wantsJSON(r) {
		httpjson.Write(w, http.StatusOK, l)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := listingPage.Execute(w, newView(l)); err != nil {
		// Headers are gone; nothing better to do than stop.
		return
	}
}

func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	return strings.Contains(r.Header.Get("Accept"), "application/json")
}

// archive streams a tar.gz of a folder. Symlinks are stored as links (their
// text only), never followed, so an archive cannot carry outside content.
func (s *Server) archive(w http.ResponseWriter, r *http.Request) {
	name, err := clean(strings.TrimSuffix(r.PathValue("path"), "/"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	info, err := s.root.Stat(name)
	if err != nil {
		fail(w, name, err)
		return
	}
	if !info.IsDir() {
		writeError(w, http.StatusBadRequest, "%s: archives are made of folders; download files under /files/", name)
		return
	}
	base := path.Base(name)
	if name == "." {
		base = "volume"
	}
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", base+".tar.gz"))
	gz := gzip.NewWriter(w)
	tw := tar.NewWriter(gz)
	// Errors after the first byte cannot change the status; the truncated
	// archive then fails to decompress, which tells the client.
	_ = s.walk(name, info, 0, func(p string, info fs.FileInfo) error {
		rel := base
		if p != name {
			rel = path.Join(base, strings.TrimPrefix(p, name+"/"))
			if name == "." {
				rel = path.Join(base, p)
			}
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			var err error
			if link, err = s.root.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return nil // sockets and the like: skip
		}
		hdr.Name = rel
		if info.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := s.open(p, false)
		if err != nil {
			return err
		}
		defer f.Close()
		// Never more than the header promised, even if the file grew.
		_, err = io.Copy(tw, io.LimitReader(f, hdr.Size))
		return err
	})
	_ = tw.Close()
	_ = gz.Close()
}

// Archive walks read each directory walkChunk names at a time and go at
// most maxDepth levels down: memory and open descriptors are bounded by
// maxDepth, whatever the size of a directory.
const (
	walkChunk = 256
	maxDepth  = 256
)

// walk visits p (described by info) and, for a directory, everything below
// it, depth first, without following symlinks below p.
func (s *Server) walk(p string, info fs.FileInfo, depth int, visit func(string, fs.FileInfo) error) error {
	if err := visit(p, info); err != nil {
		return err
	}
	if !info.IsDir() {
		return nil
	}
	if depth >= maxDepth {
		return fmt.Errorf("%s: more than %d levels deep", p, maxDepth)
	}
	dir, err := s.open(p, true)
	if err != nil {
		return err
	}
	defer dir.Close()
	for {
		names, err := dir.Readdirnames(walkChunk)
		for _, n := range names {
			child := path.Join(p, n)
			ci, lerr := s.root.Lstat(child)
			if lerr != nil {
				continue // removed meanwhile
			}
			if werr := s.walk(child, ci, depth+1, visit); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) || (err == nil && len(names) == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
