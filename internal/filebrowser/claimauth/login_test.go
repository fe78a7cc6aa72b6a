package claimauth

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLogin: the sign-in checks its token like a request, sets the cookie
// only for an accepted one, refuses a POST from another site and any next
// that leaves the accessor; the cookie then stands in for the header.
func TestLogin(t *testing.T) {
	rev := &fakeReviewer{tokens: map[string]bool{"reader": true, "reader-of-b": false}}
	g, err := New(Claim{Namespace: "team", Name: "data"}, rev, Options{})
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("served")) })
	h := g.Wrap(ok)

	form := func(token, next string, header map[string]string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}, "next": {next}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range header {
			r.Header.Set(k, v)
		}
		return r
	}
	tests := []struct {
		name     string
		req      *http.Request
		status   int
		location string
		cookie   bool
		body     string
	}{
		{"form", httptest.NewRequest(http.MethodGet, "/login", nil), 200, "", false, `<input type="password" name="token"`},
		{"link", httptest.NewRequest(http.MethodGet, "/login?token=reader&next=files/a/%3Flimit=2", nil), 303, "files/a/?limit=2", true, ""},
		{"post", form("reader", "archive/a", map[string]string{"Sec-Fetch-Site": "same-origin"}), 303, "archive/a", true, ""},
		{"post, no fetch metadata, same Origin", form("reader", "", map[string]string{"Origin": "http://example.com"}), 303, "files/", true, ""},
		{"post from another site", form("reader", "", map[string]string{"Sec-Fetch-Site": "cross-site"}), 403, "", false, "another origin"},
		{"post from another Origin", form("reader", "", map[string]string{"Origin": "https://evil.example"}), 403, "", false, "another origin"},
		{"refused token", httptest.NewRequest(http.MethodGet, "/login?token=reader-of-b", nil), 403, "", false, "cannot get persistentvolumeclaims"},
		{"unknown token", httptest.NewRequest(http.MethodGet, "/login?token=forged", nil), 401, "", false, "not accepted"},
		{"absolute next", httptest.NewRequest(http.MethodGet, "/login?token=reader&next=https://evil.example/", nil), 303, "files/", true, ""},
		{"scheme-relative next", httptest.NewRequest(http.MethodGet, "/login?token=reader&next=//evil.example/files/", nil), 303, "files/", true, ""},
		{"next with ..", httptest.NewRequest(http.MethodGet, "/login?token=reader&next=files/../../x", nil), 303, "files/", true, ""},
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
			cookies := rec.Result().Cookies()
			if !tt.cookie {
				assert.Empty(t, cookies)
				return
			}
			require.Len(t, cookies, 1)
			c := cookies[0]
			assert.Equal(t, CookieName, c.Name)
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
