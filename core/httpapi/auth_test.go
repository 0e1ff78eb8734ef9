package httpapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/auth"
	"github.com/tabcast/tabcast/plugins/base"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// stubDir is the users directory as a test edits it.
type stubDir struct {
	mu      sync.Mutex
	users   map[string]access.UserRecord
	changed bool
}

func (d *stubDir) Users() (map[string]access.UserRecord, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.changed {
		return nil, false, nil
	}
	d.changed = false
	out := map[string]access.UserRecord{}
	for k, v := range d.users {
		out[k] = v
	}
	return out, true, nil
}

func (d *stubDir) set(name string, u access.UserRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users[name], d.changed = u, true
}

func (d *stubDir) del(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.users, name)
	d.changed = true
}

// stubAuth is an auth plugin over stubDir: a password per user; changing it
// changes the user's credential, as auth-local's file does.
type stubAuth struct {
	base.Plugin // not called
	dir         *stubDir
	mu          sync.Mutex
	passwords   map[string]string
	n           int
}

func (a *stubAuth) Authenticate(_ context.Context, r auth.Request) (auth.Result, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.dir.mu.Lock()
	u, ok := a.dir.users[r.Username]
	a.dir.mu.Unlock()
	if !ok || a.passwords[r.Username] != string(r.Password) {
		return auth.Result{ErrorCode: auth.CodeInvalidCredentials}, nil
	}
	return auth.Result{OK: true, UserID: r.Username, Roles: []string{string(u.Role)}}, nil
}

func (a *stubAuth) ChangePassword(ctx context.Context, r auth.ChangeRequest) (auth.Result, error) {
	res, err := a.Authenticate(ctx, auth.Request{Username: r.Username, Password: r.OldPassword})
	if err != nil || !res.OK {
		return res, err
	}
	a.mu.Lock()
	a.passwords[r.Username] = string(r.NewPassword)
	a.n++
	cred := strings.Repeat("x", a.n)
	a.mu.Unlock()
	a.dir.mu.Lock()
	u := a.dir.users[r.Username]
	a.dir.mu.Unlock()
	a.dir.set(r.Username, access.UserRecord{Role: u.Role, Credential: cred})
	return res, nil
}

type authEnv struct {
	srv    *httptest.Server
	tokens *access.Tokens
	logins *access.Logins
	guard  *access.Guard
	dir    *stubDir
}

func newAuthEnv(t *testing.T) *authEnv {
	t.Helper()
	dir := t.TempDir()
	tokens, al := tokensAndAudit(t, dir)
	d := &stubDir{users: map[string]access.UserRecord{
		"ann": {Role: access.RoleOperator, Credential: "c"},
		"bob": {Role: access.RoleAdmin, Credential: "c"},
	}, changed: true}
	pl := &stubAuth{dir: d, passwords: map[string]string{"ann": "ann password 1", "bob": "bob password 1"}}
	logins := access.NewLogins(time.Hour, time.Hour)
	g := access.NewGuard(access.GuardOptions{Tokens: tokens, Logins: logins, Directory: d, Logger: quiet})
	srv := httptest.NewServer(New(Options{Logger: quiet, Status: func() any { return "up" }, Auth: AuthOptions{
		Tokens: tokens, Logins: logins, Guard: g, Audit: al, LoginMax: time.Hour,
		Plugin: func(context.Context) (auth.Authenticator, error) { return pl, nil },
	}}))
	t.Cleanup(srv.Close)
	return &authEnv{srv: srv, tokens: tokens, logins: logins, guard: g, dir: d}
}

type reply struct {
	status  int
	code    string
	csrf    string
	cookies []*http.Cookie
}

