package filebrowser

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpecialFilesRefused: a GET of a FIFO, a socket or a link to one
// answers 422 at once with a JSON error, without opening it (on BASE the
// FIFO request hung until the client gave up, pinning an OS thread).
func TestSpecialFilesRefused(t *testing.T) {
	srv, dir := setup(t)
	vol := filepath.Join(dir, "vol")
	require.NoError(t, syscall.Mkfifo(filepath.Join(vol, "pipe"), 0o644))
	require.NoError(t, os.Symlink("pipe", filepath.Join(vol, "pipe-link")))
	l, err := net.Listen("unix", filepath.Join(vol, "sock"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	cases := []struct {
		path, want string
	}{
		{"/files/pipe", "pipe is a named pipe (FIFO)"},
		{"/files/pipe-link", "pipe-link is a named pipe (FIFO)"},
		{"/files/sock", "sock is a socket"},
		{"/archive/pipe", "archives are made of folders"},
	}
	client := &http.Client{Timeout: 5 * time.Second}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+tc.path, nil)
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err, "the request must be answered, not hang")
			defer resp.Body.Close()
			assert.GreaterOrEqual(t, resp.StatusCode, 400)
			assert.Less(t, resp.StatusCode, 500)
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))
			var body map[string]string
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
			assert.Contains(t, body["error"], tc.want)
		})
	}
}

// TestOpenRefusesSwappedFIFO: even when a FIFO replaces a file after the
// type check, the non-blocking open returns at once and refuses it.
func TestOpenRefusesSwappedFIFO(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644))
	s, err := New(dir)
	require.NoError(t, err)
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		f, err := s.open("pipe", false)
		if f != nil {
			_ = f.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		var ns errNotServed
		require.ErrorAs(t, err, &ns)
		assert.NotZero(t, ns.mode&os.ModeNamedPipe)
	case <-time.After(5 * time.Second):
		t.Fatal("opening a FIFO blocked")
	}
}

// bigDir makes a directory of n empty files named f000000...
func bigDir(t testing.TB, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%06d", i)))
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	return dir
}

func listPage(t *testing.T, srv *httptest.Server, query string) (int, Listing, string) {
	t.Helper()
	resp, b := get(t, srv.URL+"/files/?format=json"+query)
	var l Listing
	if resp.StatusCode == http.StatusOK {
		require.NoError(t, json.Unmarshal(b, &l))
	}
	return resp.StatusCode, l, string(b)
}

