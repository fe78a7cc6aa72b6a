package claimauth

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clocktesting "k8s.io/utils/clock/testing"
)

// signInForm is a same-origin POST of the sign-in form.
func signInForm(token, next string, header map[string]string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}, "next": {next}}.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		r.Header.Set(k, v)
	}
	return r
}

var sameSite = map[string]string{"Sec-Fetch-Site": "same-origin"}

// TestLogin: the sign-in checks its token like a request, sets the cookie
// only for an accepted one, refuses a POST from another site, a token in
// the URL and any next that leaves the accessor; the cookie then stands in
// for the header.
func TestLogin(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"reader": true, "reader-of-b": false}}
	g, err := New(Claim{Namespace: "team", Name: "data"}, rev, Options{})
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	h := g.Wrap(ok)

	tests := []struct {
		name     string
		req      *http.Request
		status   int
		location string
		cookie   bool
		body     string
	}{
		{"form", httptest.NewRequest(http.MethodGet, "/login", nil), 200, "", false, `<input type="password" name="token"`},
		{"token in the URL", httptest.NewRequest(http.MethodGet, "/login?token=reader&next=files/a/", nil), 400, "", false, "a token in the URL is refused"},
		{"post", signInForm("reader", "archive/a", sameSite), 303, "archive/a", true, ""},
		{"post, query in next", signInForm("reader", "files/a/?limit=2", sameSite), 303, "files/a/?limit=2", true, ""},
		{"post, no fetch metadata, same Origin", signInForm("reader", "", map[string]string{"Origin": "http://example.com"}), 303, "files/", true, ""},
		{"post from another site", signInForm("reader", "", map[string]string{"Sec-Fetch-Site": "cross-site"}), 403, "", false, "another origin"},
		{"post from a sibling port", signInForm("reader", "", map[string]string{"Sec-Fetch-Site": "same-site"}), 403, "", false, "another origin"},
		{"post from another Origin", signInForm("reader", "", map[string]string{"Origin": "https://evil.example"}), 403, "", false, "another origin"},
		{"refused token", signInForm("reader-of-b", "", sameSite), 403, "", false, "cannot get persistentvolumeclaims"},
		{"unknown token", signInForm("forged", "", sameSite), 401, "", false, "not accepted"},
		{"absolute next", signInForm("reader", "https://evil.example/", sameSite), 303, "files/", true, ""},
		{"scheme-relative next", signInForm("reader", "//evil.example/files/", sameSite), 303, "files/", true, ""},
		{"next with ..", signInForm("reader", "files/../../x", sameSite), 303, "files/", true, ""},
		{"method", httptest.NewRequest(http.MethodDelete, "/login", nil), 405, "", false, "use GET or POST"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			assert.Equal(t, tt.status, rec.Code, rec.Body.String())
			assert.Equal(t, tt.location, rec.Header().Get("Location"))
			assert.Contains(t, rec.Body.String(), tt.body)
			assert.Equal(t, "no-referrer", rec.Header().Get("Referrer-Policy"))
			assert.Equal(t, "no-store", rec.Header().Get("Cache-Control"))
			cookies := rec.Result().Cookies()
			if !tt.cookie {
				assert.Empty(t, cookies)
				return
			}
			require.Len(t, cookies, 1)
			c := cookies[0]
			assert.Equal(t, g.CookieName(), c.Name)
			assert.True(t, c.HttpOnly)
			assert.Equal(t, http.SameSiteStrictMode, c.SameSite)
			assert.Zero(t, c.MaxAge, "a session cookie")

			// The cookie now opens the files; a malformed header still does not.
			r := httptest.NewRequest(http.MethodGet, "/files/", nil)
			r.AddCookie(c)
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			assert.Equal(t, "served", rec.Body.String())
			r.Header.Set("Authorization", "Basic eA==")
			rec = httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			assert.Equal(t, http.StatusUnauthorized, rec.Code)
		})
	}
}

