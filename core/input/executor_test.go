package input

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
)

func TestClickChangesDOM(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/click")
	h.click(200, 150)
	var text string
	h.eval(`document.getElementById('b').textContent`, &text)
	if text != "clicked" {
		t.Fatalf("button text = %q, want clicked", text)
	}
}

func TestTypeUnicodeAndEnter(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/form")
	h.click(100, 20) // focus #i
	h.typeText("héllo wörld")
	h.press("Enter", "Enter", 0)
	var got struct {
		Value     string   `json:"value"`
		Submitted int      `json:"submitted"`
		Keys      []string `json:"keys"`
	}
	h.eval(`({value: document.getElementById('i').value, submitted: window.submitted || 0, keys: window.keys})`, &got)
	if got.Value != "héllo wörld" {
		t.Errorf("value = %q, want %q", got.Value, "héllo wörld")
	}
	if got.Submitted != 1 {
		t.Errorf("form submitted %d times, want 1", got.Submitted)
	}
	if len(got.Keys) == 0 || got.Keys[len(got.Keys)-1] != "Enter:13" {
		t.Errorf("keydown log ends %q, want Enter:13", got.Keys)
	}
	if !contains(got.Keys, "h:72") || !contains(got.Keys, " :32") {
		t.Errorf("keydown log %q lacks h:72 or space:32 (keyCode)", got.Keys)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestSelectAllReplacesAndUndo(t *testing.T) {
	for _, mod := range []struct {
		name string
		bit  int
	}{{"ctrl", action.ModCtrl}, {"meta", action.ModMeta}} {
		t.Run(mod.name, func(t *testing.T) {
			h := newHarness(t, testPolicy())
			h.load("/form")
			h.click(100, 20)
			h.typeText("old text")
			h.press("a", "KeyA", mod.bit)
			h.typeText("new")
			var v string
			h.eval(`document.getElementById('i').value`, &v)
			if v != "new" {
				t.Fatalf("after select-all and typing: %q, want new", v)
			}
			// One undo takes back exactly the last typing step, not two.
			h.press("z", "KeyZ", mod.bit)
			h.eval(`document.getElementById('i').value`, &v)
			if v != "old text" {
				t.Fatalf("after one undo: %q, want %q", v, "old text")
			}
			h.press("z", "KeyZ", mod.bit|action.ModShift)
			h.eval(`document.getElementById('i').value`, &v)
			if v != "new" {
				t.Fatalf("after redo: %q, want new", v)
			}
		})
	}
}

func TestBackspaceArrowsTab(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/form")
	h.click(100, 20)
	h.typeText("abc")
	h.press("ArrowLeft", "ArrowLeft", 0)
	h.press("Backspace", "Backspace", 0)
	h.press("Home", "Home", 0)
	h.typeText("x")
	h.press("End", "End", 0)
	h.press("Delete", "Delete", 0) // nothing after the caret
	h.press("Tab", "Tab", 0)
	var got [2]string
	h.eval(`[document.getElementById('i').value, document.activeElement.id]`, &got)
	if got != [2]string{"xac", "j"} {
		t.Fatalf("value/focus = %q, want xac / j", got)
	}
	h.press("Tab", "Tab", action.ModShift)
	h.eval(`[document.getElementById('i').value, document.activeElement.id]`, &got)
	if got[1] != "i" {
		t.Fatalf("Shift+Tab focus = %q, want i", got[1])
	}
}

func TestWheelScrolls(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/scroll")
	nx, ny := h.at(300, 300)
	h.do(action.Action{Kind: action.PointerMove, X: nx, Y: ny})
	h.do(action.Action{Kind: action.Wheel, X: nx, Y: ny, DeltaY: 400})
	var y float64
	h.eventually("window.scrollY > 0", func() bool {
		h.eval(`window.scrollY`, &y)
		return y > 0
	})
	// Horizontal delta alone is accepted too (both deltas are always sent).
	h.do(action.Action{Kind: action.Wheel, X: nx, Y: ny, DeltaX: 100})
}

func TestDragMovesRange(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/range")
	x0, y0 := h.at(8, 20) // the thumb at value 0
	h.do(action.Action{Kind: action.PointerMove, X: x0, Y: y0})
	h.do(action.Action{Kind: action.PointerDown, X: x0, Y: y0, Button: "left"})
	for _, px := range []float64{100, 300, 500, 700, 760} {
		x, y := h.at(px, 20)
		h.do(action.Action{Kind: action.PointerMove, X: x, Y: y})
	}
	x1, y1 := h.at(760, 20)
	h.do(action.Action{Kind: action.PointerUp, X: x1, Y: y1, Button: "left"})
	var v string
	h.eval(`document.getElementById('r').value`, &v)
	if n, err := strconv.Atoi(v); err != nil || n < 70 || n > 80 {
		t.Fatalf("range value after drag = %s, want about 76", v)
	}
}

func TestConfirmAndPrompt(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/dialog")
	h.refused(action.Action{Kind: action.DialogResponse, Accept: true}, errcode.NoDialog)

	for _, accept := range []bool{true, false} {
		h.click(100, 50) // confirm('sure?'): the click returns once the dialog is up
		d := waitDialog(t, h)
		if d.Type != "confirm" || d.Message != "sure?" {
			t.Fatalf("dialog = %+v, want confirm 'sure?'", d)
		}
		// The renderer is blocked: input is refused, not queued for 30 s.
		nx, ny := h.at(10, 10)
		h.refused(action.Action{Kind: action.PointerDown, X: nx, Y: ny}, errcode.Conflict)
		h.do(action.Action{Kind: action.DialogResponse, Accept: accept})
		waitClosed(t, h)
		var ans string
		h.eval(`window.answer`, &ans)
		if want := map[bool]string{true: "true", false: "false"}[accept]; ans != want {
			t.Fatalf("confirm answered %v: page saw %q", accept, ans)
		}
	}

	h.click(400, 50)
	d := waitDialog(t, h)
	if d.Type != "prompt" || d.Message != "name?" || d.DefaultPrompt != "def" {
		t.Fatalf("dialog = %+v, want prompt 'name?' 'def'", d)
	}
	h.do(action.Action{Kind: action.DialogResponse, Accept: true, PromptText: "tabcast ✓"})
	waitClosed(t, h)
	var ans string
	h.eval(`window.answer`, &ans)
	if ans != "tabcast ✓" {
		t.Fatalf("prompt answer = %q", ans)
	}
}

func TestBeforeUnload(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/unload")
	h.click(10, 10) // beforeunload asks only after a user gesture
	rev := h.ex.PageRevision()

	// Reload asks first; staying keeps the page.
	h.do(action.Action{Kind: action.Reload})
	if d := waitDialog(t, h); d.Type != "beforeunload" {
		t.Fatalf("dialog = %+v, want beforeunload", d)
	}
	h.do(action.Action{Kind: action.DialogResponse, Accept: false})
	waitClosed(t, h)
	var title string
	h.eval(`document.title`, &title)
	if title != "unload" || h.ex.PageRevision() != rev {
		t.Fatalf("after staying: title %q, revision %d (was %d)", title, h.ex.PageRevision(), rev)
	}

	// Navigate returns while the dialog asks; leaving completes it.
	h.do(action.Action{Kind: action.Navigate, URL: fixture.URL + "/a"})
	if d := waitDialog(t, h); d.Type != "beforeunload" {
		t.Fatalf("dialog = %+v, want beforeunload", d)
	}
	h.do(action.Action{Kind: action.DialogResponse, Accept: true})
	h.eventually("page a after leaving", func() bool {
		st := h.ex.PageState()
		return st.URL == fixture.URL+"/a" && st.PageRevision != rev
	})
}

func waitDialog(t *testing.T, h *harness) Dialog {
	t.Helper()
	select {
	case d := <-h.rec.dialogs:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no dialog_opened")
	}
	return Dialog{}
}

func waitClosed(t *testing.T, h *harness) {
	t.Helper()
	select {
	case <-h.rec.closed:
	case <-time.After(10 * time.Second):
		t.Fatal("no dialog closed")
	}
}

func TestClipboardWritePasteCopy(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/paste")
	const text = "pasted ✓ text"
	h.do(action.Action{Kind: action.ClipboardWrite, Text: text})
	h.click(100, 20)
	h.press("v", "KeyV", action.ModCtrl)
	var got struct {
		Value  string   `json:"value"`
		Pastes []string `json:"pastes"`
	}
	h.eval(`({value: document.getElementById('i').value, pastes: window.pastes})`, &got)
	if got.Value != text || len(got.Pastes) != 1 || got.Pastes[0] != text {
		t.Fatalf("after Ctrl+V: value %q, paste events %q; want %q once", got.Value, got.Pastes, text)
	}

	// Copy-out: Ctrl+C answers the selected text to the producer.
	h.eval(`document.getElementById('i').setSelectionRange(0, 6), 1`, nil)
	res := h.press("c", "KeyC", action.ModCtrl)
	if res.Text != "pasted" {
		t.Fatalf("Ctrl+C result text = %q, want pasted", res.Text)
	}
	// Cut removes it and keeps it; paste at the end puts it back.
	h.press("x", "KeyX", action.ModCtrl)
	h.press("End", "End", 0)
	h.press("v", "KeyV", action.ModMeta)
	h.eval(`({value: document.getElementById('i').value, pastes: window.pastes})`, &got)
	if got.Value != " ✓ textpasted" {
		t.Fatalf("after cut and paste: %q", got.Value)
	}

	// Another session's page shares Chromium but not the clipboard.
	o := newHarness(t, testPolicy())
	o.load("/paste")
	o.click(100, 20)
	o.press("v", "KeyV", action.ModCtrl)
	o.press("Insert", "Insert", action.ModShift)
	o.eval(`({value: document.getElementById('i').value, pastes: window.pastes})`, &got)
	if got.Value != "" || len(got.Pastes) != 2 || got.Pastes[0] != "" {
		t.Fatalf("other page after paste: value %q, pastes %q; want nothing pasted", got.Value, got.Pastes)
	}

	h.refused(action.Action{Kind: action.ClipboardWrite, Text: strings.Repeat("x", 1<<20+1)}, errcode.TooLarge)
}

func TestClipboardRead(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/paste")
	h.eval(`(() => { const r = document.createRange(); r.selectNodeContents(document.getElementById('p'));
		const s = getSelection(); s.removeAllRanges(); s.addRange(r); return 1 })()`, nil)
	if res := h.do(action.Action{Kind: action.ClipboardRead}); res.Text != "Some selectable text" {
		t.Fatalf("selection = %q", res.Text)
	}
	h.eval(`(() => { const i = document.getElementById('i'); i.value = 'abcdef'; i.focus(); i.setSelectionRange(1, 4); return 1 })()`, nil)
	if res := h.do(action.Action{Kind: action.ClipboardRead}); res.Text != "bcd" {
		t.Fatalf("input selection = %q, want bcd", res.Text)
	}
	h.eval(`(() => { const i = document.getElementById('pw'); i.focus(); i.select(); return 1 })()`, nil)
	if res := h.do(action.Action{Kind: action.ClipboardRead}); res.Text != "" {
		t.Fatal("a password field's selection was read")
	}
	small := testPolicy()
	small.MaxClipboard = 4
	s := newHarness(t, small)
	s.load("/paste")
	s.eval(`(() => { const i = document.getElementById('i'); i.value = 'abcdef'; i.focus(); i.select(); return 1 })()`, nil)
	s.refused(action.Action{Kind: action.ClipboardRead}, errcode.TooLarge)
}

func TestBlockedShortcuts(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/form")
	h.click(100, 20)
	for _, k := range []action.Action{
		{Key: "o", Code: "KeyO", Modifiers: action.ModCtrl},
		{Key: "s", Code: "KeyS", Modifiers: action.ModMeta},
		{Key: "P", Code: "KeyP", Modifiers: action.ModCtrl | action.ModShift},
		{Key: "I", Code: "KeyI", Modifiers: action.ModCtrl | action.ModShift},
		{Key: "F12", Code: "F12"},
	} {
		k.Kind = action.KeyDown
		h.refused(k, errcode.ShortcutBlocked)
		k.Kind = action.KeyUp
		h.do(k) // nothing was pressed: a no-op
	}
	var keys []string
	h.eval(`window.keys`, &keys)
	if len(keys) != 0 {
		t.Fatalf("page saw blocked keys: %q", keys)
	}
	h.press("i", "KeyI", action.ModCtrl) // Ctrl+I alone is not blocked
	h.eval(`window.keys`, &keys)
	if !contains(keys, "i:73") {
		t.Fatalf("Ctrl+I did not reach the page: %q", keys)
	}
}

func TestNavigationBlocked(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/a")
	for _, u := range []string{
		"file:///etc/passwd",
		"chrome://settings",
		"devtools://devtools/bundled/inspector.html",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://loopback.test/",
		"http://2852039166/",
		"javascript:alert(1)",
		"data:text/html,hi",
		other.URL + "/direct",
	} {
		ae := h.refused(action.Action{Kind: action.Navigate, URL: u}, errcode.NavigationBlocked)
		for _, part := range []string{"passwd", "settings", "169.254", "10.0.0.1", "loopback", "2852039166", "alert", "127.0.0.1", "devtools", "file"} {
			if strings.Contains(ae.Message, part) {
				t.Errorf("refusal of %q echoes %q: %q", u, part, ae.Message)
			}
		}
	}
	// A redirect from an allowed page, and a link click, to a denied address
	// are refused at the request.
	_, err := h.ex.Execute(h.ctx, h.pid, action.Action{Kind: action.Navigate, URL: fixture.URL + "/redirect"})
	var ae *errcode.Error
	if !errors.As(err, &ae) || ae.Code != errcode.NavigationBlocked {
		t.Errorf("navigate to a redirect into a private address: %v, want navigation_blocked", err)
	}
	h.load("/link")
	h.click(100, 100)
	h.eventually("the link navigation to end", func() bool {
		st := h.ex.PageState()
		return !strings.HasSuffix(st.URL, "/link") && !st.Loading
	})
	if n := hits.Load(); n != 0 {
		t.Fatalf("the denied loopback server got %d requests", n)
	}
	if st := h.ex.PageState(); strings.Contains(st.Title, "other") {
		t.Fatalf("the denied page loaded: %+v", st)
	}
}

func TestNavigateBackForwardState(t *testing.T) {
	h := newHarness(t, testPolicy())
	rev0 := h.ex.PageRevision()
	stateIs := func(what string, f func(PageState) bool) PageState {
		t.Helper()
		h.eventually(what, func() bool {
			st, ok := h.rec.last()
			if testing.Verbose() {
				t.Logf("%+v", st)
			}
			return ok && f(st) && st == h.ex.PageState()
		})
		st, _ := h.rec.last()
		return st
	}
	h.do(action.Action{Kind: action.Navigate, URL: fixture.URL + "/a"})
	a := stateIs("page a", func(s PageState) bool { return s.URL == fixture.URL+"/a" && s.Title == "page a" && !s.Loading })
	if a.PageRevision == rev0 || a.CanGoForward || !a.CanGoBack {
		t.Fatalf("state after navigate = %+v (revision before %d)", a, rev0)
	}
	h.do(action.Action{Kind: action.Navigate, URL: fixture.URL + "/b"})
	b := stateIs("page b", func(s PageState) bool { return s.URL == fixture.URL+"/b" && s.Title == "page b" && !s.Loading })
	if b.PageRevision == a.PageRevision {
		t.Fatal("PageRevision did not change on navigation")
	}
	h.do(action.Action{Kind: action.Back})
	back := stateIs("back to a", func(s PageState) bool { return s.URL == fixture.URL+"/a" && s.CanGoForward })
	if back.PageRevision == b.PageRevision || back.Title != "page a" {
		t.Fatalf("state after back = %+v", back)
	}
	h.do(action.Action{Kind: action.Forward})
	fwd := stateIs("forward to b", func(s PageState) bool { return s.URL == fixture.URL+"/b" && !s.CanGoForward })
	if fwd.PageRevision == back.PageRevision {
		t.Fatal("PageRevision did not change on forward")
	}
	h.refused(action.Action{Kind: action.Forward}, errcode.Failed)

	// Same-document navigation updates the URL but keeps the revision.
	h.eval(`history.pushState({}, '', '/b#spa'), 1`, nil)
	spa := stateIs("pushState", func(s PageState) bool { return strings.HasSuffix(s.URL, "/b#spa") })
	if spa.PageRevision != fwd.PageRevision {
		t.Fatal("pushState changed PageRevision")
	}
	h.eval(`document.title = 'retitled', 1`, nil)
	stateIs("title change", func(s PageState) bool { return s.Title == "retitled" })

	h.do(action.Action{Kind: action.Reload})
	stateIs("reload", func(s PageState) bool { return s.Title == "page b" && s.PageRevision != spa.PageRevision && !s.Loading })
	h.do(action.Action{Kind: action.Stop})

	// Coordinates aimed at an older page are refused.
	h.refused(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, PageRevision: a.PageRevision}, errcode.StalePage)
}

func TestViewport(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/a")
	rev := h.ex.PageRevision()
	res := h.do(action.Action{Kind: action.Viewport, Width: 800, Height: 600})
	var size [2]int
	h.eval(`[innerWidth, innerHeight]`, &size)
	if size != [2]int{800, 600} {
		t.Fatalf("inner size = %v, want 800x600", size)
	}
	if w, hh := h.ex.Viewport(); w != 800 || hh != 600 {
		t.Fatalf("Viewport() = %dx%d", w, hh)
	}
	if res.PageRevision != rev || h.ex.PageRevision() != rev {
		t.Fatal("viewport changed PageRevision")
	}
	// Clamped into the policy's bounds.
	h.do(action.Action{Kind: action.Viewport, Width: 100, Height: 5000})
	h.eval(`[innerWidth, innerHeight]`, &size)
	if size != [2]int{320, 1080} {
		t.Fatalf("clamped inner size = %v, want 320x1080", size)
	}
	h.refused(action.Action{Kind: action.Viewport, Width: 0, Height: 10}, errcode.InvalidArgument)

	// Coordinates follow the new size, and a resize from elsewhere is noticed.
	if err := h.page.SetViewport(h.ctx, 1000, 500); err != nil {
		t.Fatal(err)
	}
	h.eventually("Viewport() to follow an outside resize", func() bool {
		w, hh := h.ex.Viewport()
		return w == 1000 && hh == 500
	})
	h.load("/click")
	h.click(200, 150)
	var text string
	h.eval(`document.getElementById('b').textContent`, &text)
	if text != "clicked" {
		t.Fatalf("click after resize missed: %q", text)
	}
}

func TestButtonsPolicy(t *testing.T) {
	pol := testPolicy()
	pol.AllowRightClick = false
	h := newHarness(t, pol)
	h.load("/events")
	h.refused(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "right"}, errcode.NotAllowed)
	h.refused(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "middle"}, errcode.NotAllowed)
	h.refused(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "fourth"}, errcode.InvalidArgument)

	ok := newHarness(t, testPolicy())
	ok.load("/events")
	ok.do(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "right"})
	ok.do(action.Action{Kind: action.PointerUp, X: 0.5, Y: 0.5, Button: "right"})
	var log []string
	ok.eval(`window.log`, &log)
	if !contains(log, "mousedown:2") || !contains(log, "mouseup:2") {
		t.Fatalf("right click not seen: %q", log)
	}
}

