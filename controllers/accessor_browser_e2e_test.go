package controllers_test

import (
	"context"
	"encoding/base64"
	"html/template"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"

	"github.com/runplane/runplane/internal/filebrowser"
	"github.com/runplane/runplane/internal/filebrowser/claimauth"
)

// TestAccessorInABrowser opens the accessor (its handler against the real
// API server, as in TestAccessorAuthorizesEveryRequest) in headless
// Chromium: signed in through the /login form (POSTed by a page of the
// same origin, as a user's paste would be; it sets an HttpOnly
// SameSite=Strict cookie holding a session ID), the page shows human sizes, times
// with their zone, and pages forward and back through relative links that
// also work for names like "a:b". On BASE /login was a 401 like any other
// path without an Authorization header: a browser could not open the page.
//
// The screenshot goes to the test's artifact directory:
// go test ./controllers -run TestAccessorInABrowser -artifacts -outputdir /tmp/out
func TestAccessorInABrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium not installed (hack/install-deps.sh)")
	}
	ns := env.Namespace(t, "")
	createPVC(t, pvc(ns, "data", nil))
	vol := t.TempDir()
	mtime := time.Date(2026, 11, 28, 20, 0, 0, 0, time.UTC)
	files := map[string]int64{"a:b.txt": 12, "big.bin": 3 << 19, "c.txt": 2048, "d.txt": 5}
	for name, size := range files {
		p := filepath.Join(vol, name)
		f, err := os.Create(p)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size))
		require.NoError(t, f.Close())
		require.NoError(t, os.Chtimes(p, mtime, mtime))
	}
	require.NoError(t, os.Mkdir(filepath.Join(vol, "sub"), 0o755))

	fb, err := filebrowser.New(vol)
	require.NoError(t, err)
	t.Cleanup(func() { _ = fb.Close() })
	rc, err := claimauth.RESTClient(&rest.Config{Host: env.RESTConfig().Host, TLSClientConfig: rest.TLSClientConfig{CAFile: env.CAFile()}})
	require.NoError(t, err)
	gate, err := claimauth.New(claimauth.Claim{Namespace: ns, Name: "data"}, claimauth.SelfReviewer{Client: rc}, claimauth.Options{})
	require.NoError(t, err)
	reader := serviceAccountToken(t, ns, "reader")
	// submit stands in for the user pasting the token into the sign-in
	// form: a page of the accessor's origin that POSTs that form on load
	// (Chromium cannot type into a page from the command line).
	mux := http.NewServeMux()
	mux.Handle("/", gate.Wrap(fb))
	mux.HandleFunc("/submit", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = submitPage.Execute(w, struct{ Token, Next string }{reader, r.URL.Query().Get("next")})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	grantGetPVC(t, ns, "reader", ns, "reader", []string{"data"})

	profile := t.TempDir()
	browse := func(t *testing.T, extra ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// The virtual time budget lets the sign-in form's POST and its
		// redirect finish before the DOM is dumped.
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--virtual-time-budget=10000", "--user-data-dir=" + profile}, extra...)
		out, err := exec.CommandContext(ctx, chromium, args...).Output()
		require.NoError(t, err, "chromium %v", extra)
		return string(out)
	}
	// signIn opens next (a path under files/) through the sign-in form.
	signIn := func(t *testing.T, next string, extra ...string) string {
		t.Helper()
		u := srv.URL + "/submit?" + url.Values{"next": {next}}.Encode()
		return browse(t, append(extra, "--dump-dom", u)...)
	}

	t.Run("without signing in", func(t *testing.T) {
		dom := browse(t, "--dump-dom", srv.URL+"/files/")
		assert.Contains(t, dom, "sign in a browser at /login")
		assert.NotContains(t, dom, "big.bin")
	})
	t.Run("a token link does not sign in", func(t *testing.T) {
		dom := browse(t, "--dump-dom", srv.URL+"/login?"+url.Values{"token": {reader}, "next": {"files/"}}.Encode())
		assert.Contains(t, dom, "a token in the URL is refused")
		assert.Contains(t, dom, `<form method="post" action="login">`)
		assert.NotContains(t, dom, "big.bin")
	})

	var page2 string
	t.Run("first page", func(t *testing.T) {
		dom := signIn(t, "files/?limit=2")
		assert.Equal(t, []string{"a:b.txt", "big.bin"}, names(dom))
		assert.Contains(t, dom, `href="./a:b.txt"`, "a name with a colon is a relative link, not a scheme (html/template made it #ZgotmplZ)")
		assert.Regexp(t, `title="1572864 bytes">1.5 MiB<`, dom)
		assert.Contains(t, dom, `<time datetime="2026-11-28T20:00:00Z">2026-11-28 20:00:00 UTC</time>`)
		assert.NotContains(t, dom, `id="prev"`, "no page before the first")
		page2 = link(t, dom, "next")
	})
	t.Run("next page, screenshot", func(t *testing.T) {
		dom := signIn(t, "files/"+page2)
		assert.Equal(t, []string{"c.txt", "d.txt"}, names(dom))
		assert.Contains(t, dom, `>2.0 KiB<`)
		prev := link(t, dom, "prev")
		assert.Contains(t, prev, "before=")
		link(t, dom, "next")
		back := signIn(t, "files/"+prev)
		assert.Equal(t, []string{"a:b.txt", "big.bin"}, names(back), "previous page")

		shot := filepath.Join(t.ArtifactDir(), "accessor.png")
		signIn(t, "files/"+page2, "--window-size=1000,500", "--screenshot="+shot)
		info, err := os.Stat(shot)
		require.NoError(t, err, "screenshot")
		assert.Positive(t, info.Size())
		t.Logf("screenshot: %s", shot)
	})
	t.Run("last page and the folder archive link", func(t *testing.T) {
		dom := signIn(t, "files/?limit=2&continue="+url.QueryEscape(encodeName("d.txt")))
		assert.Equal(t, []string{"sub"}, names(dom))
		assert.NotContains(t, dom, `id="next"`)
		assert.Contains(t, dom, `href="../archive/"`)
	})
	t.Run("the cookie", func(t *testing.T) {
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/login", strings.NewReader(url.Values{"token": {reader}, "next": {"https://evil.example/"}}.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", srv.URL)
		resp, err := c.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
		assert.Equal(t, "files/", resp.Header.Get("Location"), "no open redirect")
		cookie := resp.Header.Get("Set-Cookie")
		assert.Contains(t, cookie, "HttpOnly")
		assert.Contains(t, cookie, "SameSite=Strict")
		assert.True(t, strings.HasPrefix(cookie, gate.CookieName()+"="), cookie)
		assert.NotContains(t, cookie, reader, "the cookie holds a session ID, not the token")
		assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
		assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	})
}

