package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/auth"
)

// CookieName is the panel's login cookie.
const CookieName = "tabcast_login"

// AuthOptions configure who may use the API and the panel.
type AuthOptions struct {
	// None turns authentication off (loopback binds only, checked by the
	// config): every caller is the admin "local".
	None   bool
	Logins *access.Logins
	Tokens *access.Tokens
	// Plugin returns the auth plugin's current client.
	Plugin func(ctx context.Context) (auth.Authenticator, error)
	// Secure marks the cookie Secure (the panel is served over HTTPS).
	Secure bool
	Audit  *audit.Log
	// LoginMax is the cookie's Max-Age (the login's absolute expiry).
	LoginMax time.Duration
	// Guard holds the live connections and ends them when access is
	// withdrawn; nil: New makes one over Tokens and Logins (it then sees
	// other processes' changes at each request only).
	Guard *access.Guard
}

// localPrincipal is the caller when authentication is off.
var localPrincipal = access.Principal{User: "local", Role: access.RoleAdmin, Method: access.MethodNone}

// publicPath reports what needs no login: health, the login call and the
// panel's static files (they hold no data; the data is behind the API).
func publicPath(r *http.Request) bool {
	p := r.URL.Path
	switch {
	case p == "/healthz" || p == "/readyz":
		return true
	case p == "/api/v1/auth/login" && r.Method == http.MethodPost:
		return true
	case strings.HasPrefix(p, "/api/") || p == "/metrics" || p == "/mcp":
		return false
	}
	return r.Method == http.MethodGet || r.Method == http.MethodHead
}

// authenticate finds the principal of r and checks CSRF and Origin for
// cookie logins. ok is false when it has written the refusal.
func (a *api) authenticate(w http.ResponseWriter, r *http.Request) (access.Principal, bool) {
	o := a.o.Auth
	if o.None {
		return localPrincipal, true
	}
	// What other processes changed (a token revoked, a user deleted or
	// their password set on the CLI) counts from this request on, not from
	// the guard's next round.
	o.Guard.Refresh()
	if h := r.Header.Get("Authorization"); h != "" {
		tok, ok := strings.CutPrefix(h, "Bearer ")
		if !ok {
			writeError(w, errcode.New(errcode.PermissionDenied, "Authorization must be a Bearer token"))
			return access.Principal{}, false
		}
		p, err := o.Tokens.Verify(strings.TrimSpace(tok))
		if err == nil {
			// The token's user must still exist, with its current role.
			p, err = o.Guard.Current(p)
		}
		if err != nil {
			msg := "invalid token"
			if errors.Is(err, access.ErrTokenExpired) {
				msg = "token expired"
			}
			writeError(w, errcode.New(errcode.PermissionDenied, msg).WithHint("create a token in the panel or with `tabcast tokens create`"))
			return access.Principal{}, false
		}
		return p, true
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		writeError(w, errcode.New(errcode.PermissionDenied, "log in first").WithHint("POST /api/v1/auth/login or send a Bearer token"))
		return access.Principal{}, false
	}
	p, ok := o.Logins.Lookup(c.Value)
	if ok {
		var err error
		p, err = o.Guard.Current(p)
		ok = err == nil
	}
	if !ok {
		clearCookie(w, o.Secure)
		writeError(w, errcode.New(errcode.PermissionDenied, "the login expired or is not valid").WithHint("log in again"))
		return access.Principal{}, false
	}
	// A cookie rides along with any request the browser makes: state changes
	// must prove they come from the panel itself.
	if !sameOrigin(r) {
		writeError(w, errcode.New(errcode.OriginDenied, "request from another origin"))
		return access.Principal{}, false
	}
	if unsafeMethod(r.Method) {
		got := r.Header.Get("X-CSRF-Token")
		if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(p.CSRF)) != 1 {
			writeError(w, errcode.New(errcode.CSRF, "missing or wrong X-CSRF-Token").WithHint("read it from GET /api/v1/auth/me"))
			return access.Principal{}, false
		}
	}
	return p, true
}

func unsafeMethod(m string) bool {
	return m != http.MethodGet && m != http.MethodHead && m != http.MethodOptions
}

// sameOrigin: a browser's Origin (sent on POSTs and WebSocket upgrades)
// must be this server's: same scheme, host and port. No Origin means a
// same-origin GET or a non-browser client, which cannot ride on a
// victim's cookie.
func sameOrigin(r *http.Request) bool {
	o := r.Header.Get("Origin")
	if o == "" {
		return !strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site")
	}
	u, err := url.Parse(o)
	if err != nil || u.Host == "" || u.Path != "" || u.User != nil {
		return false
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	if !strings.EqualFold(u.Scheme, scheme) {
		return false
	}
	oh, op := splitHostPort(u.Host, scheme)
	rh, rp := splitHostPort(r.Host, scheme)
	return oh != "" && strings.EqualFold(oh, rh) && op == rp
}

// splitHostPort splits a Host header or an origin's host into a host (no
// brackets) and a port, the scheme's default when none is written.
func splitHostPort(hostport, scheme string) (host, port string) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	if port == "" {
		port = "80"
		if scheme == "https" {
			port = "443"
		}
	}
	return host, port
}

