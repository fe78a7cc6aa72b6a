package claimauth

import (
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/runplane/runplane/internal/refusal"
)

// Browser sign-in. A browser cannot add an Authorization header to the
// links it follows, so /login takes a token once (pasted into its form, or
// as ?token= in a link from kubectl, see controllers/README.md), checks it
// like any request, and keeps it in a cookie the gate then reads:
// HttpOnly (no script reads it), SameSite=Strict (no other site's page can
// make the browser send it), Path=/ of this accessor, no Max-Age (gone
// when the browser closes; the token's own expiry ends it sooner), Secure
// when served over TLS. The accessor only reads, so no request it serves
// changes state a forged cross-site request could abuse; the sign-in POST
// itself is refused from another origin.
const (
	// CookieName is the cookie holding a signed-in browser's token.
	CookieName = "runplane-accessor-token"
	// LoginPath is the sign-in page, served without a token.
	LoginPath = "/login"
)

// tokenOf is the request's token: the Authorization header when present
// (malformed: none), else the sign-in cookie.
func tokenOf(r *http.Request) (string, bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		return bearer(h)
	}
	if c, err := r.Cookie(CookieName); err == nil && c.Value != "" {
		return c.Value, true
	}
	return "", false
}

var loginPage = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>sign in</title></head>
<body><h1>{{.Claim}}</h1>
{{if .Error}}<p id="error" role="alert">{{.Error}}</p>{{end}}
<form method="post" action="login">
<p><label>Kubernetes token of a user or ServiceAccount that may get this PVC
(<code>kubectl create token &lt;sa&gt; --duration=10m</code>):<br>
<input type="password" name="token" autocomplete="off" size="60" required></label></p>
<input type="hidden" name="next" value="{{.Next}}">
<p><button type="submit">sign in</button></p>
</form></body></html>
`))

// login serves LoginPath: GET shows the form (or, with ?token=, signs in),
// POST signs in; a sign-in that passes Check sets the cookie and sends the
// browser to next (a path under files/ or archive/ of this accessor,
// relative so it also works behind a proxy's path prefix).
func (g *Gate) login(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	var token, next string
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		q := r.URL.Query()
		token, next = q.Get("token"), q.Get("next")
	case http.MethodPost:
		if !sameOrigin(r) {
			http.Error(w, "sign-in from another origin refused", http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
		if err := r.ParseForm(); err != nil {
			http.Error(w, "sign-in form: "+err.Error(), http.StatusBadRequest)
			return
		}
		token, next = strings.TrimSpace(r.PostForm.Get("token")), r.PostForm.Get("next")
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method "+r.Method+" not allowed on "+LoginPath+": use GET or POST", http.StatusMethodNotAllowed)
		return
	}
	next = safeNext(next)
	if token == "" {
		g.loginForm(w, http.StatusOK, next, "")
		return
	}
	// Check the token as a request bearing it would be.
	probe := r.Clone(r.Context())
	probe.Header.Set("Authorization", "Bearer "+token)
	err := g.Check(probe)
	ref, refused := errors.AsType[*refusal.Error](err)
	switch {
	case refused:
		g.loginForm(w, ref.Status, next, ref.Error())
		return
	case err != nil:
		w.Header().Set("Retry-After", "5")
		g.loginForm(w, http.StatusServiceUnavailable, next, "cannot authorize now: "+err.Error())
		return
	}
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: token, Path: "/", HttpOnly: true,
		Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	// Location as is (relative): http.Redirect would make it an absolute
	// path, which loses a proxy's path prefix.
	w.Header().Set("Location", next)
	w.WriteHeader(http.StatusSeeOther)
}

func (g *Gate) loginForm(w http.ResponseWriter, status int, next, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = loginPage.Execute(w, struct{ Claim, Next, Error string }{g.claim.String(), next, msg})
}

// safeNext keeps next only when it is a relative path into this
// accessor's files or archives (no scheme, host or "..": not an open
// redirect).
func safeNext(next string) string {
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.Contains(u.Path, "..") ||
		!(strings.HasPrefix(u.Path, "files/") || strings.HasPrefix(u.Path, "archive/")) {
		return "files/"
	}
	return u.String()
}

// sameOrigin: the browser says the POST comes from this accessor's own
// page (Sec-Fetch-Site, else Origin); a client that sends neither is no
// browser page of another site.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		return s == "same-origin" || s == "none"
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}