func TestPagination(t *testing.T) {
	dir := bigDir(t, 25)
	s, err := New(dir)
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(func() { srv.Close(); s.Close() })

	cases := []struct {
		name      string
		query     string
		status    int
		first     string
		count     int
		more      bool
		previous  bool
		wantError string
	}{
		{name: "default limit", query: "", status: 200, first: "f000000", count: 25},
		{name: "first page", query: "&limit=10", status: 200, first: "f000000", count: 10, more: true},
		{name: "after a name", query: "&limit=10&continue=" + continueToken("f000009"), status: 200, first: "f000010", count: 10, more: true, previous: true},
		{name: "last page", query: "&limit=10&continue=" + continueToken("f000019"), status: 200, first: "f000020", count: 5, previous: true},
		{name: "exact end", query: "&limit=5&continue=" + continueToken("f000019"), status: 200, first: "f000020", count: 5, previous: true},
		{name: "back from a name", query: "&limit=10&before=" + continueToken("f000020"), status: 200, first: "f000010", count: 10, more: true, previous: true},
		{name: "back to the first page", query: "&limit=10&before=" + continueToken("f000005"), status: 200, first: "f000000", count: 5, more: true},
		{name: "back from past the end", query: "&limit=3&before=" + continueToken("z"), status: 200, first: "f000022", count: 3, previous: true},
		{name: "both directions", query: "&continue=" + continueToken("a") + "&before=" + continueToken("b"), status: 400, wantError: "give one of them"},
		{name: "bad before token", query: "&before=%25%25", status: 400, wantError: "before"},
		{name: "past the end", query: "&continue=" + continueToken("z"), status: 200, count: 0},
		{name: "max limit", query: fmt.Sprintf("&limit=%d", MaxLimit), status: 200, first: "f000000", count: 25},
		{name: "limit zero", query: "&limit=0", status: 400, wantError: "limit"},
		{name: "limit too big", query: fmt.Sprintf("&limit=%d", MaxLimit+1), status: 400, wantError: "1 to 10000"},
		{name: "limit not a number", query: "&limit=ten", status: 400, wantError: "limit"},
		{name: "bad token", query: "&continue=%25%25", status: 400, wantError: "continue"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, l, body := listPage(t, srv, tc.query)
			require.Equal(t, tc.status, status, body)
			if tc.status != 200 {
				assert.Contains(t, body, tc.wantError)
				return
			}
			require.Len(t, l.Entries, tc.count)
			if tc.count > 0 {
				assert.Equal(t, tc.first, l.Entries[0].Name)
			}
			names := make([]string, len(l.Entries))
			for i, e := range l.Entries {
				names[i] = e.Name
			}
			assert.True(t, sort.StringsAreSorted(names), "a page is in name order")
			assert.Equal(t, tc.more, l.Continue != "", "continue token %q", l.Continue)
			assert.Equal(t, tc.previous, l.Previous != "", "previous token %q", l.Previous)
		})
	}

	// Following the previous tokens back from the end visits every name once.
	var back []string
	token := continueToken("z")
	for range 10 {
		status, l, body := listPage(t, srv, "&limit=7&before="+token)
		require.Equal(t, 200, status, body)
		names := make([]string, 0, len(l.Entries))
		for _, e := range l.Entries {
			names = append(names, e.Name)
		}
		back = append(names, back...)
		if token = l.Previous; token == "" {
			break
		}
	}
	require.Len(t, back, 25)
	assert.True(t, sort.StringsAreSorted(back))

	// Following the tokens visits every name exactly once, in order.
	var all []string
	token = ""
	for range 10 {
		q := "&limit=7"
		if token != "" {
			q += "&continue=" + token
		}
		status, l, body := listPage(t, srv, q)
		require.Equal(t, 200, status, body)
		for _, e := range l.Entries {
			all = append(all, e.Name)
		}
		if token = l.Continue; token == "" {
			break
		}
	}
	require.Len(t, all, 25)
	assert.True(t, sort.StringsAreSorted(all))
	assert.Equal(t, "f000024", all[24])

	// The HTML page links to the next one.
	_, b := get(t, srv.URL+"/files/?limit=10")
	assert.Contains(t, string(b), "continue="+continueToken("f000009"))
}

// TestListingMemoryBounded: one page of a 100k-entry directory allocates a
// few MB in total, whatever the directory's size (BASE: ~171 MB, all live
// at once). Set FILEBROWSER_BIG=100000 for the full figure (default 20000).
func TestListingMemoryBounded(t *testing.T) {
	n := 20000
	if v := os.Getenv("FILEBROWSER_BIG"); v != "" {
		_, err := fmt.Sscan(v, &n)
		require.NoError(t, err)
	}
	dir := bigDir(t, n)
	s, err := New(dir)
	require.NoError(t, err)
	defer s.Close()
	req := httptest.NewRequest(http.MethodGet, "/files/?format=json", nil)
	run := func() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
	}
	run() // warm up
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	run()
	runtime.ReadMemStats(&after)
	total := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d entries: %.1f MB allocated by one listing page of %d, %d allocations",
		n, float64(total)/1e6, DefaultLimit, after.Mallocs-before.Mallocs)
	// Every name is read once (~25 bytes each) plus one page of entries;
	// the JSON of 1000 entries is ~150 KB.
	assert.Less(t, total, uint64(2_000_000+60*n), "allocation grows with the page, not with the directory")
}

func BenchmarkListing100k(b *testing.B) {
	dir := bigDir(b, 100000)
	s, err := New(dir)
	require.NoError(b, err)
	defer s.Close()
	req := httptest.NewRequest(http.MethodGet, "/files/?format=json", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// TestArchiveWithFIFO: a FIFO inside an archived folder is stored as a
// FIFO entry, never opened; the archive completes.
func TestArchiveWithFIFO(t *testing.T) {
	srv, dir := setup(t)
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "vol", "data", "pipe"), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/archive/data", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	gz, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	tr := tar.NewReader(gz)
	types := map[string]byte{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err, "a complete archive")
		types[h.Name] = h.Typeflag
	}
	assert.Equal(t, byte(tar.TypeFifo), types["data/pipe"])
	assert.Equal(t, byte(tar.TypeReg), types["data/sub/b.txt"])
}
