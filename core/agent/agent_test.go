package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// noPlugin stands in for the capture and encoder plugins: agent tests
// never start media.
type noPlugin[T any] struct{}

func (noPlugin[T]) Get(context.Context) (T, uint64, error) {
	var zero T
	return zero, 0, errors.New("no plugin")
}
func (noPlugin[T]) Call(context.Context, func(T) error) error { return errors.New("no plugin") }
func (noPlugin[T]) Report(uint64, error)                      {}

// fixtures are the pages of these tests.
func fixtures(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/upload", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Upload</title><body>
<form><input id=one type=file name=one><input id=many type=file name=many multiple><input id=txt type=text></form>
<p id=out></p>
<script>
for (const id of ['one', 'many']) document.getElementById(id).addEventListener('change', (e) => {
  document.getElementById('out').textContent = id + '=' + [...e.target.files].map(f => f.name + ':' + f.size).join(',');
});
</script>`)
	})
	mux.HandleFunc("/tabs", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Tabs</title><body>
<button id=pop onclick="window.open('/popup', '_blank', 'popup')">Open popup</button>
<a id=blank href="/popup" target="_blank">Open in a new tab</a>
<button id=inc onclick="this.textContent = 'clicked ' + (++window.n)">count</button><script>window.n = 0</script>`)
	})
	mux.HandleFunc("/popup", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Popup</title><body>popup <button id=bye onclick="window.close()">Close me</button>`)
	})
	// A button far from the origin: a point mapped with the wrong viewport
	// misses it.
	mux.HandleFunc("/far", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>far</title><body style="margin:0">
<button id=b style="position:absolute;left:500px;top:400px;width:100px;height:50px" onclick="this.textContent='hit'">far</button>`)
	})
	mux.HandleFunc("/store", func(w http.ResponseWriter, _ *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "sid", Value: "s3cr3t-cookie-value", Path: "/", HttpOnly: true})
		fmt.Fprint(w, `<!doctype html><title>Store</title><body>
<script>localStorage.setItem('token', 'local-secret-value'); sessionStorage.setItem('step', '2');</script>`)
	})
	mux.HandleFunc("/slow", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Slow</title><body><p id=state>waiting</p>
<script>
window.addEventListener('load', () => setTimeout(() => fetch('/delay?ms=1200').then(r => r.text()).then(t => {
  document.getElementById('state').textContent = t; window.ready = true; }), 100));
</script>`)
	})
	mux.HandleFunc("/delay", func(w http.ResponseWriter, r *http.Request) {
		ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		fmt.Fprint(w, "fetched")
	})
	// Every input event the page gets, in order.
	mux.HandleFunc("/events", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Events</title><body>
<button id=b style="width:200px;height:60px">target</button><input id=f>
<script>
window.log = [];
for (const t of ['mousedown', 'mouseup', 'click', 'dblclick']) document.getElementById('b').addEventListener(t, (e) => log.push(t + ':' + e.detail));
for (const t of ['keydown', 'keyup']) document.getElementById('f').addEventListener(t, (e) => log.push(t + ':' + e.key));
document.getElementById('f').addEventListener('input', (e) => log.push('input:' + e.target.value));
</script>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type env struct {
	m   *session.Manager
	s   *session.Session
	sv  *Service
	srv *httptest.Server
	ctx context.Context // an admin's
}

func setup(t *testing.T, path string) *env {
	t.Helper()
	return setupWith(t, session.CreateOptions{URL: path})
}

// setupWith opens a session on the fixture path o.URL.
func setupWith(t *testing.T, o session.CreateOptions) *env {
	t.Helper()
	testenv.NeedsChromium(t)
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := browser.Launch(lctx, browser.Options{Headless: true})
	if err != nil {
		t.Fatalf("launch chromium: %v", err)
	}
	srv := fixtures(t)
	pol := input.DefaultPolicy()
	pol.DenyPrivate = false // the fixtures are on loopback
	m := session.NewManager(session.Config{Width: 800, Height: 600, MaxSessions: 2, MaxViewers: 2, DownloadRoot: t.TempDir(), Input: pol},
		b, noPlugin[capture.Capturer]{}, noPlugin[encoder.Encoder]{}, []string{"vp8"})
	sv := NewService(nil)
	t.Cleanup(func() {
		sv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		_ = b.Close()
	})
	o.URL, o.Owner = srv.URL+o.URL, "ann"
	s, err := m.Create(lctx, o)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	admin := access.WithPrincipal(context.Background(), access.Principal{User: "ann", Role: access.RoleAdmin, Method: access.MethodCookie})
	return &env{m: m, s: s, sv: sv, srv: srv, ctx: admin}
}

func (e *env) do(t *testing.T, r Request) (*Result, *errcode.Error) {
	t.Helper()
	res, err := e.sv.Do(e.ctx, e.s, "ann", r)
	if err != nil {
		if e := errcode.From(err); e.Code == "internal" {
			t.Logf("internal: %v", err)
		}
		return res, errcode.From(err)
	}
	return res, nil
}

func (e *env) must(t *testing.T, r Request) *Result {
	t.Helper()
	res, err := e.do(t, r)
	if err != nil {
		t.Fatalf("%s %s: %+v", r.Command, r.Op, err)
	}
	return res
}

func (e *env) wantCode(t *testing.T, r Request, code string) *errcode.Error {
	t.Helper()
	_, err := e.do(t, r)
	if err == nil || err.Code != code {
		t.Fatalf("%s %s: got %+v, want code %s", r.Command, r.Op, err, code)
	}
	return err
}

func js(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func (e *env) text(t *testing.T, sel string) string {
	t.Helper()
	res := e.must(t, Request{Command: "get", What: "text", Selector: sel})
	return fmt.Sprint(res.Data.(map[string]any)["text"])
}

func TestUpload(t *testing.T) {
	e := setup(t, "/upload")
	// Names are plain: no path, no traversal.
	for _, bad := range []string{"", "../etc/passwd", "a/b", "/etc/passwd", "..", ".hidden", `a\b`, "x\x00y"} {
		if err := CheckUploadName(bad); errcode.From(err).Code != "invalid_argument" {
			t.Errorf("CheckUploadName(%q) = %v", bad, err)
		}
		if _, err := SaveUpload(e.s, bad, strings.NewReader("x")); errcode.From(err).Code != "invalid_argument" {
			t.Errorf("SaveUpload(%q) = %v", bad, err)
		}
		if bad != "" {
			e.wantCode(t, Request{Command: "upload", Selector: "#one", Files: []string{bad}}, "invalid_argument")
		}
	}
	if _, err := SaveUpload(e.s, "report.pdf", strings.NewReader(strings.Repeat("p", 1234))); err != nil {
		t.Fatal(err)
	}
	if _, err := SaveUpload(e.s, "b.txt", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	list, err := ListUploads(e.s)
	if err != nil || len(list) != 2 {
		t.Fatalf("uploads: %v %v", list, err)
	}
	dir, _ := e.s.UploadDir()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("upload dir: %v %v", fi, err)
	}

	res := e.must(t, Request{Command: "upload", Selector: "#one", Files: []string{"report.pdf"}})
	if !strings.Contains(res.Summary, "1 file") {
		t.Errorf("summary %q", res.Summary)
	}
	if got := e.text(t, "#out"); got != "one=report.pdf:1234" {
		t.Errorf("page saw %q", got)
	}
	e.must(t, Request{Command: "upload", Selector: "#many", Files: []string{"report.pdf", "b.txt"}})
	if got := e.text(t, "#out"); got != "many=report.pdf:1234,b.txt:5" {
		t.Errorf("page saw %q", got)
	}
	e.wantCode(t, Request{Command: "upload", Selector: "#one", Files: []string{"report.pdf", "b.txt"}}, "invalid_argument")
	e.wantCode(t, Request{Command: "upload", Selector: "#txt", Files: []string{"b.txt"}}, "invalid_argument")
	e.wantCode(t, Request{Command: "upload", Selector: "#one", Files: []string{"missing.bin"}}, "not_found")
	e.wantCode(t, Request{Command: "upload", Selector: "#one"}, "invalid_argument")
	// A file outside the area is out of reach even by a symlink.
	outside := filepath.Join(t.TempDir(), "secret")
	_ = os.WriteFile(outside, []byte("secret"), 0o600)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	e.wantCode(t, Request{Command: "upload", Selector: "#one", Files: []string{"link"}}, "not_found")

	// The area goes with the session.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.m.Close(ctx, e.s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("upload dir after close: %v", err)
	}
	if _, err := e.s.UploadDir(); err == nil {
		t.Error("UploadDir after close")
	}
}

func TestCookiesAndStorage(t *testing.T) {
	e := setup(t, "/store")
	res := e.must(t, Request{Command: "cookies"})
	if raw := js(res); strings.Contains(raw, "s3cr3t") || !strings.Contains(raw, `"name":"sid"`) || !strings.Contains(raw, `"valueLength":19`) {
		t.Errorf("cookies get (redacted): %s", raw)
	}
	res = e.must(t, Request{Command: "cookies", Op: "get", Reveal: true, Cookie: &CookieInput{Name: "sid"}})
	if raw := js(res); !strings.Contains(raw, "s3cr3t-cookie-value") {
		t.Errorf("cookies get reveal: %s", raw)
	}
	e.must(t, Request{Command: "cookies", Op: "set", Cookie: &CookieInput{Name: "pref", Value: "dark"}})
	var docCookie string
	if err := e.s.Page().Evaluate(context.Background(), "document.cookie", &docCookie); err != nil || !strings.Contains(docCookie, "pref=dark") {
		t.Errorf("document.cookie after set: %q %v", docCookie, err)
	}
	e.wantCode(t, Request{Command: "cookies", Op: "set", Cookie: &CookieInput{Value: "x"}}, "invalid_argument")
	e.wantCode(t, Request{Command: "cookies", Op: "set", Cookie: &CookieInput{Name: "a", Value: "x", SameSite: "sometimes"}}, "invalid_argument")
	e.wantCode(t, Request{Command: "cookies", Op: "set", Cookie: &CookieInput{Name: "bad;name", Value: "x"}}, "invalid_argument")
	e.must(t, Request{Command: "cookies", Op: "clear", Cookie: &CookieInput{Name: "pref", URL: e.srv.URL}})
	cs := e.must(t, Request{Command: "cookies"}).Data.(map[string]any)["cookies"].([]Cookie)
	if len(cs) != 1 || cs[0].Name != "sid" {
		t.Errorf("after deleting pref: %+v", cs)
	}
	e.must(t, Request{Command: "cookies", Op: "clear"})
	if cs := e.must(t, Request{Command: "cookies"}).Data.(map[string]any)["cookies"].([]Cookie); len(cs) != 0 {
		t.Errorf("after clear: %+v", cs)
	}

	res = e.must(t, Request{Command: "storage", Area: "local"})
	if raw := js(res); strings.Contains(raw, "local-secret-value") || !strings.Contains(raw, `"key":"token"`) {
		t.Errorf("storage get (redacted): %s", raw)
	}
	res = e.must(t, Request{Command: "storage", Op: "get", Area: "session", Key: "step", Reveal: true})
	if raw := js(res); !strings.Contains(raw, `"value":"2"`) {
		t.Errorf("sessionStorage get: %s", raw)
	}
	e.must(t, Request{Command: "storage", Op: "set", Key: "k", Value: "v1"})
	var v string
	if err := e.s.Page().Evaluate(context.Background(), "localStorage.getItem('k')", &v); err != nil || v != "v1" {
		t.Errorf("localStorage k: %q %v", v, err)
	}
	e.must(t, Request{Command: "storage", Op: "clear", Key: "k"})
	e.wantCode(t, Request{Command: "storage", Op: "get", Key: "k"}, "not_found")
	e.must(t, Request{Command: "storage", Op: "clear"})
	if items := e.must(t, Request{Command: "storage"}).Data.(map[string]any)["items"].([]StorageItem); len(items) != 0 {
		t.Errorf("after clear: %+v", items)
	}
	e.wantCode(t, Request{Command: "storage", Area: "disk"}, "invalid_argument")
	e.wantCode(t, Request{Command: "storage", Op: "set"}, "invalid_argument")
}

func TestEvalPolicy(t *testing.T) {
	e := setup(t, "/slow")
	// Off by default, whoever asks.
	err := e.wantCode(t, Request{Command: "eval", Expression: "1+1"}, "forbidden")
	if !strings.Contains(err.Hint, "agent.allowEval") {
		t.Errorf("hint %q", err.Hint)
	}
	e.wantCode(t, Request{Command: "wait", Function: "true"}, "forbidden")
	e.sv.SetPolicy(Policy{AllowEval: true})
	// Allowed: admins with the admin scope only.
	for _, p := range []access.Principal{
		{User: "ann", Role: access.RoleOperator, Method: access.MethodCookie},
		{User: "ann", Role: access.RoleAdmin, Method: access.MethodToken, Scopes: []string{access.ScopeRead, access.ScopeControl}},
	} {
		_, err := e.sv.Do(access.WithPrincipal(context.Background(), p), e.s, "ann", Request{Command: "eval", Expression: "1+1"})
		if errcode.From(err).Code != "forbidden" {
			t.Errorf("eval as %+v: %v", p, err)
		}
	}
	if _, err := e.sv.Do(context.Background(), e.s, "ann", Request{Command: "eval", Expression: "1"}); errcode.From(err).Code != "forbidden" {
		t.Errorf("eval without a principal: %v", err)
	}
	res := e.must(t, Request{Command: "eval", Expression: "({a: 1 + 1, t: document.title})"})
	if raw := js(res.Data); raw != `{"truncated":false,"type":"object","value":{"a":2,"t":"Slow"}}` {
		t.Errorf("eval: %s", raw)
	}
	res = e.must(t, Request{Command: "eval", Expression: "new Promise(r => setTimeout(() => r('later'), 50))"})
	if raw := js(res.Data); !strings.Contains(raw, `"value":"later"`) {
		t.Errorf("eval promise: %s", raw)
	}
	res = e.must(t, Request{Command: "eval", Expression: "'x'.repeat(70000)"})
	if d := res.Data.(map[string]any); d["truncated"] != true || len(d["value"].(string)) != maxEvalBytes {
		t.Errorf("big eval: truncated %v, %d bytes", d["truncated"], len(js(d["value"])))
	}
	res = e.must(t, Request{Command: "eval", Expression: "undefined"})
	if raw := js(res.Data); !strings.Contains(raw, `"value":null`) || !strings.Contains(raw, `"type":"undefined"`) {
		t.Errorf("eval undefined: %s", raw)
	}
	e.wantCode(t, Request{Command: "eval", Expression: "throw new Error('boom')"}, "invalid_argument")
	e.wantCode(t, Request{Command: "eval"}, "invalid_argument")
	// A runaway script is stopped by the command's time limit.
	start := time.Now()
	if _, err := e.do(t, Request{Command: "eval", Expression: "while (true) {}", TimeoutMs: 500}); err == nil {
		t.Error("endless eval succeeded")
	}
	if res := e.must(t, Request{Command: "eval", Expression: "2*3"}); js(res.Data.(map[string]any)["value"]) != "6" || time.Since(start) > 5*time.Second {
		t.Errorf("page after a runaway eval: %s after %v", js(res.Data), time.Since(start))
	}
}

func TestWaitLoadAndFunction(t *testing.T) {
	e := setup(t, "/upload")
	e.sv.SetPolicy(Policy{AllowEval: true})
	e.must(t, Request{Command: "wait", Load: "load"})
	e.wantCode(t, Request{Command: "wait", Load: "soon"}, "invalid_argument")
	e.wantCode(t, Request{Command: "wait"}, "invalid_argument")
	e.wantCode(t, Request{Command: "wait", Function: "(("}, "invalid_argument")

	// networkidle: the page fetches for 1.2 s after its load event.
	e.must(t, Request{Command: "navigate", URL: e.srv.URL + "/slow"})
	res := e.must(t, Request{Command: "wait", Load: "networkidle", TimeoutMs: 10000})
	if !res.OK || e.text(t, "#state") != "fetched" {
		t.Fatalf("networkidle: %+v, state %q", res, e.text(t, "#state"))
	}
	// function, with the page conditions.
	e.must(t, Request{Command: "reload"})
	res = e.must(t, Request{Command: "wait", Function: "() => window.ready === true", Text: "fetched", Load: "domcontentloaded", TimeoutMs: 10000})
	if !res.OK || e.text(t, "#state") != "fetched" {
		t.Fatalf("function: %+v", res)
	}
	if raw := js(res.Data); !strings.Contains(raw, `"name":"function"`) || !strings.Contains(raw, `"name":"text"`) || !strings.Contains(raw, `"name":"load"`) {
		t.Errorf("conditions: %s", raw)
	}
	// Running out is a result saying what held and what did not.
	res = e.must(t, Request{Command: "wait", Function: "window.never === 1", Load: "load", Text: "fetched", TimeoutMs: 600})
	raw := js(res.Data)
	if res.OK || !strings.Contains(raw, `"met":false`) || !strings.Contains(raw, `{"name":"load","want":"load","met":true`) ||
		!strings.Contains(raw, `{"name":"function","want":"truthy","met":false}`) || !strings.Contains(raw, `"name":"text"`) {
		t.Errorf("timed-out wait: ok %v %s", res.OK, raw)
	}
	// Without the eval policy, a wait function is refused.
	e.sv.SetPolicy(Policy{})
	e.wantCode(t, Request{Command: "wait", Function: "true"}, "forbidden")
	// A load wait needs no policy.
	e.must(t, Request{Command: "wait", Load: "networkidle", TimeoutMs: 10000})
}

// TestHumanInControl: while a person holds control, the new commands that
// change the page are refused and the reads still work.
func TestHumanInControl(t *testing.T) {
	e := setupWith(t, session.CreateOptions{URL: "/store", Control: session.ControlExclusive})
	if err := e.s.TakeControl("bob"); err != nil {
		t.Fatal(err)
	}
	e.sv.SetPolicy(Policy{AllowEval: true})
	e.must(t, Request{Command: "storage"})
	e.must(t, Request{Command: "cookies"})
	e.must(t, Request{Command: "tabs"})
	for _, r := range []Request{
		{Command: "storage", Op: "set", Key: "k", Value: "v"},
		{Command: "cookies", Op: "clear"},
		{Command: "tabs", Op: "new", URL: "about:blank"},
		{Command: "eval", Expression: "1"},
		{Command: "upload", Selector: "input", Files: []string{"a.txt"}},
	} {
		e.wantCode(t, r, errcode.HumanInControl)
	}
}

// TestClickAfterViewportChange: a person's panel resized the page (a
// viewport action); the agent's clicks map to the new viewport, as the
// input executor does, and land on the element.
func TestClickAfterViewportChange(t *testing.T) {
	e := setup(t, "/far")
	p, err := e.s.OpenProducer(dispatch.KindHuman, "bob", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acks := make(chan action.Ack, 4)
	p.Submit(action.Envelope{ControlSeq: 1, ActionID: "vp", Action: action.Action{Kind: action.Viewport, Width: 640, Height: 480}},
		func(a action.Ack) { acks <- a })
	for a := range acks {
		if a.Status == action.StatusRejected {
			t.Fatalf("viewport: %+v", a)
		}
		if a.Status == action.StatusCompleted {
			break
		}
	}
	if w, h := e.s.InputViewport(); w != 640 || h != 480 {
		t.Fatalf("input viewport %dx%d after the viewport action, want 640x480", w, h)
	}
	e.must(t, Request{Command: "click", Selector: "#b"})
	if got := e.text(t, "#b"); got != "hit" {
		t.Errorf("the click after the viewport change missed the button (%q)", got)
	}
}

// TestPressReleaseOrder: a press and its release are queued together (the
// release does not wait for the press's completion), and the page still
// gets every event in order, also when the agent's rate budget runs out
// mid-way (the presses then wait for credits; the releases are free).
func TestPressReleaseOrder(t *testing.T) {
	e := setup(t, "/events")
	e.must(t, Request{Command: "click", Selector: "#b"})
	e.must(t, Request{Command: "dblclick", Selector: "#b"})
	e.must(t, Request{Command: "fill", Selector: "#f", Text: "ab"})
	e.must(t, Request{Command: "press", Key: "Shift+Tab"})
	var got []string
	if err := e.s.Page().Evaluate(e.ctx, "window.log", &got); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"mousedown:1", "mouseup:1", "click:1",
		"mousedown:1", "mouseup:1", "click:1", "mousedown:2", "mouseup:2", "click:2", "dblclick:2",
		// Modifiers travel as flags on the key's events; Shift+Tab moves
		// the focus off the field, so its keyup lands elsewhere.
		"keydown:a", "keyup:a", "input:ab",
		"keydown:Tab",
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("events\n got %v\nwant %v", got, want)
	}

	// Past the budget (8/s, burst 16 by default): 30 clicks in a row all
	// land, each as one down/up/click.
	if err := e.s.Page().Evaluate(e.ctx, "window.log = []", nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for range 30 {
		e.must(t, Request{Command: "click", Selector: "#b"})
	}
	var log string
	if err := e.s.Page().Evaluate(e.ctx, "window.log.join(' ')", &log); err != nil {
		t.Fatal(err)
	}
	if want := strings.TrimSpace(strings.Repeat("mousedown:1 mouseup:1 click:1 ", 30)); log != want {
		t.Fatalf("30 clicks past the budget: %q", log)
	}
	t.Logf("30 clicks in %v", time.Since(start).Round(time.Millisecond))
}