// TestSessionCookie: the cookie carries a random session ID, not the
// token (a port-forwarded app on the same localhost that receives it learns
// no credential), named per claim, and a stolen value opens nothing once
// the session ended: signed out, at the token's exp, after an hour at most.
func TestSessionCookie(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	shortJWT := "e30." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1000600}`)) + ".sig" // 10 min
	longJWT := "e30." + base64.RawURLEncoding.EncodeToString([]byte(`{"exp":1086400}`)) + ".sig"  // 1 day
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })

	signIn := func(t *testing.T, h http.Handler, token string) *http.Cookie {
		t.Helper()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, signInForm(token, "", sameSite))
		require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
		cookies := rec.Result().Cookies()
		require.Len(t, cookies, 1)
		return cookies[0]
	}
	get := func(h http.Handler, c *http.Cookie) int {
		r := httptest.NewRequest(http.MethodGet, "/files/", nil)
		r.AddCookie(c)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		return rec.Code
	}
	tests := []struct {
		name  string
		token string
		// end ends the session: steps the clock or signs out.
		end func(t *testing.T, clk *clocktesting.FakeClock, h http.Handler, c *http.Cookie)
	}{
		{"signed out", "reader", func(t *testing.T, _ *clocktesting.FakeClock, h http.Handler, c *http.Cookie) {
			r := httptest.NewRequest(http.MethodPost, LogoutPath, nil)
			r.Header.Set("Sec-Fetch-Site", "same-origin")
			r.AddCookie(c)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, r)
			require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
			assert.Equal(t, "login", rec.Header().Get("Location"))
			cleared := rec.Result().Cookies()
			require.Len(t, cleared, 1)
			assert.Equal(t, c.Name, cleared[0].Name)
			assert.Negative(t, cleared[0].MaxAge, "the browser drops the cookie")
		}},
		{"token's exp", shortJWT, func(_ *testing.T, clk *clocktesting.FakeClock, _ http.Handler, _ *http.Cookie) {
			clk.Step(10*time.Minute + time.Second)
		}},
		{"an hour", longJWT, func(_ *testing.T, clk *clocktesting.FakeClock, _ http.Handler, _ *http.Cookie) {
			clk.Step(time.Hour + time.Second)
		}},
		{"an hour, not a JWT", "reader", func(_ *testing.T, clk *clocktesting.FakeClock, _ http.Handler, _ *http.Cookie) {
			clk.Step(time.Hour + time.Second)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clocktesting.NewFakeClock(start)
			// The reviewer still accepts the token: only the session ends.
			rev := &fakeReviewer{tokens: map[string]bool{tt.token: true}}
			g, err := New(Claim{Namespace: "team", Name: "data"}, rev, Options{Clock: clk})
			require.NoError(t, err)
			h := g.Wrap(ok)

			c := signIn(t, h, tt.token)
			assert.NotContains(t, c.Value, tt.token, "the cookie holds no token")
			raw, err := base64.RawURLEncoding.DecodeString(c.Value)
			require.NoError(t, err, "a base64url session ID")
			assert.Len(t, raw, 32)
			assert.NotEqual(t, c.Value, signIn(t, h, tt.token).Value, "a new ID per sign-in")
			require.Equal(t, http.StatusOK, get(h, c))

			// A stolen copy of the cookie, replayed after the session ended.
			stolen := &http.Cookie{Name: c.Name, Value: c.Value}
			clk.Step(time.Second)
			tt.end(t, clk, h, c)
			assert.Equal(t, http.StatusUnauthorized, get(h, stolen))
			// The token itself still works as a header: the session, not it, ended.
			if tt.name == "signed out" {
				assert.Equal(t, http.StatusOK, serve(g, "Bearer "+tt.token).Code)
			}
		})
	}
}

// TestCookiePerClaim: two accessors on one localhost (ports the browser
// does not tell apart) keep two cookies, and one's session opens nothing
// of the other.
func TestCookiePerClaim(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"reader": true}}
	a, err := New(Claim{Namespace: "team", Name: "data"}, rev, Options{})
	require.NoError(t, err)
	b, err := New(Claim{Namespace: "team", Name: "models"}, rev, Options{})
	require.NoError(t, err)
	assert.NotEqual(t, a.CookieName(), b.CookieName())
	assert.Regexp(t, `^runplane-accessor-[0-9a-f]{8}$`, a.CookieName())

	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	rec := httptest.NewRecorder()
	a.Wrap(ok).ServeHTTP(rec, signInForm("reader", "", sameSite))
	require.Equal(t, http.StatusSeeOther, rec.Code)
	c := rec.Result().Cookies()[0]
	r := httptest.NewRequest(http.MethodGet, "/files/", nil)
	r.AddCookie(&http.Cookie{Name: b.CookieName(), Value: c.Value})
	rec = httptest.NewRecorder()
	b.Wrap(ok).ServeHTTP(rec, r)
	assert.Equal(t, http.StatusUnauthorized, rec.Code, "a's session ID means nothing to b")
}

// TestLogoutMethods: sign-out is a same-origin POST only.
func TestLogoutMethods(t *testing.T) {
	g, err := New(claim, &fakeReviewer{}, Options{})
	require.NoError(t, err)
	h := g.Wrap(http.NotFoundHandler())
	for _, tt := range []struct {
		name   string
		req    *http.Request
		header map[string]string
		status int
	}{
		{"get", httptest.NewRequest(http.MethodGet, LogoutPath, nil), nil, 405},
		{"post from another site", httptest.NewRequest(http.MethodPost, LogoutPath, nil), map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
		{"post, no session", httptest.NewRequest(http.MethodPost, LogoutPath, nil), sameSite, 303},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.header {
				tt.req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, tt.req)
			assert.Equal(t, tt.status, rec.Code, rec.Body.String())
		})
	}
}