// TestHeldIsTheDispatchers: the executor keeps no held input. A release
// lifts a button only when the dispatcher says it is down (Buttons), moves
// carry what is down, and release_all is the dispatcher's to expand.
func TestHeldIsTheDispatchers(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/events")
	h.do(action.Action{Kind: action.PointerUp, X: 0.5, Y: 0.5, Button: "left"}) // not down: nothing
	h.do(action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "left"})
	h.do(action.Action{Kind: action.PointerUp, X: 0.5, Y: 0.5, Button: "left"})
	var log []string
	h.eval(`window.log`, &log)
	if n := strings.Count(strings.Join(log, " "), "mouseup:0"); n != 1 {
		t.Fatalf("page saw %d left releases, want 1: %q", n, log)
	}
	h.refused(action.Action{Kind: action.ReleaseAll}, errcode.UnknownKind)
	h.refused(action.Action{Kind: "teleport"}, errcode.UnknownKind)
	h.refused(action.Action{Kind: action.PointerMove, X: nan(), Y: 0}, errcode.InvalidArgument)
	h.refused(action.Action{Kind: action.TextInsert, Text: strings.Repeat("x", 1<<20+1)}, errcode.TooLarge)
}

func TestTextInsert(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/form")
	h.click(100, 20)
	h.do(action.Action{Kind: action.TextInsert, Text: "日本語 ✓ "})
	h.typeText("ok")
	var v string
	h.eval(`document.getElementById('i').value`, &v)
	if v != "日本語 ✓ ok" {
		t.Fatalf("value = %q", v)
	}
}

