package input

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/internal/testenv"
)

// One Chromium for the package; each test opens its own pages.
var (
	shared  *browser.Browser
	fixture *httptest.Server // allowed through the loopback exception
	other   *httptest.Server // loopback without exception: must never be hit
	hits    atomic.Int64     // requests that reached other
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := func() int {
		other = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			fmt.Fprint(w, "<title>other</title>secret")
		}))
		defer other.Close()
		fixture = httptest.NewServer(http.HandlerFunc(serveFixture))
		defer fixture.Close()
		if testenv.ShortSkipsChromium() {
			// -short (make test-unit): launch no Chromium; the tests that
			// need it skip through sharedBrowser.
			return m.Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := browser.Launch(ctx, browser.Options{Headless: true})
		if err != nil {
			fmt.Fprintln(os.Stderr, "launch chromium:", err)
			return 1
		}
		shared = b
		code := m.Run()
		if err := b.Close(); err != nil {
			fmt.Fprintln(os.Stderr, "close chromium:", err)
			code = 1
		}
		return code
	}()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines leaked:", err)
			code = 1
		}
	}
	os.Exit(code)
}

var fixtures = map[string]string{
	"/click": `<title>click</title><button id=b style="position:absolute;left:100px;top:100px;width:200px;height:100px" onclick="this.textContent='clicked'">B</button>`,
	"/form": `<title>form</title><form id=f onsubmit="event.preventDefault(); window.submitted=(window.submitted||0)+1">
<input id=i style="position:absolute;left:0;top:0;width:400px;height:40px"><input id=j style="position:absolute;left:0;top:100px;width:400px;height:40px">
<button style="position:absolute;left:0;top:200px">go</button></form>
<script>window.keys=[]; document.addEventListener('keydown', e => keys.push(e.key + ':' + e.keyCode))</script>`,
	"/scroll": `<title>scroll</title><div style="height:5000px;background:linear-gradient(red,blue)">tall</div>`,
	"/range":  `<title>range</title><style>body{margin:0}</style><input type=range id=r min=0 max=100 value=0 style="position:absolute;left:0;top:0;width:1000px;height:40px;margin:0">`,
	"/dialog": `<title>dialog</title>
<button id=c style="position:absolute;left:0;top:0;width:200px;height:100px" onclick="window.answer = String(confirm('sure?'))">confirm</button>
<button id=p style="position:absolute;left:300px;top:0;width:200px;height:100px" onclick="window.answer = String(prompt('name?', 'def'))">prompt</button>`,
	"/paste": `<title>paste</title><input id=i style="position:absolute;left:0;top:0;width:400px;height:40px">
<input id=pw type=password value=hunter2 style="position:absolute;left:0;top:100px;width:400px;height:40px">
<p id=p style="position:absolute;left:0;top:200px">Some selectable text</p>
<script>window.pastes=[]; document.addEventListener('paste', e => pastes.push(e.clipboardData.getData('text/plain')))</script>`,
	"/events": `<title>events</title><script>window.log=[];
for (const t of ['mousedown','mouseup','keydown','keyup']) document.addEventListener(t, e => log.push(t + ':' + (e.key || e.button)))</script>`,
	"/clicks": `<title>clicks</title><body style="margin:0;height:100vh"><script>window.log=[];
for (const t of ['mousedown','mouseup','click','dblclick']) document.addEventListener(t, e => log.push(t + ':' + e.button + ':' + e.detail + ':' + e.buttons + ':' + e.shiftKey))</script>`,
	"/unload": `<title>unload</title><script>onbeforeunload = e => { e.preventDefault(); e.returnValue = 'x' }</script>`,
	"/a":      `<title>page a</title><p>a</p>`,
	"/b":      `<title>page b</title><p>b</p>`,
}

func serveFixture(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/redirect":
		http.Redirect(w, r, other.URL+"/redirected", http.StatusFound)
		return
	case "/link":
		fmt.Fprintf(w, `<title>link</title><a id=l href="%s/linked" style="display:block;position:absolute;left:0;top:0;width:400px;height:200px">go</a>`, other.URL)
		return
	}
	body, ok := fixtures[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	fmt.Fprint(w, body)
}

// fakeResolver answers from a table and never touches the network.
type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func testPolicy() Policy {
	p := DefaultPolicy()
	p.AllowLoopbackHosts = []string{strings.TrimPrefix(fixture.URL, "http://")}
	p.Resolver = fakeResolver{
		"public.test":   {netip.MustParseAddr("93.184.216.34")},
		"loopback.test": {netip.MustParseAddr("127.0.0.1")},
	}
	return p
}

// recorder collects Events.
type recorder struct {
	mu      sync.Mutex
	states  []PageState
	dialogs chan Dialog
	closed  chan struct{}
}

func newRecorder() *recorder {
	return &recorder{dialogs: make(chan Dialog, 8), closed: make(chan struct{}, 8)}
}

func (r *recorder) events() Events {
	return Events{
		OnPageState: func(s PageState) {
			r.mu.Lock()
			r.states = append(r.states, s)
			r.mu.Unlock()
		},
		OnDialogOpened: func(d Dialog) { r.dialogs <- d },
		OnDialogClosed: func() { r.closed <- struct{}{} },
	}
}