// localRequest is the check of auth.mode none, where every caller is the
// admin: the request must name a loopback host (a page on a rebinding DNS
// name that resolves to 127.0.0.1 names its own host) and, from a browser,
// come from this origin. ok is false when it has written the refusal.
func localRequest(w http.ResponseWriter, r *http.Request) bool {
	host, _ := splitHostPort(r.Host, "http")
	ip := net.ParseIP(host)
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if !(ip != nil && ip.IsLoopback()) && h != "localhost" && !strings.HasSuffix(h, ".localhost") {
		writeError(w, errcode.New(errcode.HostDenied, "with auth.mode none the appliance answers only to a loopback host name or address").WithHint("open it as http://127.0.0.1:PORT or http://localhost:PORT"))
		return false
	}
	if !sameOrigin(r) {
		writeError(w, errcode.New(errcode.OriginDenied, "request from another origin"))
		return false
	}
	return true
}

// withAuth guards every non-public path and puts the principal in the
// request context.
func (a *api) withAuth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Without authentication, the host check is all that keeps a web
		// page from driving the appliance: it covers every path.
		if a.o.Auth.None && !localRequest(w, r) {
			return
		}
		if publicPath(r) {
			next.ServeHTTP(w, r)
			return
		}
		// A CDP ticket stands for the principal who made it: the one
		// credential a client that only takes a URL can carry.
		if id, secret, ok := cdpTicketRequest(r); ok {
			p, ok := a.ticketPrincipal(w, r, id, secret)
			if ok {
				next.ServeHTTP(w, r.WithContext(access.WithPrincipal(r.Context(), p)))
			}
			return
		}
		p, ok := a.authenticate(w, r)
		if !ok {
			return
		}
		if p.MustChangePassword {
			switch r.URL.Path {
			case "/api/v1/auth/me", "/api/v1/auth/password", "/api/v1/auth/logout":
			default:
				writeError(w, errcode.New(errcode.PasswordChangeRequired, "change your password first").WithHint("POST /api/v1/auth/password").WithRecoverable(true))
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(access.WithPrincipal(r.Context(), p)))
	})
}

func principal(r *http.Request) access.Principal {
	p, _ := access.FromContext(r.Context())
	return p
}

// require writes 403 unless the principal holds scope.
func require(w http.ResponseWriter, r *http.Request, scope string) bool {
	if principal(r).Has(scope) {
		return true
	}
	writeError(w, errcode.New(errcode.Forbidden, "your role or token does not allow this ("+scope+")"))
	return false
}

func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func (a *api) audit(r *http.Request, rec audit.Record) {
	if rec.User == "" {
		rec.User = principal(r).User
	}
	if rec.Source == "" {
		rec.Source = sourceIP(r)
	}
	if err := a.o.Auth.Audit.Add(rec); err != nil {
		a.o.Logger.Warn("audit log write failed", "err", err)
	}
}

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

func (a *api) login(w http.ResponseWriter, r *http.Request) {
	o := a.o.Auth
	if o.None {
		writeJSON(w, http.StatusOK, a.me(localPrincipal))
		return
	}
	var req loginRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !sameOrigin(r) {
		writeError(w, errcode.New(errcode.OriginDenied, "request from another origin"))
		return
	}
	if req.Username == "" || req.Password == "" || len(req.Username) > 128 || len(req.Password) > 1024 {
		writeError(w, errcode.New(errcode.InvalidArgument, "username and password are required"))
		return
	}
	res, ok := a.callAuth(w, r, func(ctx context.Context, pl auth.Authenticator) (auth.Result, error) {
		return pl.Authenticate(ctx, auth.Request{Username: req.Username, Password: []byte(req.Password), SourceIP: sourceIP(r)})
	})
	if !ok {
		return
	}
	role, known := access.Highest(res.Roles)
	if !res.OK || !known {
		a.refuseLogin(w, r, res, "login")
		return
	}
	p := access.Principal{User: res.UserID, Role: role, MustChangePassword: res.MustChangePassword}
	// The login remembers the user's password as the directory has it
	// now: a password set just before must not end it at the next round.
	o.Guard.Refresh()
	cookie, _ := o.Logins.Create(p)
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: cookie, Path: "/", HttpOnly: true, Secure: o.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(o.LoginMax / time.Second),
	})
	p, _ = o.Logins.Lookup(cookie)
	a.audit(r, audit.Record{Action: "login", User: p.User, Outcome: audit.OK, Detail: string(p.Role)})
	writeJSON(w, http.StatusOK, a.me(p))
}

