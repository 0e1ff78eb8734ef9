package signaling_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/tabcast/tabcast/core/action"
)

type rect struct {
	Left   float64 `json:"left"`
	Top    float64 `json:"top"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

// nextControl returns the next submitted control envelope, skipping
// pointer-channel ones (moves the browser makes along the way) and
// heartbeats (the panel's timer sends one while a button or key is held,
// so a loaded machine may see one between a press and its release).
func nextControl(t *testing.T, in *testProducer) action.Envelope {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		e := in.next(t, time.Until(deadline))
		if !e.Action.OnPointerChannel() && e.Action.Kind != action.Heartbeat {
			return e
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 0.01 }

// TestPanelInput: in headless Chromium the panel turns real mouse and key
// events on the video into envelopes that reach the session's input with
// normalized coordinates (the letterbox makes none), fenced with the
// welcome's grant; page state drives the address bar and navigation
// buttons; dialogs are shown and answered; paste becomes clipboard_write
// then Ctrl+V; acks and latency are shown.
func TestPanelInput(t *testing.T) {
	e := newEnv(t, "vp8")
	servePanel(e)
	ctx := startChromium(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/?codec=vp8")); err != nil {
		t.Fatal(err)
	}
	type inputView struct {
		Enabled            bool   `json:"enabled"`
		ProducerID         string `json:"producerId"`
		ProducerGeneration uint64 `json:"producerGeneration"`
		PageRevision       uint64 `json:"pageRevision"`
	}
	var iv inputView
	deadline := time.Now().Add(20 * time.Second)
	for {
		r, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
			Input  *inputView `json:"input"`
			Width  int        `json:"width"`
			State  string     `json:"state"`
			Label  string     `json:"label"`
			Addr   string     `json:"addr"`
			Frames int        `json:"frames"`
		}](`(() => { const v = document.querySelector('[data-testid="session-video"]');
			return {input: window.tabcast.input, width: v.videoWidth, frames: v.getVideoPlaybackQuality().totalVideoFrames,
			  state: document.querySelector('[data-testid="input-state"]').dataset.state,
			  label: document.querySelector('[data-testid="input-state"]').textContent,
			  addr: document.querySelector('[data-testid="address"]').value}; })()`))
		if err != nil {
			t.Fatal(err)
		}
		if r.Input != nil && r.Input.Enabled && r.Width > 0 && r.Frames > 0 && r.State == "enabled" &&
			r.Addr == "https://example.test/" {
			iv = *r.Input
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("panel input not ready after 20 s: %+v (input %+v)", r, r.Input)
		}
		time.Sleep(100 * time.Millisecond)
	}
	in := e.media.lastProducer()
	if iv.ProducerID != in.id || iv.ProducerGeneration != 1 || iv.PageRevision != 1 {
		t.Fatalf("panel grant %+v", iv)
	}

	// Give the video element another aspect than the 16:9 picture: 800x600
	// shows 800x450 with 75 px bars above and below.
	pic, err := chromedp.Run(ctx, chromedp.Evaluate[rect](`(() => {
		const v = document.querySelector('[data-testid="session-video"]');
		v.style.width = '800px'; v.style.height = '600px'; v.style.right = 'auto'; v.style.bottom = 'auto';
		const p = window.tabcast.pictureRect();
		return {left: p.left, top: p.top, width: p.width, height: p.height};
	})()`))
	if err != nil {
		t.Fatal(err)
	}
	if !near(pic.Width, 800) || !near(pic.Height, 450) {
		t.Fatalf("picture %+v, want 800x450", pic)
	}

	// A click in the top bar makes no event; one at (0.25, 0.75) of the
	// picture is a pointer_down there, then pointer_up. Neither carries a
	// click count: the appliance counts multi-clicks.
	if err := chromedp.Do(ctx, chromedp.MouseClickXY(pic.Left+400, pic.Top-40)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.MouseClickXY(pic.Left+0.25*pic.Width, pic.Top+0.75*pic.Height)); err != nil {
		t.Fatal(err)
	}
	down := nextControl(t, in)
	if down.Action.Kind != action.PointerDown || !near(down.Action.X, 0.25) || !near(down.Action.Y, 0.75) ||
		down.Action.Button != "left" || down.Action.ClickCount != 0 || down.ControlSeq != 1 {
		t.Fatalf("first control action %+v (the letterbox click must make none)", down)
	}
	if down.ProducerID != in.id || down.ProducerGeneration != 1 || down.PeerID == "" || down.BrowserSessionID != "s1" ||
		down.Action.PageRevision != 1 || down.ActionID == "" {
		t.Fatalf("envelope identity %+v", down)
	}
	if up := nextControl(t, in); up.Action.Kind != action.PointerUp || !near(up.Action.X, 0.25) || up.ControlSeq != 2 {
		t.Fatalf("then %+v", up)
	}

	// The click focused the keyboard: a key press arrives with key and code.
	if err := chromedp.Do(ctx, chromedp.KeyEvent("a")); err != nil {
		t.Fatal(err)
	}
	kd := nextControl(t, in)
	if kd.Action.Kind != action.KeyDown || kd.Action.Key != "a" || kd.Action.Code != "KeyA" || kd.Action.Modifiers != 0 || kd.ControlSeq != 3 {
		t.Fatalf("key down %+v", kd)
	}
	if ku := nextControl(t, in); ku.Action.Kind != action.KeyUp || ku.Action.Code != "KeyA" {
		t.Fatalf("key up %+v", ku)
	}
	// Shift+B: the modifier key travels too, and the modifier bits.
	if err := chromedp.Do(ctx, chromedp.KeyEvent("B", chromedp.KeyModifiers(chromedp.ModifierShift))); err != nil {
		t.Fatal(err)
	}
	if kd := nextControl(t, in); kd.Action.Kind != action.KeyDown || kd.Action.Key != "B" || kd.Action.Code != "KeyB" || kd.Action.Modifiers != action.ModShift {
		t.Fatalf("shift+B %+v", kd)
	}
	nextControl(t, in) // its key_up

	type shown struct {
		AckStatus  string `json:"ackStatus"`
		AckLatency string `json:"ackLatency"`
		Addr       string `json:"addr"`
		BackOff    bool   `json:"backOff"`
		Dialog     bool   `json:"dialog"`
		DialogMsg  string `json:"dialogMsg"`
		Status     string `json:"status"`
	}
	look := func() shown {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Evaluate[shown](`(() => { const q = (id) => document.querySelector('[data-testid="' + id + '"]');
			return {ackStatus: window.tabcast.lastAck ? window.tabcast.lastAck.status : '', ackLatency: q('latency-ack').textContent,
			  addr: q('address').value, backOff: q('nav-back').disabled, dialog: !q('dialog').hidden,
			  dialogMsg: q('dialog-message').textContent, status: q('status-line').textContent}; })()`))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	waitFor(t, 5*time.Second, "ack shown", func() bool {
		s := look()
		return s.AckStatus == "completed" && len(s.AckLatency) > 3 && s.AckLatency[len(s.AckLatency)-3:] == " ms"
	})
	if !look().BackOff {
		t.Fatal("back enabled on the first page")
	}

	// The address bar navigates; page_state updates it and enables back.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const a = document.querySelector('[data-testid="address"]');
		a.focus(); a.value = 'example.test/next'; return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	if nav := nextControl(t, in); nav.Action.Kind != action.Navigate || nav.Action.URL != "https://example.test/next" {
		t.Fatalf("navigate %+v", nav)
	}
	waitFor(t, 5*time.Second, "page state shown", func() bool {
		s := look()
		return s.Addr == "https://example.test/next" && !s.BackOff
	})
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.querySelector('[data-testid="nav-back"]').click(), true`)); err != nil {
		t.Fatal(err)
	}
	if back := nextControl(t, in); back.Action.Kind != action.Back || back.PageRevision != 2 {
		t.Fatalf("back %+v (page revision must follow page_state)", back)
	}

	// A prompt dialog appears and is answered with the typed text.
	in.onState(action.StateEvent{Type: "dialog_opened", Payload: map[string]any{
		"dialogType": "prompt", "message": "Your name?", "defaultPrompt": "anon"}})
	waitFor(t, 5*time.Second, "dialog shown", func() bool { s := look(); return s.Dialog && s.DialogMsg == "Your name?" })
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => { const q = (id) => document.querySelector('[data-testid="' + id + '"]');
		q('dialog-prompt').value = 'Ada'; q('dialog-accept').click(); return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if dr := nextControl(t, in); dr.Action.Kind != action.DialogResponse || !dr.Action.Accept || dr.Action.PromptText != "Ada" {
		t.Fatalf("dialog response %+v", dr)
	}
	if look().Dialog {
		t.Fatal("dialog still shown after the answer")
	}

	// Paste on the focused video: clipboard_write, then Ctrl+V.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const sink = document.querySelector('[data-testid="keyboard-sink"]');
		sink.focus();
		const dt = new DataTransfer(); dt.setData('text/plain', 'pasted text');
		sink.dispatchEvent(new ClipboardEvent('paste', {clipboardData: dt, bubbles: true, cancelable: true}));
		return true; })()`)); err != nil {
		t.Fatal(err)
	}
	if cw := nextControl(t, in); cw.Action.Kind != action.ClipboardWrite || cw.Action.Text != "pasted text" {
		t.Fatalf("paste %+v", cw)
	}
	if kv := nextControl(t, in); kv.Action.Kind != action.KeyDown || kv.Action.Code != "KeyV" || kv.Action.Modifiers != action.ModCtrl {
		t.Fatalf("paste key %+v", kv)
	}
	nextControl(t, in) // key_up

	// window.tabcast.send reaches the session too and resolves with the ack.
	ack, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]any](`window.tabcast.send('clipboard_read')`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if ack["status"] != "completed" || ack["result"].(map[string]any)["text"] != "copied text" {
		t.Fatalf("send ack %v", ack)
	}
	nextControl(t, in)

	// A wheel over the picture goes on the pointer channel.
	if err := chromedp.Do(ctx, chromedp.MouseEvent(chromedp.MouseWheel, pic.Left+400, pic.Top+225,
		func(p *input.DispatchMouseEventParams) { p.DeltaX, p.DeltaY = 10, 120 })); err != nil {
		t.Fatal(err)
	}
	for {
		w := in.next(t, 5*time.Second)
		if w.Action.Kind == action.Wheel {
			if w.Action.DeltaY != 120 || w.Action.DeltaX != 10 || !near(w.Action.X, 0.5) || !near(w.Action.Y, 0.5) || w.PointerSeq == 0 {
				t.Fatalf("wheel %+v", w)
			}
			break
		}
		if w.Action.Kind != action.PointerMove {
			t.Fatalf("waiting for wheel, got %+v", w)
		}
	}
	if dir := os.Getenv("TABCAST_SCREENSHOT_DIR"); dir != "" {
		screenshot(t, ctx, filepath.Join(dir, "panel-input.png"))
	}
	st := look()
	maxMsg, err := chromedp.Run(ctx, chromedp.Evaluate[int](`window.tabcast.pc.sctp.maxMessageSize`))
	if err != nil {
		t.Fatal(err)
	}
	// Chromium may send up to the appliance's limit (what pastes can carry).
	t.Logf("panel after input: ack latency %s, status %q, chromium sctp.maxMessageSize %d", st.AckLatency, st.Status, maxMsg)
}
