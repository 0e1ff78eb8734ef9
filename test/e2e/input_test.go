package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/test/harness"
)

// fixturePage reports everything it sees in document.title, which the
// appliance publishes in the session snapshot: the test reads the page's
// DOM through the appliance's own CDP session.
const fixturePage = `<!doctype html><title>ready</title>
<style>html,body{margin:0;height:3000px;font:20px sans-serif;background:#fff}
#sq{position:fixed;left:0;top:0;width:400px;height:300px;background:#f00}
#btn{position:fixed;left:0;top:0;width:400px;height:300px;opacity:0}
#txt{position:fixed;left:500px;top:20px;width:400px;height:40px;font-size:24px}
#rng{position:fixed;left:500px;top:120px;width:600px;height:40px;margin:0}
#cf{position:fixed;left:500px;top:220px;width:200px;height:60px}
</style>
<div id=sq></div><button id=btn></button>
<input id=txt autocomplete=off>
<input id=rng type=range min=0 max=100 value=0>
<button id=cf>confirm</button>
<script>
const say = s => { document.title = s };
let clicks = 0;
btn.onclick = () => { clicks++; sq.style.background = clicks % 2 ? '#00f' : '#f00'; say('clicked:' + clicks) };
txt.onkeydown = e => { if (e.key === 'Enter') say('submitted:' + txt.value) };
txt.onpaste = e => say('pasted:' + e.clipboardData.getData('text/plain'));
rng.oninput = () => say('range:' + rng.value);
cf.onclick = () => say('confirm:' + confirm('sure?'));
addEventListener('scroll', () => say('scroll:' + Math.round(scrollY)));
addEventListener('keyup', e => { if (e.key === 'Shift') say('shift-up:' + Date.now()) });
addEventListener('mouseup', () => { if (document.title === 'held') say('mouse-up:' + Date.now()) });
addEventListener('mousedown', e => { if (e.target === document.documentElement || e.target === document.body) say('held') });
</script>`

// interactive is an appliance showing the fixture page and a panel in
// headless Chromium with input enabled.
type interactive struct {
	a    *harness.Appliance
	id   string
	bctx context.Context
}