func (r *recorder) last() (PageState, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.states) == 0 {
		return PageState{}, false
	}
	return r.states[len(r.states)-1], true
}

// harness is one page with an Executor on it.
type harness struct {
	t    *testing.T
	ctx  context.Context
	page *browser.Page
	ex   *Executor
	rec  *recorder
	pid  string
	// buttons is what the dispatcher would hand the executor as
	// action.Action.Buttons: the buttons pressed through do and not released.
	buttons int
}

// sharedBrowser is the package's Chromium; under -short TestMain launched
// none, so the test skips.
func sharedBrowser(t *testing.T) *browser.Browser {
	t.Helper()
	testenv.NeedsChromium(t)
	return shared
}

func newHarness(t *testing.T, pol Policy) *harness {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	p, err := sharedBrowser(t).NewPage(ctx, browser.PageOptions{})
	if err != nil {
		t.Fatalf("NewPage: %v", err)
	}
	rec := newRecorder()
	ex, err := New(p, pol, rec.events(), nil)
	if err != nil {
		p.Close(ctx)
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		ex.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		p.Close(cctx)
	})
	return &harness{t: t, ctx: ctx, page: p, ex: ex, rec: rec, pid: "viewer-1"}
}

// load opens a fixture and waits for its load event (through the
// executor's request interception).
func (h *harness) load(path string) {
	h.t.Helper()
	if err := h.page.Navigate(h.ctx, fixture.URL+path); err != nil {
		h.t.Fatalf("load %s: %v", path, err)
	}
}

func (h *harness) do(a action.Action) action.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.ctx, 30*time.Second)
	defer cancel()
	a.Buttons = h.buttons
	res, err := h.ex.Execute(ctx, h.pid, a)
	if err != nil {
		h.t.Fatalf("Execute %s: %v", a.Kind, err)
	}
	switch a.Kind {
	case action.PointerDown:
		h.buttons |= action.ButtonBit(a.Button)
	case action.PointerUp:
		h.buttons &^= action.ButtonBit(a.Button)
	}
	return res
}

// refused runs a and wants a refusal with code.
func (h *harness) refused(a action.Action, code string) *errcode.Error {
	h.t.Helper()
	a.Buttons = h.buttons
	_, err := h.ex.Execute(h.ctx, h.pid, a)
	var ae *errcode.Error
	if !errors.As(err, &ae) || ae.Code != code {
		h.t.Fatalf("Execute %s: err %v, want code %s", a.Kind, err, code)
	}
	return ae
}

func (h *harness) eval(expr string, out any) {
	h.t.Helper()
	if err := h.page.Evaluate(h.ctx, expr, out); err != nil {
		h.t.Fatalf("evaluate %q: %v", expr, err)
	}
}

// eventually polls cond (generous bound: this is about progress, not speed).
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// at is a point in CSS pixels as normalized coordinates of the viewport.
func (h *harness) at(x, y float64) (float64, float64) {
	w, hh := h.ex.Viewport()
	return x / float64(w), y / float64(hh)
}

func (h *harness) click(x, y float64) {
	h.t.Helper()
	nx, ny := h.at(x, y)
	h.do(action.Action{Kind: action.PointerMove, X: nx, Y: ny})
	h.do(action.Action{Kind: action.PointerDown, X: nx, Y: ny, Button: "left"})
	h.do(action.Action{Kind: action.PointerUp, X: nx, Y: ny, Button: "left"})
}

// press sends key down and up, with modifier keys around it.
func (h *harness) press(key, code string, mods int) action.Result {
	h.t.Helper()
	modKeys := []struct {
		bit       int
		key, code string
	}{{action.ModCtrl, "Control", "ControlLeft"}, {action.ModMeta, "Meta", "MetaLeft"}, {action.ModShift, "Shift", "ShiftLeft"}, {action.ModAlt, "Alt", "AltLeft"}}
	held := 0
	for _, m := range modKeys {
		if mods&m.bit != 0 {
			held |= m.bit
			h.do(action.Action{Kind: action.KeyDown, Key: m.key, Code: m.code, Modifiers: held})
		}
	}
	res := h.do(action.Action{Kind: action.KeyDown, Key: key, Code: code, Modifiers: mods})
	h.do(action.Action{Kind: action.KeyUp, Key: key, Code: code, Modifiers: mods})
	for i := len(modKeys) - 1; i >= 0; i-- {
		if m := modKeys[i]; mods&m.bit != 0 {
			held &^= m.bit
			h.do(action.Action{Kind: action.KeyUp, Key: m.key, Code: m.code, Modifiers: held})
		}
	}
	return res
}

// typeText types s key by key, as a US keyboard would name the keys.
func (h *harness) typeText(s string) {
	h.t.Helper()
	for _, r := range s {
		key, code, mods := string(r), "", 0
		switch {
		case r >= 'a' && r <= 'z':
			code = "Key" + strings.ToUpper(key)
		case r >= 'A' && r <= 'Z':
			code, mods = "Key"+key, action.ModShift
		case r >= '0' && r <= '9':
			code = "Digit" + key
		case r == ' ':
			code = "Space"
		}
		h.press(key, code, mods)
	}
}