// submitPage POSTs the accessor's sign-in form on load.
var submitPage = template.Must(template.New("submit").Parse(`<!DOCTYPE html>
<html><body onload="document.forms[0].submit()">
<form method="post" action="login"><input type="hidden" name="token" value="{{.Token}}"><input type="hidden" name="next" value="{{.Next}}"></form>
</body></html>
`))

var entryName = regexp.MustCompile(`<tr class="entry"><td class="name"><a href="[^"]*">([^<]*?)/?</a>`)

// names are the listed entries of a dumped page, in order.
func names(dom string) []string {
	var out []string
	for _, m := range entryName.FindAllStringSubmatch(dom, -1) {
		out = append(out, m[1])
	}
	return out
}

// link is the href of the element with id, unescaped from HTML.
func link(t *testing.T, dom, id string) string {
	t.Helper()
	m := regexp.MustCompile(`id="` + id + `" href="([^"]*)"`).FindStringSubmatch(dom)
	require.NotNil(t, m, "no %s link in\n%s", id, dom)
	return strings.ReplaceAll(m[1], "&amp;", "&")
}

// encodeName is the accessor's page token for name (opaque to clients;
// the test builds one to start on the last page).
func encodeName(name string) string { return base64.RawURLEncoding.EncodeToString([]byte(name)) }