func TestCloseNoLeak(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := sharedBrowser(t).NewPage(ctx, browser.PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(ctx)
	opts := goleak.IgnoreCurrent()
	rec := newRecorder()
	ex, err := New(p, testPolicy(), rec.events(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, fixture.URL+"/events"); err != nil {
		t.Fatal(err)
	}
	// A click dials the executor's own connection: Close ends its reader.
	if _, err := ex.Execute(ctx, "p", action.Action{Kind: action.Click, X: 0.5, Y: 0.5, Button: "left"}); err != nil {
		t.Fatal(err)
	}
	if ex.pipe == nil {
		t.Fatal("no own connection after a click")
	}
	ex.Close()
	ex.Close()
	_, err = ex.Execute(ctx, "p", action.Action{Kind: action.Heartbeat})
	var ae *errcode.Error
	if !errors.As(err, &ae) || ae.Code != errcode.SessionClosed {
		t.Fatalf("Execute after Close: %v, want session_closed", err)
	}
	// Chromium keeps its connections to the fixture server alive.
	goleak.VerifyNone(t, opts, goleak.IgnoreAnyFunction("net/http.(*conn).serve"))
}

func nan() float64 { return math.NaN() }

// TestPickerTitleHidden: while a tab-capture start retitles the tab (the
// browser's capture picker selects it by title), the page state keeps the
// page's own title; a real new title shows.
func TestPickerTitleHidden(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/a")
	h.eventually("the title", func() bool { return h.ex.PageState().Title == "page a" })
	h.eval(`document.title = "tabcast-capture-0123abcd"`, nil)
	time.Sleep(2500 * time.Millisecond) // two title polls
	if got := h.ex.PageState().Title; got != "page a" {
		t.Fatalf("title %q while the tab carries the capture marker, want the page's own", got)
	}
	h.eval(`document.title = "renamed"`, nil)
	h.eventually("the new title", func() bool { return h.ex.PageState().Title == "renamed" })
}

// A click action is a press and its release sent back to back on the
// executor's own connection: the page sees the full sequence, in order,
// with the click count and modifiers, and nothing stays held.
func TestClickAction(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/clicks")
	nx, ny := h.at(50, 50)
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 1})
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 2})
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 1, Modifiers: action.ModShift})
	var log []string
	h.eval(`window.log`, &log)
	want := []string{
		"mousedown:0:1:1:false", "mouseup:0:1:0:false", "click:0:1:0:false",
		"mousedown:0:2:1:false", "mouseup:0:2:0:false", "click:0:2:0:false", "dblclick:0:2:0:false",
		"mousedown:0:1:1:true", "mouseup:0:1:0:true", "click:0:1:0:true",
	}
	if strings.Join(log, " ") != strings.Join(want, " ") {
		t.Fatalf("page saw\n%q\nwant\n%q", log, want)
	}
	h.ex.mu.Lock()
	pipelined := h.ex.pipe != nil
	h.ex.mu.Unlock()
	if !pipelined {
		t.Fatal("the clicks did not go over the executor's own connection")
	}
	pol := testPolicy()
	pol.AllowRightClick = false
	r := newHarness(t, pol)
	r.load("/clicks")
	r.refused(action.Action{Kind: action.Click, X: 0.5, Y: 0.5, Button: "right"}, errcode.NotAllowed)
}

