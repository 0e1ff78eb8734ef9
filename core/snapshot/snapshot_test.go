package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/runtime"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/internal/testenv"
)

var testBrowser *browser.Browser

func TestMain(m *testing.M) {
	flag.Parse()
	if testenv.ShortSkipsChromium() {
		// -short (make test-unit): launch no Chromium; the tests that need
		// testBrowser skip in testCtx.
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	b, err := browser.Launch(ctx, browser.Options{Headless: true})
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "launch chromium:", err)
		os.Exit(1)
	}
	testBrowser = b
	code := m.Run()
	if err := b.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "close browser:", err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// testCtx is every Chromium test's first call: under -short it skips the
// test, since TestMain launched no testBrowser.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	testenv.NeedsChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newPage(t *testing.T, ctx context.Context, url string) *browser.Page {
	t.Helper()
	p, err := testBrowser.NewPage(ctx, browser.PageOptions{URL: url})
	if err != nil {
		t.Fatalf("NewPage: %v", err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Close(cctx)
	})
	return p
}

func serve(t *testing.T, pages map[string]string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	for path, body := range pages {
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			fmt.Fprint(w, body)
		})
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// click dispatches a real left click at (x, y) on the top-level page, as
// the core's dispatcher will.
func click(t *testing.T, ctx context.Context, s cdp.Session, x, y float64) {
	t.Helper()
	for _, typ := range []input.DispatchMouseEventType{input.DispatchMouseEventTypeMousePressed, input.DispatchMouseEventTypeMouseReleased} {
		if _, err := cdp.Call(ctx, s, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			Type: typ, X: x, Y: y, Button: input.MouseButtonLeft, ClickCount: 1,
		}); err != nil {
			t.Fatalf("dispatch %s: %v", typ, err)
		}
	}
}

func clickRef(t *testing.T, ctx context.Context, p *browser.Page, refs *Refs, ref string, rev int64) {
	t.Helper()
	el, err := refs.Resolve(ctx, ref, rev)
	if err != nil {
		t.Fatalf("Resolve %s: %v", ref, err)
	}
	x, y, err := ClickPoint(ctx, el)
	if err != nil {
		t.Fatalf("ClickPoint %s: %v", ref, err)
	}
	click(t, ctx, p.Target(), x, y)
}

func fill(t *testing.T, ctx context.Context, p *browser.Page, el *Element, text string) {
	t.Helper()
	if err := el.Focus(ctx); err != nil {
		t.Fatalf("Focus: %v", err)
	}
	if _, err := cdp.Call(ctx, p.Target(), input.InsertText, input.InsertTextParams{Text: text}); err != nil {
		t.Fatalf("insertText: %v", err)
	}
}

// refOf finds the ref of the first line with this role and name.
func refOf(t *testing.T, s *Snapshot, role, name string) string {
	t.Helper()
	re := regexp.MustCompile(`(?m)^\s*- ` + regexp.QuoteMeta(role) + ` ` + regexp.QuoteMeta(fmt.Sprintf("%q", name)) + `.*\[ref=(e\d+)\]`)
	m := re.FindStringSubmatch(s.Text())
	if m == nil {
		t.Fatalf("no %s %q with a ref in snapshot:\n%s", role, name, s.Text())
	}
	return m[1]
}

func evalInt(t *testing.T, ctx context.Context, s cdp.Session, expr string) int {
	t.Helper()
	yes := true
	r, err := cdp.Call(ctx, s, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: &yes})
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	if r.ExceptionDetails != nil {
		t.Fatalf("evaluate %s: %s", expr, r.ExceptionDetails.Text)
	}
	var n int
	if err := json.Unmarshal(r.Result.Value, &n); err != nil {
		t.Fatalf("evaluate %s: %s", expr, r.Result.Value)
	}
	return n
}

func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var e *errcode.Error
	if !errors.As(err, &e) || e.Code != code {
		t.Fatalf("want error code %q, got %v", code, err)
	}
	if e.Hint == "" {
		t.Errorf("error %v has no hint", e)
	}
}

const loginPage = `<!doctype html><title>Login</title>
<h1>Sign in</h1>
<form action="/welcome" method="get">
 <label>Email <input id="email" name="email" type="email"></label>
 <label>Password <input id="password" name="password" type="password"></label>
 <button type="submit">Submit</button>
</form>`

const welcomePage = `<!doctype html><title>Welcome</title><h1 id="h">Welcome</h1>
<script>const q = new URLSearchParams(location.search);
document.getElementById('h').textContent = (q.get('email') && q.get('password') === 'hunter2-secret') ? 'Welcome, ' + q.get('email') : 'Login failed';</script>`

