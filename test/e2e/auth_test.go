package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/test/harness"
)

// call makes one API request with explicit credentials and returns the
// status, the body and the response.
type call struct {
	method, path, body string
	token              string       // Bearer token
	cookie             *http.Cookie // login cookie
	csrf               string       // X-CSRF-Token
	origin             string
}

func (c call) do(t *testing.T, a *harness.Appliance) (int, string, *http.Response) {
	t.Helper()
	req, err := http.NewRequest(c.method, a.URL+c.path, strings.NewReader(c.body))
	if err != nil {
		t.Fatal(err)
	}
	if c.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.cookie != nil {
		req.AddCookie(c.cookie)
	}
	if c.csrf != "" {
		req.Header.Set("X-CSRF-Token", c.csrf)
	}
	if c.origin != "" {
		req.Header.Set("Origin", c.origin)
	}
	resp, err := a.Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

func expect(t *testing.T, a *harness.Appliance, what string, c call, status int, code string) string {
	t.Helper()
	got, body, _ := c.do(t, a)
	if got != status || (code != "" && !strings.Contains(body, `"code":"`+code+`"`)) {
		t.Errorf("%s: %s %s = %d %s; want %d %s", what, c.method, c.path, got, body, status, code)
	}
	return body
}

// TestAuthRefusals: every way in without the right credentials is refused
// with its stable code.
func TestAuthRefusals(t *testing.T) {
	p := pages(t)
	logDir := t.TempDir()
	// An expired token, put in the token file before the start.
	tokens, err := access.OpenTokens(filepath.Join(logDir, "data", "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	expired, _, err := tokens.Create("expired", "admin", access.RoleAdmin, []string{access.ScopeRead}, time.Nanosecond)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range [][2]string{{"op1", "operator"}, {"op2", "operator"}, {"view1", "viewer"}} {
		if err := harness.AddUser(filepath.Join(logDir, "users.yaml"), u[0], u[1], "password of "+u[0]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := harness.Start(ctx, logDir, "browser.startURL="+p.URL+"/solid?c=336699", "input.allowLoopbackHosts=127.0.0.1",
		"plugins.config.auth-local.maxFailures=3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	def, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// No credentials, wrong kinds of credentials.
	expect(t, a, "no credentials", call{method: "GET", path: "/api/v1/sessions"}, 401, "permission_denied")
	expect(t, a, "no credentials (metrics)", call{method: "GET", path: "/metrics"}, 401, "permission_denied")
	expect(t, a, "wrong token", call{method: "GET", path: "/api/v1/sessions", token: "tct_000000000000_nope"}, 401, "permission_denied")
	expect(t, a, "expired token", call{method: "GET", path: "/api/v1/sessions", token: expired}, 401, "permission_denied")
	if body := expect(t, a, "bad token", call{method: "GET", path: "/api/v1/sessions", token: "x"}, 401, "permission_denied"); !strings.Contains(body, `"recoverable":false`) {
		t.Errorf("401 should not be recoverable: %s", body)
	}

	// Logins of the other users (before the failures below lock out this
	// source address).
	op2, op2CSRF, err := a.Login(ctx, "op2", "password of op2")
	if err != nil {
		t.Fatal(err)
	}
	view1, view1CSRF, err := a.Login(ctx, "view1", "password of view1")
	if err != nil {
		t.Fatal(err)
	}
	adm, admCSRF, err := a.Login(ctx, "admin", a.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}

	// Wrong password and unknown user: the same answer.
	var answers []string
	for _, c := range []struct{ user, pw string }{{"op1", "wrong password"}, {"nobody", "wrong password"}} {
		start := time.Now()
		st, body, _ := call{method: "POST", path: "/api/v1/auth/login", body: `{"username":"` + c.user + `","password":"` + c.pw + `"}`}.do(t, a)
		t.Logf("failed login (%s): %d in %v", c.user, st, time.Since(start).Round(time.Millisecond))
		if st != 401 || !strings.Contains(body, `"code":"invalid_credentials"`) {
			t.Errorf("login %s = %d %s; want 401 invalid_credentials", c.user, st, body)
		}
		answers = append(answers, body)
	}
	if answers[0] != answers[1] {
		t.Errorf("wrong password and unknown user answer differently:\n%s\n%s", answers[0], answers[1])
	}
	// op1 has 1 failure; two more lock it out (maxFailures=3), then even
	// the right password is refused for a while.
	for range 2 {
		call{method: "POST", path: "/api/v1/auth/login", body: `{"username":"op1","password":"wrong again"}`}.do(t, a)
	}
	st, body, resp := call{method: "POST", path: "/api/v1/auth/login", body: `{"username":"op1","password":"password of op1"}`}.do(t, a)
	if st != 429 || !strings.Contains(body, `"code":"rate_limited"`) || resp.Header.Get("Retry-After") == "" {
		t.Errorf("after 3 failures: %d %s (Retry-After %q); want 429 rate_limited", st, body, resp.Header.Get("Retry-After"))
	}

	// A tampered cookie.
	bad := *op2
	bad.Value = strings.Replace(bad.Value, ".", "x.", 1)
	expect(t, a, "tampered cookie", call{method: "GET", path: "/api/v1/sessions", cookie: &bad}, 401, "permission_denied")
	forged := *op2
	forged.Value = strings.SplitN(op2.Value, ".", 2)[0] + ".AAAA"
	expect(t, a, "forged signature", call{method: "GET", path: "/api/v1/sessions", cookie: &forged}, 401, "permission_denied")

	// CSRF and Origin on state changes made with a cookie.
	create := `{"url":"` + p.URL + `/solid?c=993366"}`
	expect(t, a, "no CSRF token", call{method: "POST", path: "/api/v1/sessions", body: create, cookie: op2}, 403, "csrf_failed")
	expect(t, a, "wrong CSRF token", call{method: "POST", path: "/api/v1/sessions", body: create, cookie: op2, csrf: "nope"}, 403, "csrf_failed")
	expect(t, a, "foreign Origin", call{method: "POST", path: "/api/v1/sessions", body: create, cookie: op2, csrf: op2CSRF, origin: "http://evil.example"}, 403, "origin_denied")
	body = expect(t, a, "operator creates", call{method: "POST", path: "/api/v1/sessions", body: create, cookie: op2, csrf: op2CSRF, origin: a.URL}, 201, "")
	var created struct {
		Session struct{ ID, Owner string }
	}
	_ = json.Unmarshal([]byte(body), &created)
	if created.Session.Owner != "op2" {
		t.Errorf("new session owner %q, want op2", created.Session.Owner)
	}

	// Cross-owner: op2 cannot tell the admin's session exists.
	notFound := expect(t, a, "operator opens another owner's session", call{method: "GET", path: "/api/v1/sessions/" + def.ID, cookie: op2}, 404, "not_found")
	unknown := expect(t, a, "unknown session", call{method: "GET", path: "/api/v1/sessions/s-doesnotexist", cookie: op2}, 404, "not_found")
	if notFound != unknown {
		t.Errorf("another owner's session and an unknown id answer differently:\n%s\n%s", notFound, unknown)
	}
	expect(t, a, "operator closes another owner's session", call{method: "DELETE", path: "/api/v1/sessions/" + def.ID, cookie: op2, csrf: op2CSRF}, 404, "not_found")
	expect(t, a, "operator watches another owner's session", call{method: "GET", path: "/api/v1/sessions/" + def.ID + "/signal", cookie: op2}, 404, "not_found")
	_, list, _ := call{method: "GET", path: "/api/v1/sessions", cookie: op2}.do(t, a)
	if strings.Contains(list, def.ID) || !strings.Contains(list, created.Session.ID) {
		t.Errorf("op2's session list: %s", list)
	}

	// A viewer: nothing until invited; then watch, never act.
	expect(t, a, "viewer before the invitation", call{method: "GET", path: "/api/v1/sessions/" + created.Session.ID, cookie: view1}, 404, "not_found")
	expect(t, a, "viewer creates", call{method: "POST", path: "/api/v1/sessions", body: create, cookie: view1, csrf: view1CSRF}, 403, "forbidden")
	expect(t, a, "owner invites", call{method: "POST", path: "/api/v1/sessions/" + created.Session.ID + "/invites", body: `{"user":"view1"}`, cookie: op2, csrf: op2CSRF}, 200, "")
	expect(t, a, "invited viewer reads", call{method: "GET", path: "/api/v1/sessions/" + created.Session.ID, cookie: view1}, 200, "")
	expect(t, a, "invited viewer navigates", call{method: "POST", path: "/api/v1/sessions/" + created.Session.ID + "/navigate", body: `{"url":"` + p.URL + `/anim"}`, cookie: view1, csrf: view1CSRF}, 403, "forbidden")
	expect(t, a, "invited viewer closes", call{method: "DELETE", path: "/api/v1/sessions/" + created.Session.ID, cookie: view1, csrf: view1CSRF}, 403, "forbidden")
	w := hello(t, a, created.Session.ID, view1, "")
	if w.Interactive || w.InputError != "view_only" {
		t.Errorf("viewer's welcome: interactive=%v inputError=%q; want false, view_only", w.Interactive, w.InputError)
	}
	if w := hello(t, a, created.Session.ID, op2, ""); !w.Interactive {
		t.Errorf("owner's welcome: not interactive (inputError %q)", w.InputError)
	}
	// A WebSocket from another origin riding on the cookie.
	if st := helloStatus(t, a, created.Session.ID, op2, "http://evil.example"); st != http.StatusForbidden {
		t.Errorf("cross-origin WebSocket: HTTP %d, want 403", st)
	}

	// Tokens: an admin makes one, it works, it is revoked, it stops.
	body = expect(t, a, "create token", call{method: "POST", path: "/api/v1/tokens", body: `{"name":"ci","user":"op2","role":"operator","scopes":["read"]}`, cookie: adm, csrf: admCSRF}, 201, "")
	var tok struct {
		Token string
		Info  struct{ ID string }
	}
	_ = json.Unmarshal([]byte(body), &tok)
	expect(t, a, "read-only token lists", call{method: "GET", path: "/api/v1/sessions", token: tok.Token}, 200, "")
	expect(t, a, "read-only token creates", call{method: "POST", path: "/api/v1/sessions", body: create, token: tok.Token}, 403, "forbidden")
	expect(t, a, "operator lists tokens", call{method: "GET", path: "/api/v1/tokens", cookie: op2}, 403, "forbidden")
	expect(t, a, "agent token (no admin scope) lists tokens", call{method: "GET", path: "/api/v1/tokens", token: a.Token}, 403, "forbidden")
	expect(t, a, "revoke token", call{method: "DELETE", path: "/api/v1/tokens/" + tok.Info.ID, cookie: adm, csrf: admCSRF}, 200, "")
	expect(t, a, "revoked token", call{method: "GET", path: "/api/v1/sessions", token: tok.Token}, 401, "permission_denied")

	// Logout ends the login.
	expect(t, a, "logout", call{method: "POST", path: "/api/v1/auth/logout", cookie: op2, csrf: op2CSRF}, 200, "")
	expect(t, a, "after logout", call{method: "GET", path: "/api/v1/sessions", cookie: op2}, 401, "permission_denied")

	// The audit trail has the story, and no secrets.
	body = expect(t, a, "audit", call{method: "GET", path: "/api/v1/audit?limit=500", cookie: adm}, 200, "")
	for _, want := range []string{`"action":"login","user":"op2"`, `"action":"session.create"`, `"action":"session.invite"`, `"action":"token.create"`, `"action":"token.revoke"`, `"action":"logout"`, `"outcome":"denied","code":"invalid_credentials"`} {
		if !strings.Contains(body, want) {
			t.Errorf("audit lacks %s", want)
		}
	}
	_ = a.Stop(10 * time.Second)
	raw, err := os.ReadFile(filepath.Join(a.DataDir, "audit.log"))
	if err != nil {
		t.Fatal(err)
	}
	logs, _ := os.ReadFile(a.LogPath)
	for _, secret := range []string{"password of op1", "password of op2", "wrong password", tok.Token, expired, a.Token, op2.Value, created.Session.ID} {
		if secret == "" {
			t.Errorf("a value to look for is empty")
			continue
		}
		if bytes.Contains(raw, []byte(secret)) {
			t.Errorf("the audit log holds a secret or a raw session id: %.12q…", secret)
		}
		if secret != created.Session.ID && bytes.Contains(logs, []byte(secret)) {
			t.Errorf("the appliance log holds a secret: %.12q…", secret)
		}
	}
}

type welcome struct {
	Type        string `json:"type"`
	Interactive bool   `json:"interactive"`
	InputError  string `json:"inputError"`
	Code        string `json:"code"`
}

// hello opens the signaling socket with a login cookie, asks to be
// interactive and returns the welcome.
func hello(t *testing.T, a *harness.Appliance, id string, cookie *http.Cookie, origin string) welcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hdr := http.Header{"Cookie": {cookie.String()}}
	if origin != "" {
		hdr.Set("Origin", origin)
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.URL, "http")+"/api/v1/sessions/"+id+"/signal", &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: a.Client})
	if err != nil {
		t.Fatalf("dial signaling: %v", err)
	}
	defer ws.CloseNow()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"type":"hello","codec":"vp8","codecs":["vp8"],"interactive":true}`)); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("read welcome: %v", err)
		}
		var w welcome
		_ = json.Unmarshal(b, &w)
		if w.Type == "welcome" || w.Type == "error" {
			return w
		}
	}
	t.Fatal("no welcome in 10 messages")
	return welcome{}
}

// helloStatus returns the HTTP status of a refused upgrade (0 if it worked).
func helloStatus(t *testing.T, a *harness.Appliance, id string, cookie *http.Cookie, origin string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	hdr := http.Header{"Cookie": {cookie.String()}, "Origin": {origin}}
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.URL, "http")+"/api/v1/sessions/"+id+"/signal", &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: a.Client})
	if err == nil {
		ws.CloseNow()
		return 0
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode
}
