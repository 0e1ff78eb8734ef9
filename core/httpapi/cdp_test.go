package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/errcode"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestCDPTicketOnceForItsSession(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	tk := newCDPTickets(clk.now)
	ann := access.Principal{User: "ann", Role: access.RoleOperator, Method: access.MethodToken, TokenID: "t1", Scopes: []string{access.ScopeCDP}}

	secret, exp, err := tk.issue(ann, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if raw, err := base64.RawURLEncoding.DecodeString(secret); err != nil || len(raw) != 32 {
		t.Fatalf("secret %q: want 256 random bits in base64url (%v)", secret, err)
	}
	if !exp.Equal(clk.now().Add(60 * time.Second)) {
		t.Fatalf("expires %v, want 60 s from now", exp)
	}
	// Stored hashed: the one entry is under the secret's SHA-256.
	tk.mu.Lock()
	if _, ok := tk.byID[sha256.Sum256([]byte(secret))]; !ok || len(tk.byID) != 1 {
		t.Error("the ticket is not stored under its secret's hash")
	}
	tk.mu.Unlock()

	p, ok := tk.redeem(secret, "s1")
	if !ok || p.User != "ann" || p.TokenID != "t1" {
		t.Fatalf("redeem = %+v, %v: want ann's principal", p, ok)
	}
	if _, ok := tk.redeem(secret, "s1"); ok {
		t.Fatal("a ticket worked twice")
	}

	// A ticket shown for another session is spent, not honoured.
	other, _, _ := tk.issue(ann, "s1")
	if _, ok := tk.redeem(other, "s2"); ok {
		t.Fatal("a ticket opened another session")
	}
	if _, ok := tk.redeem(other, "s1"); ok {
		t.Fatal("a ticket shown for another session still worked")
	}

	// Expired at 60 s, valid just before.
	late, _, _ := tk.issue(ann, "s1")
	inTime, _, _ := tk.issue(ann, "s1")
	clk.add(59 * time.Second)
	if _, ok := tk.redeem(inTime, "s1"); !ok {
		t.Fatal("a ticket 59 s old was refused")
	}
	clk.add(time.Second)
	if _, ok := tk.redeem(late, "s1"); ok {
		t.Fatal("a ticket 60 s old worked")
	}
	if tk.live() != 0 {
		t.Fatalf("%d tickets left, want 0", tk.live())
	}
	for _, bad := range []string{"", "x", strings.Repeat("a", 4096)} {
		if _, ok := tk.redeem(bad, "s1"); ok {
			t.Fatalf("redeem(%.10q) worked", bad)
		}
	}
}

func TestCDPTicketsBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	tk := newCDPTickets(clk.now)
	ann := access.Principal{User: "ann"}
	for i := range maxTicketsPerUser {
		if _, _, err := tk.issue(ann, "s"); err != nil {
			t.Fatalf("ticket %d: %v", i, err)
		}
	}
	_, _, err := tk.issue(ann, "s")
	if e, ok := errcode.As(err); !ok || e.Code != errcode.RateLimited {
		t.Fatalf("ticket over the user's bound: %v, want rate_limited", err)
	}
	// Another user is not held back by ann's.
	if _, _, err := tk.issue(access.Principal{User: "bob"}, "s"); err != nil {
		t.Fatalf("bob's ticket: %v", err)
	}
	// Expired tickets give their places back.
	clk.add(ticketTTL)
	if _, _, err := tk.issue(ann, "s"); err != nil {
		t.Fatalf("after expiry: %v", err)
	}
	// The appliance-wide bound.
	for i := 0; tk.live() < maxTickets; i++ {
		if _, _, err := tk.issue(access.Principal{User: "u" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)}, "s"); err != nil {
			t.Fatalf("filling: %v", err)
		}
	}
	if _, _, err := tk.issue(access.Principal{User: "zed"}, "s"); err == nil {
		t.Fatal("a ticket over the appliance's bound")
	}
}

func TestCDPTicketRequest(t *testing.T) {
	for _, c := range []struct {
		method, target string
		id, secret     string
		ok             bool
	}{
		{"GET", "/api/v1/sessions/abc/cdp?ticket=T", "abc", "T", true},
		{"GET", "/api/v1/sessions/abc/cdp?ticket=", "abc", "", true},
		{"GET", "/api/v1/sessions/abc/cdp", "", "", false},
		{"POST", "/api/v1/sessions/abc/cdp?ticket=T", "", "", false},
		{"GET", "/api/v1/sessions/abc/cdp/json/version?ticket=T", "", "", false},
		{"GET", "/api/v1/sessions/a/b/cdp?ticket=T", "", "", false},
		{"GET", "/api/v1/sessions//cdp?ticket=T", "", "", false},
		{"GET", "/api/v1/tokens?ticket=T", "", "", false},
	} {
		r := httptest.NewRequest(c.method, c.target, nil)
		id, secret, ok := cdpTicketRequest(r)
		if id != c.id || secret != c.secret || ok != c.ok {
			t.Errorf("%s %s = %q %q %v", c.method, c.target, id, secret, ok)
		}
	}
}

func TestCDPWSURL(t *testing.T) {
	r := httptest.NewRequest("GET", "/x", nil)
	r.Host = "box.lan:8443"
	if got := cdpWSURL(r, "s1").String(); got != "ws://box.lan:8443/api/v1/sessions/s1/cdp" {
		t.Errorf("plain: %s", got)
	}
	r.TLS = &tls.ConnectionState{}
	r.Host = "[fd00::1]:443"
	if got := cdpWSURL(r, "s1").String(); got != "wss://[fd00::1]:443/api/v1/sessions/s1/cdp" {
		t.Errorf("TLS: %s", got)
	}
}