// call makes one request with a token ("tct_…"), a cookie value or
// neither, and the CSRF token for unsafe methods.
func (e *authEnv) call(t *testing.T, method, path, cred, csrf, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case strings.HasPrefix(cred, "tct_"):
		req.Header.Set("Authorization", "Bearer "+cred)
	case cred != "":
		req.AddCookie(&http.Cookie{Name: CookieName, Value: cred})
	}
	if csrf != "" {
		req.Header.Set("X-CSRF-Token", csrf)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		CSRF  string `json:"csrf"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return reply{status: resp.StatusCode, code: out.Error.Code, csrf: out.CSRF, cookies: resp.Cookies()}
}

func (e *authEnv) login(t *testing.T, user, password string) (cookie, csrf string) {
	t.Helper()
	r := e.call(t, "POST", "/api/v1/auth/login", "", "", `{"username":"`+user+`","password":"`+password+`"}`)
	if r.status != 200 {
		t.Fatalf("login %s: %d %s", user, r.status, r.code)
	}
	for _, c := range r.cookies {
		if c.Name == CookieName {
			return c.Value, r.csrf
		}
	}
	t.Fatal("no login cookie")
	return "", ""
}

// hold registers a live connection of the login or token cred, as the
// signaling socket does.
func (e *authEnv) hold(t *testing.T, cred string) *access.Grant {
	t.Helper()
	var p access.Principal
	var err error
	if strings.HasPrefix(cred, "tct_") {
		p, err = e.tokens.Verify(cred)
	} else if pp, ok := e.logins.Lookup(cred); ok {
		p = pp
	} else {
		t.Fatal("no such login")
	}
	if err != nil {
		t.Fatal(err)
	}
	gr := e.guard.Hold("test", p, access.LevelView, func(access.Principal) access.Level { return access.LevelOperate })
	t.Cleanup(gr.Release)
	return gr
}

// TestDeletedUserLosesAccess: once a user is deleted (another process
// edits the users file), their cookie no longer answers /auth/me and
// their token no longer works, at the very next request; a token for a
// user who does not exist is not made.
func TestDeletedUserLosesAccess(t *testing.T) {
	e := newAuthEnv(t)
	cookie, _ := e.login(t, "ann", "ann password 1")
	secret, _, err := e.tokens.Create("t", "ann", access.RoleOperator, []string{access.ScopeRead, access.ScopeControl}, 0)
	if err != nil {
		t.Fatal(err)
	}
	admin, _, _ := e.tokens.Create("a", "bob", access.RoleAdmin, access.AllScopes, 0)
	if r := e.call(t, "GET", "/api/v1/auth/me", cookie, "", ""); r.status != 200 {
		t.Fatalf("me: %d", r.status)
	}
	if r := e.call(t, "GET", "/api/v1/status", secret, "", ""); r.status != 200 {
		t.Fatalf("status with the token: %d", r.status)
	}
	gl, gt := e.hold(t, cookie), e.hold(t, secret)
	e.dir.del("ann")
	for _, cred := range []string{cookie, secret} {
		if r := e.call(t, "GET", "/api/v1/auth/me", cred, "", ""); r.status != 401 || r.code != errcode.PermissionDenied {
			t.Errorf("after deletion: %d %s", r.status, r.code)
		}
	}
	if !gl.Withdrawn() || !gt.Withdrawn() {
		t.Error("live connections of the deleted user go on")
	}
	if r := e.call(t, "POST", "/api/v1/tokens", admin, "", `{"name":"x","user":"ann","role":"operator"}`); r.status != 422 || r.code != errcode.InvalidArgument {
		t.Errorf("token for a deleted user: %d %s", r.status, r.code)
	}
	if r := e.call(t, "POST", "/api/v1/tokens", admin, "", `{"name":"x","user":"bob","role":"operator"}`); r.status != 201 {
		t.Errorf("token for bob: %d %s", r.status, r.code)
	}
}

// TestRevokeAndRoleOverREST: revoking a token through the API withdraws
// its live connections before the answer; a role lowered in the
// directory lowers what the user's cookie may do.
func TestRevokeAndRoleOverREST(t *testing.T) {
	e := newAuthEnv(t)
	admin, _, _ := e.tokens.Create("a", "bob", access.RoleAdmin, access.AllScopes, 0)
	secret, info, _ := e.tokens.Create("t", "ann", access.RoleOperator, []string{access.ScopeRead, access.ScopeControl}, 0)
	gr := e.hold(t, secret)
	if r := e.call(t, "DELETE", "/api/v1/tokens/"+info.ID, admin, "", ""); r.status != 200 {
		t.Fatalf("revoke: %d %s", r.status, r.code)
	}
	if !gr.Withdrawn() {
		t.Error("the revoked token's connection is live after the answer")
	}

	cookie, _ := e.login(t, "ann", "ann password 1")
	e.dir.set("ann", access.UserRecord{Role: access.RoleViewer, Credential: "c"})
	var me struct {
		Role   string   `json:"role"`
		Scopes []string `json:"scopes"`
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/auth/me", nil)
	req.AddCookie(&http.Cookie{Name: CookieName, Value: cookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if me.Role != "viewer" || strings.Contains(strings.Join(me.Scopes, ","), "control") {
		t.Errorf("after the downgrade: %+v", me)
	}
}

// TestPasswordChangeThroughAPI: the login that changed the password goes
// on under a new cookie (the old value stops working), with its live
// connections; every other login of the user ends with theirs; tokens
// stay. A later password set (the CLI) ends it too.
func TestPasswordChangeThroughAPI(t *testing.T) {
	e := newAuthEnv(t)
	ca, csrf := e.login(t, "ann", "ann password 1")
	cb, _ := e.login(t, "ann", "ann password 1")
	secret, _, _ := e.tokens.Create("t", "ann", access.RoleOperator, []string{access.ScopeRead}, 0)
	ga, gb, gt := e.hold(t, ca), e.hold(t, cb), e.hold(t, secret)
	r := e.call(t, "POST", "/api/v1/auth/password", ca, csrf, `{"oldPassword":"ann password 1","newPassword":"ann password 2"}`)
	if r.status != 200 {
		t.Fatalf("change: %d %s", r.status, r.code)
	}
	var nc string
	for _, c := range r.cookies {
		if c.Name == CookieName {
			nc = c.Value
		}
	}
	if nc == "" || nc == ca {
		t.Fatal("no new cookie")
	}
	for name, c := range map[string]struct {
		cred string
		want int
	}{"old cookie": {ca, 401}, "other login": {cb, 401}, "new cookie": {nc, 200}, "token": {secret, 200}} {
		if r := e.call(t, "GET", "/api/v1/auth/me", c.cred, "", ""); r.status != c.want {
			t.Errorf("%s: %d, want %d", name, r.status, c.want)
		}
	}
	if ga.Withdrawn() || !gb.Withdrawn() || gt.Withdrawn() {
		t.Errorf("withdrawn: changing login %v, other login %v, token %v", ga.Withdrawn(), gb.Withdrawn(), gt.Withdrawn())
	}
	// A password set elsewhere later ends the surviving login.
	e.dir.set("ann", access.UserRecord{Role: access.RoleOperator, Credential: "set by the CLI"})
	if r := e.call(t, "GET", "/api/v1/auth/me", nc, "", ""); r.status != 401 {
		t.Errorf("after a later set: %d", r.status)
	}
	if !ga.Withdrawn() {
		t.Error("its connection goes on")
	}
}

// TestAuthNone: with auth.mode none every caller is the local admin, but
// only under a loopback host name, from this origin; token calls answer a
// stable error instead of a nil dereference.
func TestAuthNone(t *testing.T) {
	al, err := audit.Open(filepath.Join(t.TempDir(), "audit.log"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	h := New(Options{Logger: quiet, Auth: AuthOptions{None: true, Audit: al}})
	do := func(method, path, host, origin string) (int, string) {
		req := httptest.NewRequest(method, "http://127.0.0.1:8080"+path, strings.NewReader("{}"))
		req.Host = host
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		var out struct {
			Error struct{ Code string } `json:"error"`
		}
		_ = json.Unmarshal(w.Body.Bytes(), &out)
		return w.Code, out.Error.Code
	}
	for _, c := range []struct {
		method, path, host, origin string
		status                     int
		code                       string
	}{
		{"GET", "/api/v1/auth/me", "127.0.0.1:8080", "", 200, ""},
		{"GET", "/api/v1/auth/me", "localhost:8080", "", 200, ""},
		{"GET", "/api/v1/auth/me", "[::1]:8080", "", 200, ""},
		{"GET", "/api/v1/auth/me", "evil.example:8080", "", 403, errcode.HostDenied},
		{"GET", "/healthz", "evil.example", "", 403, errcode.HostDenied},
		{"GET", "/api/v1/auth/me", "10.0.0.5:8080", "", 403, errcode.HostDenied},
		{"POST", "/api/v1/tokens", "127.0.0.1:8080", "http://evil.example", 403, errcode.OriginDenied},
		{"POST", "/api/v1/tokens", "127.0.0.1:8080", "http://127.0.0.1:9999", 403, errcode.OriginDenied},
		{"GET", "/api/v1/tokens", "127.0.0.1:8080", "", 409, errcode.AuthDisabled},
		{"POST", "/api/v1/tokens", "127.0.0.1:8080", "http://127.0.0.1:8080", 409, errcode.AuthDisabled},
		{"DELETE", "/api/v1/tokens/abc", "127.0.0.1:8080", "", 409, errcode.AuthDisabled},
	} {
		if st, code := do(c.method, c.path, c.host, c.origin); st != c.status || code != c.code {
			t.Errorf("%s %s Host %s Origin %q: %d %s, want %d %s", c.method, c.path, c.host, c.origin, st, code, c.status, c.code)
		}
	}
}

// TestSameOrigin: scheme, host and port must all match.
func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		tls          bool
		host, origin string
		want         bool
	}{
		{false, "box:8443", "http://box:8443", true},
		{false, "BOX:8443", "http://box:8443", true},
		{false, "box:8443", "https://box:8443", false},
		{true, "box:8443", "http://box:8443", false},
		{true, "box:8443", "https://box:8443", true},
		{false, "box:8443", "http://box:9443", false},
		{false, "box:8443", "http://box", false},
		{true, "box", "https://box:443", true},
		{false, "box:80", "http://box", true},
		{false, "[::1]:8080", "http://[::1]:8080", true},
		{false, "box:8443", "http://other:8443", false},
		{false, "box:8443", "null", false},
		{false, "box:8443", "http://box:8443/path", false},
		{false, "box:8443", "", true},
	} {
		r := httptest.NewRequest("POST", "http://x/", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.tls {
			r.TLS = &tls.ConnectionState{}
		}
		if got := sameOrigin(r); got != c.want {
			t.Errorf("tls %v Host %s Origin %s: %v, want %v", c.tls, c.host, c.origin, got, c.want)
		}
	}
	r := httptest.NewRequest("POST", "http://x/", nil)
	r.Header.Set("Sec-Fetch-Site", "cross-site")
	if sameOrigin(r) {
		t.Error("a cross-site request without Origin passed")
	}
}

// TestHSTS: HTTPS answers carry Strict-Transport-Security, HTTP ones not.
func TestHSTS(t *testing.T) {
	h := New(Options{Logger: quiet, Auth: AuthOptions{None: true}})
	for _, secure := range []bool{false, true} {
		srv := httptest.NewUnstartedServer(h)
		if secure {
			srv.StartTLS()
		} else {
			srv.Start()
		}
		resp, err := srv.Client().Get(srv.URL + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Get("Strict-Transport-Security")
		if (got == "max-age="+hstsMaxAge) != secure || (!secure && got != "") {
			t.Errorf("secure %v: HSTS %q", secure, got)
		}
		srv.Close()
	}
}

// TestRecoverPanics: a panicking handler answers 500 internal and is
// logged; http.ErrAbortHandler passes through.
func TestRecoverPanics(t *testing.T) {
	a := &api{o: Options{Logger: quiet}}
	w := httptest.NewRecorder()
	a.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		var m map[string]int
		m["x"] = 1 // a nil map write: a real bug's panic
	})).ServeHTTP(w, httptest.NewRequest("GET", "/api/v1/x", nil))
	if w.Code != 500 || !strings.Contains(w.Body.String(), `"internal"`) {
		t.Errorf("panic answered %d %s", w.Code, w.Body)
	}
	defer func() {
		if v := recover(); v != http.ErrAbortHandler {
			t.Errorf("ErrAbortHandler: recovered %v", v)
		}
	}()
	a.recoverPanics(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		panic(http.ErrAbortHandler)
	})).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}

func TestHasBidiControl(t *testing.T) {
	for s, want := range map[string]bool{
		"report.pdf": false, "résumé.pdf": false, "отчёт.pdf": false, "تقرير.pdf": false,
		"report\u202Efdp.exe": true, "a\u202A": true, "a\u202D": true, "\u2066x\u2069": true, "x\u2068": true,
		"a\u200Eb": true, "a\u200Fb": true, "a\u061Cb": true, "a\u200Db": false,
	} {
		if got := hasBidiControl(s); got != want {
			t.Errorf("%q: %v", s, got)
		}
	}
}

// tokensAndAudit opens a token store and an audit log in dir; the log is
// closed when the test ends.
func tokensAndAudit(t *testing.T, dir string) (*access.Tokens, *audit.Log) {
	t.Helper()
	tokens, err := access.OpenTokens(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(filepath.Join(dir, "audit.log"), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = al.Close() })
	return tokens, al
}