// Without its own connection (it closed, or could not be dialed) a click
// still works, one round trip per event on the page's connection, and the
// connection is dialed again later.
func TestClickActionFallback(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/clicks")
	nx, ny := h.at(50, 50)
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 1})
	h.ex.mu.Lock()
	first := h.ex.pipe
	first.Close() // as when Chromium drops the socket
	h.ex.mu.Unlock()
	h.ex.mu.Lock()
	h.ex.pipeTried = time.Now() // within pipeRetry: no new dial yet
	h.ex.mu.Unlock()
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 1})
	h.ex.mu.Lock()
	if h.ex.pipe != nil {
		t.Error("a closed connection was kept")
	}
	h.ex.pipeTried = time.Time{}
	h.ex.mu.Unlock()
	h.do(action.Action{Kind: action.Click, X: nx, Y: ny, Button: "left", ClickCount: 1})
	h.ex.mu.Lock()
	again := h.ex.pipe
	h.ex.mu.Unlock()
	if again == nil || again == first {
		t.Error("the connection was not dialed again")
	}
	var log []string
	h.eval(`window.log`, &log)
	if n := strings.Count(strings.Join(log, " "), "click:0:1:0"); n != 3 {
		t.Fatalf("%d clicks seen, want 3: %q", n, log)
	}
}