func startInteractive(t *testing.T) *interactive {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, fixturePage) }))
	t.Cleanup(srv.Close)
	a, s := startWithSession(t, srv.URL+"/")
	bctx := viewerBrowser(t)
	if err := a.OpenPanel(bctx, "admin", a.AdminPassword, "/?codec=vp8"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEval(bctx, connState, func(s string) bool { return s == "connected" }, 20*time.Second); err != nil {
		t.Fatalf("panel never connected: %v\n%s", err, a.LogTail(3000))
	}
	if _, err := waitEval(bctx, totalFrames, func(n int) bool { return n > 0 }, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return &interactive{a: a, id: s.ID, bctx: bctx}
}

// title waits until the streamed page's title satisfies ok.
func (in *interactive) title(t *testing.T, ok func(string) bool, timeout time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		var snap struct {
			Session struct {
				Title string `json:"title"`
			} `json:"session"`
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := in.a.Do(ctx, http.MethodGet, "/api/v1/sessions/"+in.id, "", &snap)
		cancel()
		if err == nil {
			last = snap.Session.Title
			if ok(last) {
				return last
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("page title never matched; last %q\n%s", last, in.a.LogTail(2000))
	return ""
}

func is(want string) func(string) bool { return func(s string) bool { return s == want } }

func hasPrefix(p string) func(string) bool {
	return func(s string) bool { return strings.HasPrefix(s, p) }
}

// pageStamp reads the Date.now() a fixture title ends with.
func pageStamp(t *testing.T, title string) time.Time {
	t.Helper()
	var ms int64
	if _, err := fmt.Sscanf(title[strings.IndexByte(title, ':')+1:], "%d", &ms); err != nil {
		t.Fatalf("no time stamp in %q", title)
	}
	return time.UnixMilli(ms)
}

// videoPoint maps a point of the streamed page (CSS pixels of the 1280x720
// viewport) to client coordinates on the panel's video element.
const videoRect = `(() => { const v = document.querySelector('[data-testid="session-video"]'); const r = v.getBoundingClientRect();
	const s = Math.min(r.width / v.videoWidth, r.height / v.videoHeight);
	const w = v.videoWidth * s, h = v.videoHeight * s;
	return [r.left + (r.width - w) / 2, r.top + (r.height - h) / 2, s] })()`

func (in *interactive) at(t *testing.T, x, y float64) (float64, float64) {
	t.Helper()
	r, err := chromedp.Run(in.bctx, chromedp.Evaluate[[]float64](videoRect))
	if err != nil || len(r) != 3 {
		t.Fatalf("video rect: %v %v", r, err)
	}
	return r[0] + x*r[2], r[1] + y*r[2]
}

func (in *interactive) mouse(t *testing.T, typ input.DispatchMouseEventType, x, y float64, buttons int64) {
	t.Helper()
	cx, cy := in.at(t, x, y)
	p := input.DispatchMouseEventParams{Type: typ, X: cx, Y: cy, Button: input.MouseButtonNone, Buttons: buttons}
	if typ == input.DispatchMouseEventTypeMousePressed || typ == input.DispatchMouseEventTypeMouseReleased {
		p.Button, p.ClickCount = input.MouseButtonLeft, 1
	}
	if _, err := chromedp.Call(in.bctx, input.DispatchMouseEvent, p); err != nil {
		t.Fatal(err)
	}
}

func (in *interactive) click(t *testing.T, x, y float64) {
	in.mouse(t, input.DispatchMouseEventTypeMouseMoved, x, y, 0)
	in.mouse(t, input.DispatchMouseEventTypeMousePressed, x, y, 1)
	in.mouse(t, input.DispatchMouseEventTypeMouseReleased, x, y, 0)
}

// typeKeys types into the panel's focused video element as a person would.
func (in *interactive) typeKeys(t *testing.T, s string, opts ...chromedp.KeyOption) {
	t.Helper()
	if err := chromedp.Do(in.bctx, chromedp.KeyEvent(s, opts...)); err != nil {
		t.Fatal(err)
	}
}

// TestInputThroughThePanel drives the streamed page from the panel in
// headless Chromium: clicks, typing, shortcuts, scrolling, dragging, a
// dialog, a paste, and refusals by policy.
func TestInputThroughThePanel(t *testing.T) {
	in := startInteractive(t)

	t.Run("click changes the DOM and the picture", func(t *testing.T) {
		in.click(t, 200, 150)
		in.title(t, is("clicked:1"), 5*time.Second)
		// The square turned blue: the viewer's picture shows it.
		if px, err := waitEval(in.bctx, `(() => { const v = document.querySelector('[data-testid="session-video"]');
			const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
			const g = c.getContext('2d'); g.drawImage(v, 0, 0); return Array.from(g.getImageData(200, 150, 1, 1).data.slice(0,3)) })()`,
			func(px []int) bool { return len(px) == 3 && px[2] > 200 && px[0] < 60 }, 5*time.Second); err != nil {
			t.Fatalf("picture did not turn blue: %v %v", px, err)
		}
	})

	t.Run("typing with non-ASCII text and Enter", func(t *testing.T) {
		in.click(t, 700, 40) // focus the page's input
		in.typeKeys(t, "héllo wörld\r")
		in.title(t, is("submitted:héllo wörld"), 5*time.Second)
	})

	t.Run("Ctrl+A then typing replaces", func(t *testing.T) {
		in.typeKeys(t, "a", chromedp.KeyModifiers(chromedp.ModifierCtrl))
		in.typeKeys(t, "new\r")
		in.title(t, is("submitted:new"), 5*time.Second)
	})

	t.Run("drag moves the slider", func(t *testing.T) {
		in.mouse(t, input.DispatchMouseEventTypeMouseMoved, 505, 140, 0)
		in.mouse(t, input.DispatchMouseEventTypeMousePressed, 505, 140, 1)
		for x := 520.0; x <= 1100; x += 40 {
			in.mouse(t, input.DispatchMouseEventTypeMouseMoved, x, 140, 1)
			time.Sleep(20 * time.Millisecond)
		}
		in.mouse(t, input.DispatchMouseEventTypeMouseReleased, 1100, 140, 0)
		in.title(t, func(s string) bool {
			var v int
			_, err := fmt.Sscanf(s, "range:%d", &v)
			return err == nil && v >= 90
		}, 5*time.Second)
	})

	t.Run("wheel scrolls the page", func(t *testing.T) {
		cx, cy := in.at(t, 640, 500)
		if _, err := chromedp.Call(in.bctx, input.DispatchMouseEvent, input.DispatchMouseEventParams{
			Type: input.DispatchMouseEventTypeMouseWheel, X: cx, Y: cy, DeltaX: 0.001, DeltaY: 400}); err != nil {
			t.Fatal(err)
		}
		in.title(t, func(s string) bool {
			var v int
			_, err := fmt.Sscanf(s, "scroll:%d", &v)
			return err == nil && v > 100
		}, 5*time.Second)
	})

	t.Run("a confirm dialog answered from the panel", func(t *testing.T) {
		in.click(t, 600, 250)
		if _, err := waitEval(in.bctx, `!!document.querySelector('[data-testid="dialog"]') && getComputedStyle(document.querySelector('[data-testid="dialog"]')).display !== 'none' && !document.querySelector('[data-testid="dialog"]').hidden`, func(b bool) bool { return b }, 5*time.Second); err != nil {
			t.Fatalf("no dialog in the panel: %v", err)
		}
		if err := chromedp.Do(in.bctx, chromedp.Click(`[data-testid="dialog-accept"]`)); err != nil {
			t.Fatal(err)
		}
		in.title(t, is("confirm:true"), 5*time.Second)
	})

	t.Run("paste arrives in the page", func(t *testing.T) {
		in.click(t, 700, 40)
		if _, err := chromedp.Run(in.bctx, chromedp.Evaluate[bool](`(() => { const dt = new DataTransfer(); dt.setData('text/plain', 'from the viewer');
			return document.querySelector('[data-testid="session-video"]').dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true})) })()`)); err != nil {
			t.Fatal(err)
		}
		in.title(t, is("pasted:from the viewer"), 5*time.Second)
	})

	t.Run("a held button without renewal is released by the watchdog", func(t *testing.T) {
		// Sent straight through the panel's API: no heartbeats follow, as
		// from a viewer that froze while holding the button.
		ack, err := chromedp.Run(in.bctx, chromedp.Evaluate[string](`(async () => { const a = await window.tabcast.send('pointer_down', {x: 0.25, y: 0.85, button: 'left', clickCount: 1});
			return a ? a.status : 'none' })()`, chromedp.EvalAwaitPromise))
		if err != nil || ack != "completed" {
			t.Fatalf("pointer_down: %q %v", ack, err)
		}
		held := time.Now()
		in.title(t, is("held"), 2*time.Second)
		// The page stamps the release itself (the title reaches us up to a
		// second late).
		if d := pageStamp(t, in.title(t, hasPrefix("mouse-up:"), 8*time.Second)).Sub(held); d > 6*time.Second {
			t.Errorf("button released %v after the press, want within 6 s", d)
		} else {
			t.Logf("watchdog released the button %v after the press", d.Round(10*time.Millisecond))
		}
	})

	t.Run("policy refusals come back with their codes", func(t *testing.T) {
		for _, c := range []struct{ kind, fields, code string }{
			{"key_down", `{key: 'o', code: 'KeyO', modifiers: 2}`, "shortcut_blocked"},
			{"navigate", `{url: 'file:///etc/passwd'}`, "navigation_blocked"},
			{"navigate", `{url: 'http://169.254.169.254/'}`, "navigation_blocked"},
		} {
			ack, err := chromedp.Run(in.bctx, chromedp.Evaluate[string](`(async () => { const a = await window.tabcast.send('`+c.kind+`', `+c.fields+`);
				return a ? a.status + ':' + (a.code || '') : 'none' })()`, chromedp.EvalAwaitPromise))
			if err != nil || ack != "rejected:"+c.code {
				t.Errorf("%s %s: ack %q (%v), want rejected:%s", c.kind, c.fields, ack, err, c.code)
			}
		}
	})

	// Last: this one ends the viewer.
	t.Run("a held key is released when the viewer dies", func(t *testing.T) {
		ack, err := chromedp.Run(in.bctx, chromedp.Evaluate[string](`(async () => { const a = await window.tabcast.send('key_down', {key: 'Shift', code: 'ShiftLeft', modifiers: 8});
			return a ? a.status : 'none' })()`, chromedp.EvalAwaitPromise))
		if err != nil || ack != "completed" {
			t.Fatalf("key_down Shift: %q %v", ack, err)
		}
		// Kill the viewer's browser outright: no goodbye on any channel.
		killed := time.Now()
		if err := chromedp.Cancel(in.bctx); err != nil {
			t.Fatal(err)
		}
		if d := pageStamp(t, in.title(t, hasPrefix("shift-up:"), 3*time.Second)).Sub(killed); d > time.Second {
			t.Errorf("keyup reached the page %v after the viewer died, want within 1 s", d)
		} else {
			t.Logf("keyup reached the page %v after the viewer died", d.Round(10*time.Millisecond))
		}
	})
}