// refuseLogin answers a failed login or password check the same way for an
// unknown user and a wrong password.
func (a *api) refuseLogin(w http.ResponseWriter, r *http.Request, res auth.Result, action string) {
	// The name typed may be a password typed into the wrong field: the
	// audit record of a failure keeps no user name.
	a.audit(r, audit.Record{Action: action, User: "-", Outcome: audit.Denied, Code: res.ErrorCode})
	switch res.ErrorCode {
	case auth.CodeRateLimited:
		secs := int((res.RetryAfter + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(max(secs, 1)))
		writeError(w, errcode.New(errcode.RateLimited, "too many failed attempts; try again later"))
	case auth.CodeWeakPassword:
		writeError(w, errcode.New(errcode.WeakPassword, "the new password is too weak (at least 12 characters, not the old one)"))
	default:
		writeError(w, errcode.New(errcode.InvalidCredentials, "wrong user name or password"))
	}
}

func (a *api) callAuth(w http.ResponseWriter, r *http.Request, fn func(context.Context, auth.Authenticator) (auth.Result, error)) (auth.Result, bool) {
	ctx, cancel := context.WithTimeout(r.Context(), 15*time.Second)
	defer cancel()
	pl, err := a.o.Auth.Plugin(ctx)
	var res auth.Result
	if err == nil {
		res, err = fn(ctx, pl)
	}
	if err != nil {
		a.o.Logger.Warn("auth plugin call failed", "err", err)
		writeError(w, errcode.New(errcode.AuthUnavailable, "the auth plugin is not available").WithHint("check `tabcast doctor`"))
		return res, false
	}
	return res, true
}

func (a *api) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(CookieName); err == nil && a.o.Auth.Logins != nil {
		a.o.Auth.Logins.Revoke(c.Value)
		// What the login had open (viewers, agent calls) ends with it.
		a.o.Auth.Guard.Recheck()
	}
	clearCookie(w, a.o.Auth.Secure)
	a.audit(r, audit.Record{Action: "logout", Outcome: audit.OK})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func clearCookie(w http.ResponseWriter, secure bool) {
	http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/", HttpOnly: true, Secure: secure, SameSite: http.SameSiteStrictMode, MaxAge: -1})
}

func (a *api) me(p access.Principal) map[string]any {
	scopes := p.Scopes
	if p.Method != access.MethodToken {
		scopes = []string{}
		for _, s := range access.AllScopes {
			if p.Has(s) {
				scopes = append(scopes, s)
			}
		}
	}
	out := map[string]any{"ok": true, "user": p.User, "role": p.Role, "method": p.Method, "scopes": scopes, "mustChangePassword": p.MustChangePassword}
	if p.Method == access.MethodCookie {
		out["csrf"] = p.CSRF
	}
	return out
}

func (a *api) whoami(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, a.me(principal(r)))
}

type passwordRequest struct {
	Old string `json:"oldPassword"`
	New string `json:"newPassword"`
}

func (a *api) changePassword(w http.ResponseWriter, r *http.Request) {
	p := principal(r)
	if p.Method != access.MethodCookie {
		writeError(w, errcode.New(errcode.Forbidden, "only a logged-in user changes their password"))
		return
	}
	var req passwordRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Old == "" || req.New == "" || len(req.Old) > 1024 || len(req.New) > 1024 {
		writeError(w, errcode.New(errcode.InvalidArgument, "oldPassword and newPassword are required"))
		return
	}
	c, err := r.Cookie(CookieName)
	if err != nil {
		writeError(w, errcode.New(errcode.PermissionDenied, "log in first"))
		return
	}
	o := a.o.Auth
	// The guard is about to read the new password from the directory,
	// which ends the user's logins: not this one.
	done := o.Guard.KeepLogin(p)
	defer done()
	res, ok := a.callAuth(w, r, func(ctx context.Context, pl auth.Authenticator) (auth.Result, error) {
		return pl.ChangePassword(ctx, auth.ChangeRequest{Username: p.User, OldPassword: []byte(req.Old), NewPassword: []byte(req.New), SourceIP: sourceIP(r)})
	})
	if !ok {
		return
	}
	if !res.OK {
		a.refuseLogin(w, r, res, "password.change")
		return
	}
	// Every other login of the user ends, with its live connections (also
	// without a directory that shows the change); this one continues,
	// unlocked, under a new cookie (the old value stops working).
	o.Guard.Refresh()
	cookie, np, rotated := o.Logins.Rotate(c.Value, func(p *access.Principal) { p.MustChangePassword = false })
	o.Logins.RevokeOthers(p)
	o.Guard.Recheck()
	if !rotated {
		// Ended meanwhile (logged out, expired): the password is changed.
		clearCookie(w, o.Secure)
		a.audit(r, audit.Record{Action: "password.change", Outcome: audit.OK})
		writeError(w, errcode.New(errcode.PermissionDenied, "password changed; log in again"))
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: CookieName, Value: cookie, Path: "/", HttpOnly: true, Secure: o.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(o.LoginMax / time.Second),
	})
	a.audit(r, audit.Record{Action: "password.change", Outcome: audit.OK})
	writeJSON(w, http.StatusOK, a.me(np))
}