// A key press action is a key's down and up, pipelined like a click's
// press and release, under the same shortcut policy; a clipboard shortcut
// takes the step-by-step path and still answers its text.
func TestKeyPressAction(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/events")
	h.do(action.Action{Kind: action.KeyPress, Key: "a", Code: "KeyA"})
	h.do(action.Action{Kind: action.KeyPress, Key: "Tab", Code: "Tab", Modifiers: action.ModShift})
	h.refused(action.Action{Kind: action.KeyPress, Key: "o", Code: "KeyO", Modifiers: action.ModCtrl}, errcode.ShortcutBlocked)
	var log []string
	h.eval(`window.log`, &log)
	if got := strings.Join(log, " "); got != "keydown:a keyup:a keydown:Tab keyup:Tab" {
		t.Fatalf("page saw %q", got)
	}

	c := newHarness(t, testPolicy())
	c.load("/paste")
	c.do(action.Action{Kind: action.ClipboardWrite, Text: "abc"})
	c.click(100, 20)
	c.do(action.Action{Kind: action.KeyPress, Key: "v", Code: "KeyV", Modifiers: action.ModCtrl})
	c.do(action.Action{Kind: action.KeyPress, Key: "a", Code: "KeyA", Modifiers: action.ModCtrl})
	if res := c.do(action.Action{Kind: action.KeyPress, Key: "c", Code: "KeyC", Modifiers: action.ModCtrl}); res.Text != "abc" {
		t.Fatalf("Ctrl+C as a key press answered %q, want abc", res.Text)
	}
}

// text_insert with replace selects all of the focused field and types over
// it (or deletes it for no text), the keys and the text sent back to back.
func TestTextInsertReplace(t *testing.T) {
	h := newHarness(t, testPolicy())
	h.load("/form")
	h.click(100, 20)
	h.typeText("old text")
	value := func() string {
		var v string
		h.eval(`document.getElementById('i').value`, &v)
		return v
	}
	h.do(action.Action{Kind: action.TextInsert, Text: "new ✓", Replace: true})
	if v := value(); v != "new ✓" {
		t.Fatalf("after replace: %q", v)
	}
	h.do(action.Action{Kind: action.TextInsert, Replace: true})
	if v := value(); v != "" {
		t.Fatalf("after replace with nothing: %q", v)
	}
	h.do(action.Action{Kind: action.TextInsert, Text: "again", Replace: true})
	if v := value(); v != "again" {
		t.Fatalf("after replace of an empty field: %q", v)
	}
	h.refused(action.Action{Kind: action.TextInsert, Text: strings.Repeat("x", 1<<20+1), Replace: true}, errcode.TooLarge)
}