func TestCutReason(t *testing.T) {
	if got := cutReason("short"); got != "short" {
		t.Errorf("short: %q", got)
	}
	long := strings.Repeat("é", 100) // 200 bytes
	got := cutReason(long)
	if len(got) > maxCloseReason || !strings.HasPrefix(long, got) || len(got) < maxCloseReason-1 {
		t.Errorf("long: %d bytes %q", len(got), got)
	}
}

// TestCDPConnLimits: the adapter hands text messages through both ways,
// closes with 1009 on a message over the read limit and 1003 on a binary
// frame, and the first Close's reason is the one the client reads.
func TestCDPConnLimits(t *testing.T) {
	type result struct {
		msg []byte
		err error
	}
	got := make(chan result, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		ws.SetReadLimit(1024)
		c := &cdpConn{ws: ws}
		ctx := r.Context()
		for {
			msg, err := c.ReadMessage(ctx)
			got <- result{msg, err}
			if err != nil {
				return
			}
			if string(msg) == "bye" {
				_ = c.Close(4000, "first reason")
				_ = c.Close(4001, "second reason")
				return
			}
			if err := c.WriteMessage(ctx, append([]byte("echo "), msg...)); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func() *websocket.Conn {
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
		if err != nil {
			t.Fatal(err)
		}
		return ws
	}

	ws := dial()
	if err := ws.Write(ctx, websocket.MessageText, []byte(`{"id":1}`)); err != nil {
		t.Fatal(err)
	}
	if _, msg, err := ws.Read(ctx); err != nil || string(msg) != `echo {"id":1}` {
		t.Fatalf("echo: %q %v", msg, err)
	}
	<-got
	_ = ws.Write(ctx, websocket.MessageText, []byte("bye"))
	_, _, err := ws.Read(ctx)
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4000 || ce.Reason != "first reason" {
		t.Fatalf("close after bye: %v", err)
	}
	<-got

	ws = dial()
	_ = ws.Write(ctx, websocket.MessageText, []byte(strings.Repeat("x", 2048)))
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
		t.Fatalf("oversized message: %v, want close 1009", err)
	}
	if r := <-got; r.err == nil {
		t.Fatal("the server read an oversized message")
	}

	ws = dial()
	_ = ws.Write(ctx, websocket.MessageBinary, []byte(`{"id":1}`))
	_, _, err = ws.Read(ctx)
	if websocket.CloseStatus(err) != websocket.StatusUnsupportedData {
		t.Fatalf("binary frame: %v, want close 1003", err)
	}
	if r := <-got; r.err == nil {
		t.Fatal("the server took a binary frame")
	}
}

// TestCDPRefusedBeforeUpgrade: the refusals that need no session: off
// (cdp_disabled), no credential, a bad ticket, on without a proxy.
func TestCDPRefusedBeforeUpgrade(t *testing.T) {
	dir := t.TempDir()
	tokens, al := tokensAndAudit(t, dir)
	secret, _, err := tokens.Create("pw", "ann", access.RoleOperator, []string{access.ScopeRead, access.ScopeControl, access.ScopeCDP}, 0)
	if err != nil {
		t.Fatal(err)
	}
	serve := func(o CDPOptions) *httptest.Server {
		s := httptest.NewServer(New(Options{Logger: quiet, CDP: o, Auth: AuthOptions{Tokens: tokens, Logins: access.NewLogins(time.Hour, time.Hour), Audit: al, LoginMax: time.Hour}}))
		t.Cleanup(s.Close)
		return s
	}
	call := func(srv *httptest.Server, method, path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", "websocket")
		req.Header.Set("Sec-WebSocket-Version", "13")
		req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out errorBody
		_ = json.NewDecoder(resp.Body).Decode(&out)
		code := ""
		if out.Error != nil {
			code = out.Error.Code
		}
		return resp.StatusCode, code
	}
	off := serve(CDPOptions{})
	for _, p := range []string{"/cdp", "/cdp/json/version", "/cdp/json/version/", "/cdp/json/list", "/cdp/json"} {
		if st, code := call(off, "GET", "/api/v1/sessions/s1"+p, secret); st != 403 || code != errcode.CDPDisabled {
			t.Errorf("off, %s: %d %s, want 403 cdp_disabled", p, st, code)
		}
	}
	if st, code := call(off, "POST", "/api/v1/sessions/s1/cdp/ticket", secret); st != 403 || code != errcode.CDPDisabled {
		t.Errorf("off, ticket: %d %s", st, code)
	}
	if st, code := call(off, "GET", "/api/v1/sessions/s1/cdp", ""); st != 401 || code != errcode.PermissionDenied {
		t.Errorf("no credential: %d %s, want 401", st, code)
	}
	if st, code := call(off, "GET", "/api/v1/sessions/s1/cdp?ticket=made-up", ""); st != 401 || code != errcode.PermissionDenied {
		t.Errorf("made-up ticket: %d %s, want 401", st, code)
	}
	noProxy := serve(CDPOptions{Enabled: true})
	if st, code := call(noProxy, "GET", "/api/v1/sessions/s1/cdp", secret); st != 501 || code != errcode.NotSupported {
		t.Errorf("no proxy: %d %s, want 501 not_supported", st, code)
	}
}