func TestLoginFlow(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/login": loginPage, "/welcome": welcomePage})
	p := newPage(t, ctx, srv.URL+"/login")
	var refs Refs

	s, err := refs.Take(ctx, p, Options{Interactive: true, Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("interactive snapshot (%v):\n%s", s.Took, s.Text())
	lines := strings.Split(strings.TrimSpace(s.Text()), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 interactive lines, got %d:\n%s", len(lines), s.Text())
	}
	email := refOf(t, s, "textbox", "Email")
	pw := refOf(t, s, "textbox", "Password")
	submit := refOf(t, s, "button", "Submit")
	if strings.Contains(s.Text(), "heading") {
		t.Errorf("interactive snapshot lists a heading:\n%s", s.Text())
	}

	full, err := Take(ctx, p, Options{Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(full.Text(), `- heading "Sign in" [level=1]`) {
		t.Errorf("full snapshot misses the heading:\n%s", full.Text())
	}

	for ref, text := range map[string]string{email: "alice@example.com", pw: "hunter2-secret"} {
		el, err := refs.Resolve(ctx, ref, 1)
		if err != nil {
			t.Fatal(err)
		}
		fill(t, ctx, p, el, text)
	}
	clickRef(t, ctx, p, &refs, submit, 1)

	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if res, err := Wait(wctx, p, WaitFor{URLContains: "/welcome", Text: "Welcome, alice@example.com"}); err != nil {
		t.Fatalf("Wait: %v (%+v)", err, res)
	}
	// Main-frame navigation: the core bumps the revision.
	if _, err := refs.Resolve(ctx, submit, 2); errcode.CodeOf(err) != errcode.StaleRef {
		t.Fatalf("old ref after navigation: want stale_ref, got %v", err)
	}
	s2, err := refs.Take(ctx, p, Options{Revision: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s2.Text(), `- heading "Welcome, alice@example.com" [level=1]`) {
		t.Fatalf("result snapshot misses the heading:\n%s", s2.Text())
	}
}

const dynamicPage = `<!doctype html><title>Dyn</title>
<script>window.clicks = [];</script>
<div id="box"><button id="b" onclick="window.clicks.push('old')">Save</button></div>
<script>
function rerender() {
  const old = document.getElementById('b');
  const n = document.createElement('button');
  n.id = 'b'; n.textContent = 'Save';
  n.onclick = () => window.clicks.push('new');
  old.replaceWith(n);
}
</script>`

func TestStaleRefAfterRerender(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": dynamicPage})
	p := newPage(t, ctx, srv.URL+"/")
	sn := NewSnapshotter()
	defer sn.Forget(p)

	s, err := sn.Take(ctx, p, Options{Revision: 7})
	if err != nil {
		t.Fatal(err)
	}
	ref := refOf(t, s, "button", "Save")
	held, err := sn.Resolve(ctx, p, ref, 7)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Evaluate(ctx, "rerender()", nil); err != nil {
		t.Fatal(err)
	}
	_, err = sn.Resolve(ctx, p, ref, 7)
	wantCode(t, err, errcode.StaleRef)
	// A handle resolved before the re-render is stale too.
	_, _, err = ClickPoint(ctx, held)
	wantCode(t, err, errcode.StaleRef)
	// Lookup skips the check, and ClickPoint still refuses the old node.
	looked, err := sn.Lookup(p, ref, 7)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ClickPoint(ctx, looked)
	wantCode(t, err, errcode.StaleRef)
	_, err = sn.Lookup(p, ref, 8)
	wantCode(t, err, errcode.StaleRef)
	if _, err := held.Text(ctx); errcode.CodeOf(err) != errcode.StaleRef {
		t.Fatalf("Text on re-rendered element: want stale_ref, got %v", err)
	}
	if n := evalInt(t, ctx, p.Target(), "window.clicks.length"); n != 0 {
		t.Fatalf("page logged %d clicks, want 0", n)
	}
	// Unknown and malformed refs.
	_, err = sn.Resolve(ctx, p, "e999", 7)
	wantCode(t, err, errcode.StaleRef)
	_, err = sn.Resolve(ctx, p, "bogus", 7)
	wantCode(t, err, errcode.InvalidArgument)

	// A new snapshot gives a ref to the new button, which works.
	s2, err := sn.Take(ctx, p, Options{Revision: 7})
	if err != nil {
		t.Fatal(err)
	}
	ref2 := refOf(t, s2, "button", "Save")
	clickRef(t, ctx, p, sn.Refs(p), ref2, 7)
	if n := evalInt(t, ctx, p.Target(), "window.clicks.filter(c => c === 'new').length"); n != 1 {
		t.Fatalf("new button clicks = %d, want 1", n)
	}
	if n := evalInt(t, ctx, p.Target(), "window.clicks.filter(c => c === 'old').length"); n != 0 {
		t.Fatalf("old button clicks = %d, want 0", n)
	}
	// A page revision change makes every ref stale, even of a live element.
	_, err = sn.Resolve(ctx, p, ref2, 8)
	wantCode(t, err, errcode.StaleRef)
}

// TestClickPointScrolling: an element out of view is scrolled to and
// clicked even when the page scrolls smoothly (the point must be where the
// element is once the scroll is over); one that is already clickable is
// not scrolled; one inside a scrolled box is brought into view.
func TestClickPointScrolling(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": `<!doctype html><title>Scroll</title>
<style>html{scroll-behavior:smooth} div.box{scroll-behavior:smooth}</style>
<body style="margin:0"><script>window.clicks = [];</script>
<button onclick="clicks.push('near')" style="margin:20px">Near</button>
<div class="box" style="height:100px;overflow:auto"><div style="height:600px"></div>
<button onclick="clicks.push('inner')">Inner</button></div>
<div style="height:3000px"></div>
<button onclick="clicks.push('far')">Far</button>
<div style="height:3000px"></div>`})
	p := newPage(t, ctx, srv.URL+"/")
	var refs Refs
	s, err := refs.Take(ctx, p, Options{Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	clickRef(t, ctx, p, &refs, refOf(t, s, "button", "Near"), 1)
	if n := evalInt(t, ctx, p.Target(), "scrollY"); n != 0 {
		t.Fatalf("clicking a button in view scrolled the page to %d", n)
	}
	clickRef(t, ctx, p, &refs, refOf(t, s, "button", "Far"), 1)
	if n := evalInt(t, ctx, p.Target(), "scrollY"); n < 2000 {
		t.Fatalf("scrollY = %d after clicking the far button", n)
	}
	clickRef(t, ctx, p, &refs, refOf(t, s, "button", "Inner"), 1)
	if n := evalInt(t, ctx, p.Target(), "document.querySelector('.box').scrollTop"); n == 0 {
		t.Fatal("the box was not scrolled to its button")
	}
	if got := evalInt(t, ctx, p.Target(), `clicks.join() === "near,far,inner" ? 1 : 0`); got != 1 {
		var log string
		_ = p.Evaluate(ctx, "clicks.join()", &log)
		t.Fatalf("clicks %q, want near,far,inner", log)
	}
}

const innerPage = `<!doctype html><title>inner</title><body style="margin:0">
<script>window.clicks = [];</script>
<div style="height:40px"></div>
<button id="b" style="margin-left:30px" onclick="window.clicks.push(1)">Press NAME</button>
<script>document.getElementById('b').textContent = 'Press ' + new URLSearchParams(location.search).get('name');</script>`

func TestIframesSameOriginAndOOPIF(t *testing.T) {
	ctx := testCtx(t)
	inner := serve(t, map[string]string{"/inner": innerPage})
	// Cross-site: localhost vs 127.0.0.1 are different sites.
	crossURL := strings.Replace(inner.URL, "127.0.0.1", "localhost", 1) + "/inner?name=cross"
	main := serve(t, map[string]string{
		"/inner": innerPage,
		"/frames": `<!doctype html><title>Frames</title><body style="margin:20px">
<h1>Frames</h1>
<iframe id="same" title="Same" src="/inner?name=same" style="width:400px;height:150px;border:7px solid black;margin-left:50px"></iframe>
<div style="height:900px"></div>
<iframe id="cross" title="Cross" src="` + crossURL + `" style="width:400px;height:150px;border:11px solid black;margin-left:120px;padding:5px"></iframe>
<div style="height:400px"></div>`,
	})
	p := newPage(t, ctx, main.URL+"/frames")
	if _, err := Wait(ctx, p, WaitFor{Selector: "#cross"}); err != nil {
		t.Fatal(err)
	}
	conn, err := testBrowser.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := NewAttacher(conn)
	defer a.Close()
	fp := WithFrames(p, a)
	var refs Refs

	var s *Snapshot
	// The cross-site frame loads asynchronously: retry until both buttons show.
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err = refs.Take(ctx, fp, Options{Revision: 1})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s.Text(), `"Press same"`) && strings.Contains(s.Text(), `"Press cross"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot lacks an iframe button:\n%s", s.Text())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("frames snapshot:\n%s", s.Text())
	if !regexp.MustCompile(`(?s)- iframe "Same".*\n\s+- button "Press same"`).MatchString(s.Text()) ||
		!regexp.MustCompile(`(?s)- iframe "Cross".*\n\s+- button "Press cross"`).MatchString(s.Text()) {
		t.Fatalf("iframe buttons not nested under their iframes:\n%s", s.Text())
	}
	sameRef := refOf(t, s, "button", "Press same")
	crossRef := refOf(t, s, "button", "Press cross")
	crossEl, err := refs.Resolve(ctx, crossRef, 1)
	if err != nil {
		t.Fatal(err)
	}
	if crossEl.Session == cdp.Session(p.Target()) {
		t.Fatalf("cross-site iframe is not out of process; the test would prove nothing")
	}
	sameEl, err := refs.Resolve(ctx, sameRef, 1)
	if err != nil {
		t.Fatal(err)
	}
	if sameEl.Session != cdp.Session(p.Target()) {
		t.Fatalf("same-origin iframe runs in another session")
	}

	// The cross frame is below the fold: ClickPoint must scroll it in.
	clickRef(t, ctx, p, &refs, crossRef, 1)
	if n := evalInt(t, ctx, crossEl.Session, "window.clicks.length"); n != 1 {
		t.Fatalf("cross frame clicks = %d, want 1", n)
	}
	// Now in view: nothing scrolls (and nothing waits for frames); the
	// click still lands.
	before := evalInt(t, ctx, p.Target(), "scrollY")
	clickRef(t, ctx, p, &refs, crossRef, 1)
	if n := evalInt(t, ctx, crossEl.Session, "window.clicks.length"); n != 2 {
		t.Fatalf("cross frame clicks = %d after a click in view, want 2", n)
	}
	if n := evalInt(t, ctx, p.Target(), "scrollY"); n != before {
		t.Fatalf("a click in view scrolled the page from %d to %d", before, n)
	}
	evalInt(t, ctx, crossEl.Session, "(window.clicks = [1]).length")
	if n := evalInt(t, ctx, p.Target(), "document.getElementById('same').contentWindow.clicks.length"); n != 0 {
		t.Fatalf("same frame clicks = %d before its click, want 0", n)
	}
	clickRef(t, ctx, p, &refs, sameRef, 1)
	if n := evalInt(t, ctx, p.Target(), "document.getElementById('same').contentWindow.clicks.length"); n != 1 {
		t.Fatalf("same frame clicks = %d, want 1", n)
	}
	if n := evalInt(t, ctx, crossEl.Session, "window.clicks.length"); n != 1 {
		t.Fatalf("cross frame clicks = %d after the same-frame click, want 1", n)
	}
	// Box agrees with the click point.
	x, y, err := ClickPoint(ctx, crossEl)
	if err != nil {
		t.Fatal(err)
	}
	box, err := crossEl.Box(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if x < box.X || x > box.X+box.Width || y < box.Y || y > box.Y+box.Height {
		t.Fatalf("click point (%v,%v) outside box %+v", x, y, box)
	}
	// Covered inside its frame, or its iframe covered in the page: obscured.
	cover := `(() => { const d = document.createElement("div"); d.id = "cover";
		d.style.cssText = "position:fixed;left:0;top:0;width:100vw;height:100vh;z-index:9"; document.body.append(d); return 1; })()`
	for _, sess := range []cdp.Session{crossEl.Session, p.Target()} {
		evalInt(t, ctx, sess, cover)
		_, _, err = ClickPoint(ctx, crossEl)
		wantCode(t, err, errcode.Obscured)
		evalInt(t, ctx, sess, `(document.getElementById("cover").remove(), 1)`)
	}
	if _, _, err := ClickPoint(ctx, crossEl); err != nil {
		t.Fatalf("uncovered: %v", err)
	}

	// Boxes: the snapshot geometry agrees with Element.Box in every frame.
	// Scrolled, so document and viewport coordinates differ.
	if err := p.Evaluate(ctx, "window.scrollTo(0, 250); scrollY", nil); err != nil {
		t.Fatal(err)
	}
	if n := evalInt(t, ctx, p.Target(), "scrollY"); n != 250 {
		t.Fatalf("scrollY = %d", n)
	}
	sb, err := Take(ctx, fp, Options{Revision: 1, Boxes: true, Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	var walk func([]*Node)
	checked := 0
	walk = func(ns []*Node) {
		for _, n := range ns {
			if n.Role == "button" {
				if n.Box == nil {
					t.Errorf("button %q has no box", n.Name)
				} else {
					el, err := sb.Resolve(ctx, n.Ref, 1)
					if err != nil {
						t.Fatal(err)
					}
					want, err := el.Box(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if d := math.Abs(want.X-n.Box.X) + math.Abs(want.Y-n.Box.Y) + math.Abs(want.Width-n.Box.Width) + math.Abs(want.Height-n.Box.Height); d > 2 {
						t.Errorf("button %q: snapshot box %+v, element box %+v", n.Name, *n.Box, want)
					}
					checked++
				}
			}
			walk(n.Children)
		}
	}
	walk(sb.Nodes)
	if checked != 2 {
		t.Fatalf("checked %d button boxes, want 2", checked)
	}

	// Ref scope: the cross iframe's ref scopes a snapshot to its document.
	crossFrameRef := regexp.MustCompile(`- iframe "Cross" \[ref=(e\d+)\]`).FindStringSubmatch(s.Text())
	if crossFrameRef == nil {
		t.Fatalf("no ref for the cross iframe:\n%s", s.Text())
	}
	scoped, err := refs.Take(ctx, fp, Options{Revision: 1, Ref: crossFrameRef[1]})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(scoped.Text(), `"Press cross"`) || strings.Contains(scoped.Text(), "Press same") || strings.Contains(scoped.Text(), "Frames") {
		t.Fatalf("ref-scoped snapshot:\n%s", scoped.Text())
	}
	clickRef(t, ctx, p, &refs, refOf(t, scoped, "button", "Press cross"), 1)
	if n := evalInt(t, ctx, crossEl.Session, "window.clicks.length"); n != 2 {
		t.Fatalf("cross frame clicks = %d after the scoped click, want 2", n)
	}

	// Without an attacher the OOPIF is marked unreachable, not an error.
	s3, err := Take(ctx, p, Options{Revision: 1})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`- iframe "Cross".*\[unreachable\]`).MatchString(s3.Text()) || strings.Contains(s3.Text(), "Press cross") {
		t.Fatalf("OOPIF without attacher:\n%s", s3.Text())
	}
}

const secretsPage = `<!doctype html><title>Secrets</title>
<label>User <input id="user" value="alice"></label>
<label>Password <input id="pw" type="password"></label>
<label>Agree <input id="agree" type="checkbox" checked></label>
<label>Color <select id="color"><option>red</option><option selected>blue</option></select></label>
<p>Your key is sk-proj-AbCdEf0123456789GhIjKlMnOp and token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U here.</p>
<p>hex 0123456789abcdef0123456789abcdef01 end</p>
<p aria-hidden="true">aria hidden text</p>
<div style="display:none"><button>Invisible button</button></div>
<p>Plain words stay visible.</p>`

func TestRedaction(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": secretsPage})
	p := newPage(t, ctx, srv.URL+"/")
	const secret = "Sup3rSecretPassw0rd"
	pw, err := ResolveSelector(ctx, p, "#pw")
	if err != nil {
		t.Fatal(err)
	}
	fill(t, ctx, p, pw, secret)
	if v := evalInt(t, ctx, p.Target(), "document.getElementById('pw').value.length"); v != len(secret) {
		t.Fatalf("password not filled: len %d", v)
	}
	for _, iv := range []bool{false, true} {
		s, err := Take(ctx, p, Options{IncludeValues: iv})
		if err != nil {
			t.Fatal(err)
		}
		js, err := s.JSON()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("IncludeValues=%v:\n%s", iv, s.Text())
		for _, out := range []string{s.Text(), string(js)} {
			for _, leak := range []string{secret, "sk-proj-AbCdEf", "eyJhbGciOiJIUzI1NiJ9", "0123456789abcdef0123456789abcdef", "aria hidden text", "Invisible button"} {
				if strings.Contains(out, leak) {
					t.Errorf("IncludeValues=%v: output contains %q:\n%s", iv, leak, out)
				}
			}
			if !strings.Contains(out, Redacted) || !strings.Contains(out, "Plain words stay visible.") {
				t.Errorf("IncludeValues=%v: token not redacted or text lost:\n%s", iv, out)
			}
		}
		if !strings.Contains(s.Text(), `- checkbox "Agree" [checked=true]`) {
			t.Errorf("checkbox state missing:\n%s", s.Text())
		}
		if !strings.Contains(s.Text(), `"blue"`) {
			t.Errorf("select value missing:\n%s", s.Text())
		}
		hasUser := regexp.MustCompile(`- textbox "User" \[ref=e\d+\]: "alice"`).MatchString(s.Text())
		if hasUser != iv {
			t.Errorf("IncludeValues=%v but user value shown=%v:\n%s", iv, hasUser, s.Text())
		}
		if iv && !regexp.MustCompile(`- textbox "Password" (\[\w+\] )*\[ref=e\d+\]: "••••"`).MatchString(s.Text()) {
			t.Errorf("password not shown redacted:\n%s", s.Text())
		}
	}
	if v, err := pw.Value(ctx); err != nil || v != RedactedPassword {
		t.Fatalf("Value(password) = %q, %v", v, err)
	}
	if v, ok, err := pw.Attr(ctx, "type"); err != nil || !ok || v != "password" {
		t.Fatalf("Attr(type) = %q %v %v", v, ok, err)
	}
}

func TestLimits(t *testing.T) {
	ctx := testCtx(t)
	var sb strings.Builder
	sb.WriteString(`<!doctype html><title>Big</title><h1>Big page</h1><ul>`)
	for i := 0; i < 1500; i++ {
		fmt.Fprintf(&sb, `<li><a href="#i%d">Item %d</a> <button>Act %d</button></li>`, i, i, i)
	}
	sb.WriteString(`</ul>`)
	srv := serve(t, map[string]string{"/": sb.String()})
	p := newPage(t, ctx, srv.URL+"/")
	if n, err := Count(ctx, p, "*"); err != nil || n < 2000 {
		t.Fatalf("page has %d elements (%v), want >= 2000", n, err)
	}
	s, err := Take(ctx, p, Options{MaxNodes: -1, MaxChars: -1})
	if err != nil {
		t.Fatal(err)
	}
	js, _ := s.JSON()
	t.Logf("unbounded snapshot: %d nodes, %d refs, %d text bytes, %d JSON bytes, took %v", s.NodeCount, s.RefCount, len(s.Text()), len(js), s.Took)
	if s.Truncated || s.NodeCount < 4500 {
		t.Fatalf("unbounded snapshot truncated=%v nodes=%d", s.Truncated, s.NodeCount)
	}
	d, err := Take(ctx, p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("default snapshot: %d nodes, %d text bytes, truncated=%v, took %v", d.NodeCount, len(d.Text()), d.Truncated, d.Took)
	if !d.Truncated || d.NodeCount > DefaultMaxNodes || len(d.Text()) > DefaultMaxChars || len(d.Text()) < DefaultMaxChars-200 {
		t.Fatalf("default limits: truncated=%v nodes=%d chars=%d", d.Truncated, d.NodeCount, len(d.Text()))
	}
	i, err := Take(ctx, p, Options{Interactive: true, MaxNodes: -1, MaxChars: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("interactive snapshot: %d nodes, %d text bytes, took %v", i.NodeCount, len(i.Text()), i.Took)
	if i.NodeCount != 3000 || i.RefCount != 3000 {
		t.Fatalf("interactive: %d nodes %d refs, want 3000", i.NodeCount, i.RefCount)
	}
	small, err := Take(ctx, p, Options{MaxNodes: 50})
	if err != nil {
		t.Fatal(err)
	}
	if !small.Truncated || small.NodeCount != 50 || strings.Count(small.Text(), "\n") != 50 {
		t.Fatalf("MaxNodes=50: truncated=%v nodes=%d lines=%d", small.Truncated, small.NodeCount, strings.Count(small.Text(), "\n"))
	}
	c, err := Take(ctx, p, Options{MaxChars: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if !c.Truncated || len(c.Text()) > 1000 || len(c.Text()) < 900 {
		t.Fatalf("MaxChars=1000: truncated=%v len=%d", c.Truncated, len(c.Text()))
	}
	// Only the refs of the listed nodes exist.
	if _, err := c.Resolve(ctx, fmt.Sprintf("e%d", c.RefCount+1), 0); errcode.CodeOf(err) != errcode.StaleRef {
		t.Fatalf("ref beyond the cut: %v", err)
	}
	// Depth and scope.
	dep, err := Take(ctx, p, Options{MaxDepth: 1, MaxNodes: -1})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(dep.Text(), "\n  ") {
		t.Fatalf("MaxDepth=1 has nested lines:\n%.500s", dep.Text())
	}
	sc, err := Take(ctx, p, Options{Selector: "li:nth-child(3)"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(sc.Text(), `"Act 2"`) || strings.Contains(sc.Text(), `"Act 3"`) || strings.Contains(sc.Text(), "Big page") {
		t.Fatalf("selector scope:\n%s", sc.Text())
	}
}

const queryPage = `<!doctype html><title>Query</title>
<button id="ok">OK</button><button id="cancel">Cancel</button>
<button id="off" disabled>Off</button>
<input type="checkbox" id="c1" aria-label="Check one" checked>
<input type="checkbox" id="c2" aria-label="Check two">
<div id="hid" style="visibility:hidden">hidden</div>
<p id="later"></p>
<div style="position:relative"><button id="under">Under</button>
<div style="position:absolute;left:0;top:0;width:300px;height:60px;background:red"></div></div>
<script>setTimeout(() => { document.getElementById('later').textContent = 'Loaded at last'; }, 300);</script>`

func TestQueries(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": queryPage})
	p := newPage(t, ctx, srv.URL+"/")

	_, err := ResolveSelector(ctx, p, "button")
	wantCode(t, err, errcode.Ambiguous)
	if !strings.Contains(err.Error(), "4 elements") {
		t.Errorf("ambiguous error lacks the count: %v", err)
	}
	_, err = ResolveSelector(ctx, p, "#nope")
	wantCode(t, err, errcode.NotFound)
	_, err = ResolveSelector(ctx, p, "button[")
	wantCode(t, err, errcode.InvalidArgument)
	if n, err := Count(ctx, p, "button"); err != nil || n != 4 {
		t.Fatalf("Count = %d, %v", n, err)
	}

	ok, err := ResolveSelector(ctx, p, "#ok")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := ok.Text(ctx); err != nil || s != "OK" {
		t.Fatalf("Text = %q, %v", s, err)
	}
	byRole, err := ResolveRole(ctx, p, "button", "OK")
	if err != nil {
		t.Fatal(err)
	}
	if byRole.BackendNodeID != ok.BackendNodeID {
		t.Fatalf("role+name resolved another node")
	}
	_, err = ResolveRole(ctx, p, "button", "")
	wantCode(t, err, errcode.Ambiguous)
	_, err = ResolveRole(ctx, p, "button", "Nope")
	wantCode(t, err, errcode.NotFound)

	off, _ := ResolveSelector(ctx, p, "#off")
	if en, err := off.IsEnabled(ctx); err != nil || en {
		t.Fatalf("IsEnabled(disabled) = %v, %v", en, err)
	}
	if en, err := ok.IsEnabled(ctx); err != nil || !en {
		t.Fatalf("IsEnabled(ok) = %v, %v", en, err)
	}
	c1, _ := ResolveRole(ctx, p, "checkbox", "Check one")
	c2, _ := ResolveRole(ctx, p, "checkbox", "Check two")
	if c, err := c1.IsChecked(ctx); err != nil || !c {
		t.Fatalf("IsChecked(c1) = %v, %v", c, err)
	}
	if c, err := c2.IsChecked(ctx); err != nil || c {
		t.Fatalf("IsChecked(c2) = %v, %v", c, err)
	}
	hid, _ := ResolveSelector(ctx, p, "#hid")
	if v, err := hid.IsVisible(ctx); err != nil || v {
		t.Fatalf("IsVisible(hidden) = %v, %v", v, err)
	}
	if v, err := ok.IsVisible(ctx); err != nil || !v {
		t.Fatalf("IsVisible(ok) = %v, %v", v, err)
	}
	box, err := ok.Box(ctx)
	if err != nil || box.Width <= 0 || box.Height <= 0 {
		t.Fatalf("Box = %+v, %v", box, err)
	}
	if _, ok, err := ok.Attr(ctx, "data-x"); err != nil || ok {
		t.Fatalf("Attr(absent) ok=%v err=%v", ok, err)
	}
	_, _, err = ClickPoint(ctx, hid)
	wantCode(t, err, errcode.NotVisible)
	under, _ := ResolveSelector(ctx, p, "#under")
	_, _, err = ClickPoint(ctx, under)
	wantCode(t, err, errcode.Obscured)

	// Wait: met after the timer; unmet conditions reported on timeout.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	res, err := Wait(wctx, p, WaitFor{Text: "Loaded at last", Selector: "#ok", Visible: true})
	cancel()
	if err != nil || !res.Met || len(res.Conditions) != 3 {
		t.Fatalf("Wait = %+v, %v", res, err)
	}
	wctx, cancel = context.WithTimeout(ctx, 500*time.Millisecond)
	res, err = Wait(wctx, p, WaitFor{Selector: "#ok", Text: "never there", URLPattern: regexp.MustCompile(`/nowhere$`)})
	cancel()
	wantCode(t, err, errcode.Timeout)
	if res == nil || res.Met || len(res.Conditions) != 3 || !res.Conditions[0].Met || res.Conditions[1].Met || res.Conditions[2].Met {
		t.Fatalf("timed-out Wait result = %+v", res)
	}
	// Focus.
	if err := c2.Focus(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := Take(ctx, p, Options{Interactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.Text(), `- checkbox "Check two" [checked=false] [focused]`) {
		t.Fatalf("focused state missing:\n%s", s.Text())
	}
}

func TestRedactTokens(t *testing.T) {
	for in, want := range map[string]string{
		"key sk-AbCdEfGhIjKlMnOpQrStUv12 ok":               "key [redacted] ok",
		"Bearer abcdefghijklmnopqrstuvwxyz012345":          "[redacted]",
		"0123456789abcdef0123456789abcdef":                 "[redacted]",
		"aGVsbG8gd29ybGQgdGhpcyBpcyBhIHRlc3QgMTIzNDU2Nzg=": "[redacted]",
		"a-very-long-url-slug-made-of-plain-english-words": "a-very-long-url-slug-made-of-plain-english-words",
		"Welcome, alice@example.com":                       "Welcome, alice@example.com",
		"order 1234567890123456789012 shipped":             "order 1234567890123456789012 shipped",
	} {
		if got := RedactTokens(in); got != want {
			t.Errorf("RedactTokens(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestConcurrentSnapshotter(t *testing.T) {
	ctx := testCtx(t)
	srv := serve(t, map[string]string{"/": dynamicPage})
	p := newPage(t, ctx, srv.URL+"/")
	sn := NewSnapshotter()
	errs := make(chan error, 16)
	for i := 0; i < 4; i++ {
		go func() {
			for j := 0; j < 4; j++ {
				s, err := sn.Take(ctx, p, Options{Compact: true, Revision: 1})
				if err != nil {
					errs <- err
					continue
				}
				// Another goroutine may have replaced the table: a stale
				// ref is fine, a wrong element or another error is not.
				el, err := sn.Resolve(ctx, p, "e1", 1)
				switch {
				case err == nil:
					txt, terr := el.Text(ctx)
					if terr != nil || txt != "Save" {
						err = fmt.Errorf("e1 text %q, %v (snapshot %q)", txt, terr, s.Text())
					}
				case errcode.CodeOf(err) == errcode.StaleRef:
					err = nil
				}
				errs <- err
			}
		}()
	}
	for i := 0; i < 16; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	sn.Forget(p)
	if _, err := sn.Resolve(ctx, p, "e1", 1); errcode.CodeOf(err) != errcode.StaleRef {
		t.Fatalf("after Forget: %v", err)
	}
}

// TestAttacherClose checks that an Attacher leaves no goroutine behind
// and no session attached while the browser (and its shared connection)
// keeps running.
func TestAttacherClose(t *testing.T) {
	ctx := testCtx(t)
	inner := serve(t, map[string]string{"/inner": innerPage})
	crossURL := strings.Replace(inner.URL, "127.0.0.1", "localhost", 1) + "/inner?name=cross"
	main := serve(t, map[string]string{"/": `<iframe title="Cross" src="` + crossURL + `"></iframe>`})
	p := newPage(t, ctx, main.URL+"/")
	if _, err := Wait(ctx, p, WaitFor{Selector: "iframe"}); err != nil {
		t.Fatal(err)
	}
	conn, err := testBrowser.Conn(ctx) // the browser's, dialed before the count
	if err != nil {
		t.Fatal(err)
	}
	before := goleak.IgnoreCurrent()
	a := NewAttacher(conn)
	rec := &recordingAttacher{a: a}
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := Take(ctx, WithFrames(p, rec), Options{Interactive: true})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(s.Text(), `button "Press cross"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("OOPIF button never showed:\n%s", s.Text())
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AttachFrame(ctx, "x"); err == nil {
		t.Fatal("AttachFrame after Close succeeded")
	}
	goleak.VerifyNone(t, before)
	if len(rec.seen) == 0 {
		t.Fatal("no frame was attached")
	}
	for _, s := range rec.seen {
		if _, err := cdp.Call(ctx, s, runtime.Evaluate, runtime.EvaluateParams{Expression: "1"}); err == nil {
			t.Fatal("a session of the closed Attacher still answers")
		}
	}
	// The frame survives the detach.
	a2 := NewAttacher(conn)
	defer a2.Close()
	s, err := Take(ctx, WithFrames(p, a2), Options{Interactive: true})
	if err != nil || !strings.Contains(s.Text(), `button "Press cross"`) {
		t.Fatalf("after re-attach: %v\n%s", err, s.Text())
	}
}

// recordingAttacher notes the sessions its Attacher hands out.
type recordingAttacher struct {
	a    *Attacher
	mu   sync.Mutex
	seen []cdp.Session
}

func (r *recordingAttacher) AttachFrame(ctx context.Context, targetID string) (cdp.Session, error) {
	s, err := r.a.AttachFrame(ctx, targetID)
	if err == nil {
		r.mu.Lock()
		r.seen = append(r.seen, s)
		r.mu.Unlock()
	}
	return s, err
}
