package filebrowser

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/runplane/runplane/internal/httpjson"
)

// setup serves vol/ of a temp dir that also holds a secret next to the
// volume, the target of every escape attempt.
func setup(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	for _, d := range []string{"vol/data/sub", "vol/empty"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, d), 0o755))
	}
	files := map[string]string{
		"secret.txt":           "TOP SECRET",
		"vol/hello.txt":        "hello world",
		"vol/data/a.txt":       "aaa",
		"vol/data/sub/b.txt":   "bbb",
		"vol/data/sub/<x>.txt": "html name",
	}
	for p, c := range files {
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644))
	}
	links := map[string]string{
		"vol/inside-link":  "data/a.txt",
		"vol/inside-dir":   "data",
		"vol/escape-rel":   "../secret.txt",
		"vol/escape-abs":   filepath.Join(dir, "secret.txt"),
		"vol/escape-dir":   "..",
		"vol/data/up-link": "../../secret.txt",
		"vol/dangling":     "nowhere",
	}
	for p, target := range links {
		require.NoError(t, os.Symlink(target, filepath.Join(dir, p)))
	}
	s, err := New(vol)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })
	return srv, dir
}

// rawGet sends the request line verbatim, so `..` reaches the server
// un-normalised by the client.
func rawGet(t *testing.T, srv *httptest.Server, target string) (int, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestNoEscape(t *testing.T) {
	srv, _ := setup(t)
	tests := []struct {
		target string
		want   int
	}{
		{"/files/escape-rel", http.StatusForbidden},
		{"/files/escape-abs", http.StatusForbidden},
		{"/files/escape-dir/", http.StatusForbidden},
		{"/files/escape-dir/secret.txt", http.StatusForbidden},
		{"/files/data/up-link", http.StatusForbidden},
		{"/archive/escape-dir", http.StatusForbidden},
		{"/files/../secret.txt", 0},               // any non-2xx
		{"/files/data/../../secret.txt", 0},       // any non-2xx
		{"/files/%2e%2e/secret.txt", 0},           // any non-2xx
		{"/files/data%2f..%2f..%2fsecret.txt", 0}, // any non-2xx
		{"/archive/..", 0},
		{"/archive/%2e%2e/", 0},
		{"/files/dangling", http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.target, func(t *testing.T) {
			code, body := rawGet(t, srv, tt.target)
			require.NotContains(t, body, "TOP SECRET", "leaked the secret")
			require.False(t, code >= 200 && code < 300, "%d, want an error; body %s", code, body)
			if tt.want != 0 {
				require.Equal(t, tt.want, code, "body %s", body)
			}
			if code >= 400 {
				require.True(t, json.Valid([]byte(body)), "error body is not JSON: %s", body)
			}
		})
	}
}

func TestReadOnly(t *testing.T) {
	srv, dir := setup(t)
	for _, m := range []string{http.MethodPut, http.MethodPost, http.MethodDelete, http.MethodPatch} {
		req, _ := http.NewRequest(m, srv.URL+"/files/hello.txt", strings.NewReader("overwritten"))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		var e httpjson.Problem
		_ = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, m)
		assert.Contains(t, e.Error, "read-only", m)
	}
	b, err := os.ReadFile(filepath.Join(dir, "vol/hello.txt"))
	require.NoError(t, err)
	require.Equal(t, "hello world", string(b), "file changed")
}

// reply is what get keeps of a response: the body is read and closed
// inside get, so no caller holds one open.
type reply struct {
	StatusCode int
	Header     http.Header
}

func get(t *testing.T, url string, header ...string) (reply, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header}, b
}

func TestDownload(t *testing.T) {
	srv, _ := setup(t)
	tests := []struct{ path, want string }{
		{"/files/hello.txt", "hello world"},
		{"/files/data/sub/b.txt", "bbb"},
		{"/files/inside-link", "aaa"}, // a link inside the volume is followed
		{"/files/inside-dir/a.txt", "aaa"},
	}
	for _, tt := range tests {
		resp, b := get(t, srv.URL+tt.path)
		assert.Equal(t, http.StatusOK, resp.StatusCode, tt.path)
		assert.Equal(t, tt.want, string(b), tt.path)
	}
}

func TestListing(t *testing.T) {
	srv, _ := setup(t)
	resp, b := get(t, srv.URL+"/files/?format=json")
	require.Equal(t, http.StatusOK, resp.StatusCode, "status %d: %s", resp.StatusCode, b)
	var l Listing
	require.NoError(t, json.Unmarshal(b, &l))
	got := map[string]string{}
	for _, e := range l.Entries {
		got[e.Name] = fmt.Sprintf("%s escapes=%t", e.Type, e.Escapes)
	}
	want := map[string]string{
		"hello.txt": "file escapes=false", "data": "dir escapes=false", "empty": "dir escapes=false",
		"inside-link": "symlink escapes=false", "inside-dir": "dir escapes=false",
		"escape-rel": "symlink escapes=true", "escape-abs": "symlink escapes=true", "escape-dir": "symlink escapes=true",
		"dangling": "symlink escapes=true",
	}
	assert.Equal(t, fmt.Sprint(want), fmt.Sprint(got), "listing\n got %v\nwant %v", got, want)
	// Accept header selects JSON too; HTML escapes names.
	resp, _ = get(t, srv.URL+"/files/data/", "Accept", "application/json")
	assert.Equal(t, "application/json", resp.Header.Get("Content-Type"), "Accept: application/json")
	resp, b = get(t, srv.URL+"/files/data/sub/")
	assert.Contains(t, string(b), "&lt;x&gt;.txt", "HTML listing escapes names")
	assert.NotContains(t, string(b), "<x>", "HTML listing escapes names")
	assert.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"), "HTML listing content type %s", resp.Header.Get("Content-Type"))
}

func TestArchive(t *testing.T) {
	srv, _ := setup(t)
	tests := []struct {
		path string
		want []string
	}{
		{"/archive/data", []string{"data/", "data/a.txt=aaa", "data/sub/", "data/sub/<x>.txt=html name", "data/sub/b.txt=bbb", "data/up-link->../../secret.txt"}},
		{"/archive/empty/", []string{"empty/"}},
	}
	for _, tt := range tests {
		resp, b := get(t, srv.URL+tt.path)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %d %s", tt.path, resp.StatusCode, b)
		gz, err := gzip.NewReader(strings.NewReader(string(b)))
		require.NoError(t, err)
		tr := tar.NewReader(gz)
		var got []string
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			c, _ := io.ReadAll(tr)
			switch h.Typeflag {
			case tar.TypeReg:
				got = append(got, h.Name+"="+string(c))
			case tar.TypeSymlink:
				got = append(got, h.Name+"->"+h.Linkname)
			default:
				got = append(got, h.Name)
			}
		}
		sort.Strings(got)
		assert.Equal(t, fmt.Sprint(tt.want), fmt.Sprint(got), "%s:\n got %v\nwant %v", tt.path, got, tt.want)
	}
	resp, _ := get(t, srv.URL+"/archive/hello.txt")
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode, "archive of a file")
}
