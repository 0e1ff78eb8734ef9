package signaling_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/peer/peertest"
	"github.com/tabcast/tabcast/core/wire"
)

// dcViewer is a Pion viewer's side of the input DataChannels.
type dcViewer struct {
	t      *testing.T
	mu     sync.Mutex
	dcs    map[string]*webrtc.DataChannel
	opened chan string
	acks   chan map[string]any
	states chan map[string]any
}

func newDCViewer(t *testing.T) *dcViewer {
	return &dcViewer{t: t, dcs: map[string]*webrtc.DataChannel{}, opened: make(chan string, 8),
		acks: make(chan map[string]any, 1024), states: make(chan map[string]any, 1024)}
}

func (v *dcViewer) setup(r *peertest.Receiver) {
	r.PC.OnDataChannel(func(dc *webrtc.DataChannel) {
		label := dc.Label()
		v.mu.Lock()
		v.dcs[label] = dc
		v.mu.Unlock()
		dc.OnOpen(func() { v.opened <- label })
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			body, err := wire.Unwrap(m.Data)
			var msg map[string]any
			if err == nil {
				err = json.Unmarshal(body, &msg)
			}
			if err != nil || m.IsString {
				v.t.Errorf("bad server message on %s: %v", label, err)
				return
			}
			switch label {
			case wire.ChannelControl:
				v.acks <- msg
			case wire.ChannelState:
				v.states <- msg
			default:
				v.t.Errorf("server sent on %s", label)
			}
		})
	})
}

func (v *dcViewer) waitOpen(t *testing.T) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; i < 3; i++ {
		select {
		case <-v.opened:
		case <-timeout:
			t.Fatalf("%d of 3 channels open", i)
		}
	}
}

func (v *dcViewer) dc(label string) *webrtc.DataChannel {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.dcs[label]
}

func (v *dcViewer) sendRaw(t *testing.T, label string, b []byte) {
	t.Helper()
	if err := v.dc(label).Send(b); err != nil {
		t.Fatalf("send on %s: %v", label, err)
	}
}

func (v *dcViewer) nextAck(t *testing.T) map[string]any {
	t.Helper()
	select {
	case a := <-v.acks:
		if a["type"] != "ack" {
			t.Fatalf("control message %v is not an ack", a)
		}
		return a
	case <-time.After(5 * time.Second):
		t.Fatal("no ack within 5 s")
		return nil
	}
}

// expectAck waits for an ack with status (and, if given, code and actionId).
func (v *dcViewer) expectAck(t *testing.T, actionID, status, code string) map[string]any {
	t.Helper()
	a := v.nextAck(t)
	if a["status"] != status || (code != "" && a["code"] != code) || (actionID != "" && a["actionId"] != actionID) {
		t.Fatalf("ack %v, want %s %s %s", a, actionID, status, code)
	}
	return a
}

func (v *dcViewer) nextState(t *testing.T, typ string) map[string]any {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case s := <-v.states:
			if s["type"] == typ {
				return s
			}
		case <-timeout:
			t.Fatalf("no %s state within 5 s", typ)
			return nil
		}
	}
}

// grant is what welcome gave this viewer; env builds its envelopes.
type grant struct {
	session, peer string
	connGen       uint64
	producer      string
	prodGen       uint64
	page          uint64
	ctl, ptr      uint64
}

func grantOf(w frame) *grant {
	return &grant{session: w.SessionID, peer: w.PeerID, connGen: w.ConnectionGeneration,
		producer: w.ProducerID, prodGen: w.ProducerGeneration, page: w.PageRevision}
}

func (g *grant) envelope(t *testing.T, a action.Action, edit func(*action.Envelope)) []byte {
	t.Helper()
	e := action.Envelope{BrowserSessionID: g.session, PeerID: g.peer, ConnectionGeneration: g.connGen,
		ProducerID: g.producer, ProducerGeneration: g.prodGen, PageRevision: g.page, Action: a}
	if a.OnPointerChannel() {
		g.ptr++
		e.PointerSeq = g.ptr
	} else {
		g.ctl++
		e.ControlSeq = g.ctl
		e.ActionID = fmt.Sprintf("%d-%d", g.prodGen, g.ctl)
	}
	if edit != nil {
		edit(&e)
	}
	b, err := wire.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestInputEndToEnd: a Pion viewer sends control and pointer envelopes over
// the real DataChannels and gets acks from the session's input; bad and
// misaddressed envelopes are rejected with their code and never submitted,
// the connection keeps working; state events arrive; a closed channel ends
// the producer once.
func TestInputEndToEnd(t *testing.T) {
	e := newEnv(t, "vp8")
	dv := newDCViewer(t)
	v, w := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8"}, dv.setup)
	if !w.Interactive || w.ProducerID != "prod-1" || w.ProducerGeneration != 1 || w.ConnectionGeneration == 0 ||
		w.PageRevision != 1 || w.InputError != "" {
		t.Fatalf("welcome %+v", w)
	}
	in := e.media.lastProducer()
	dv.waitOpen(t)
	g := grantOf(w)

	// The page_state pushed while the producer was granted (before the peer existed).
	if s := dv.nextState(t, "page_state"); s["url"] != "https://example.test/" || s["pageRevision"] != 1.0 {
		t.Fatalf("first page_state %v", s)
	}

	// A click on control: accepted, then completed; submitted with its fields.
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.PointerDown, X: 0.25, Y: 0.75, Button: "left", ClickCount: 1}, nil))
	got := in.next(t, 5*time.Second)
	if got.Action.Kind != action.PointerDown || got.Action.X != 0.25 || got.Action.Y != 0.75 || got.ControlSeq != 1 ||
		got.ProducerID != "prod-1" || got.ProducerGeneration != 1 || got.Action.PageRevision != 1 || got.ActionID == "" {
		t.Fatalf("submitted %+v", got)
	}
	dv.expectAck(t, got.ActionID, action.StatusAccepted, "")
	dv.expectAck(t, got.ActionID, action.StatusCompleted, "")

	// A move on pointer: submitted, no ack.
	dv.sendRaw(t, wire.ChannelPointer, g.envelope(t, action.Action{Kind: action.PointerMove, X: 0.5, Y: 0.5}, nil))
	if got := in.next(t, 5*time.Second); got.Action.Kind != action.PointerMove || got.PointerSeq != 1 {
		t.Fatalf("submitted %+v", got)
	}

	// Copy-out: the result text comes back in the completed ack.
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.ClipboardRead}, nil))
	in.next(t, 5*time.Second)
	dv.expectAck(t, "", action.StatusAccepted, "")
	if a := dv.expectAck(t, "", action.StatusCompleted, ""); a["result"].(map[string]any)["text"] != "copied text" {
		t.Fatalf("clipboard_read ack %v", a)
	}

	// Navigation: the page state follows on the state channel.
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Navigate, URL: "https://example.test/next"}, nil))
	in.next(t, 5*time.Second)
	dv.expectAck(t, "", action.StatusAccepted, "")
	dv.expectAck(t, "", action.StatusCompleted, "")
	if s := dv.nextState(t, "page_state"); s["url"] != "https://example.test/next" || s["pageRevision"] != 2.0 || s["canGoBack"] != true {
		t.Fatalf("page_state after navigate %v", s)
	}
	g.page = 2

	// Bad messages: each is rejected with its code, nothing is submitted.
	bad := []struct {
		name, channel string
		b             []byte
		code          string
		actionID      string
	}{
		{"bad version", wire.ChannelControl, []byte(`{"x":1}`), errcode.BadVersion, ""},
		{"not json", wire.ChannelControl, []byte("\x01not json"), errcode.BadEnvelope, ""},
		{"empty", wire.ChannelPointer, []byte("\x01"), errcode.BadEnvelope, ""},
		{"unknown kind", wire.ChannelControl, g.envelope(t, action.Action{Kind: "launch"}, func(e *action.Envelope) { e.ActionID = "bad-1" }), errcode.UnknownKind, "bad-1"},
		{"move on control", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.KeyDown}, func(e *action.Envelope) { e.Action.Kind = action.PointerMove }), errcode.WrongChannel, ""},
		{"key on pointer", wire.ChannelPointer, g.envelope(t, action.Action{Kind: action.PointerMove}, func(e *action.Envelope) { e.Action.Kind = action.KeyDown }), errcode.WrongChannel, ""},
		{"pointer too large", wire.ChannelPointer, g.envelope(t, action.Action{Kind: action.PointerMove, Key: strings.Repeat("k", 2000)}, nil), errcode.TooLarge, ""},
		{"no seq", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, func(e *action.Envelope) { e.ControlSeq = 0 }), errcode.BadField, ""},
		{"wrong peer", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, func(e *action.Envelope) { e.PeerID = "someone-else" }), errcode.WrongIdentity, ""},
		{"wrong session", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, func(e *action.Envelope) { e.BrowserSessionID = "s2" }), errcode.WrongIdentity, ""},
		{"wrong producer", wire.ChannelPointer, g.envelope(t, action.Action{Kind: action.PointerMove}, func(e *action.Envelope) { e.ProducerID = "prod-9" }), errcode.WrongIdentity, ""},
		{"old producer generation", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, func(e *action.Envelope) { e.ProducerGeneration = 7 }), errcode.StaleGeneration, ""},
		{"old connection", wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, func(e *action.Envelope) { e.ConnectionGeneration-- }), errcode.StaleGeneration, ""},
	}
	for _, b := range bad {
		dv.sendRaw(t, b.channel, b.b)
		a := dv.expectAck(t, b.actionID, action.StatusRejected, b.code)
		if msg, _ := a["message"].(string); msg == "" || strings.Contains(msg, "launch") || strings.Contains(msg, "kkkk") {
			t.Fatalf("%s: message %q", b.name, msg)
		}
		if a["pageRevision"] != 2.0 {
			t.Fatalf("%s: ack %v", b.name, a)
		}
	}
	in.none(t)

	// Still working: the next good message (its seq continues where the
	// session last accepted one, so the test's counter is reset).
	g.ctl = 4
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.KeyDown, Key: "a", Code: "KeyA"}, nil))
	if got := in.next(t, 5*time.Second); got.Action.Key != "a" || got.ControlSeq != 5 {
		t.Fatalf("after bad messages %+v", got)
	}
	dv.expectAck(t, "", action.StatusAccepted, "")
	dv.expectAck(t, "", action.StatusCompleted, "")

	// The session renews the grant: the old generation is refused, the new
	// one accepted.
	in.gen.Store(2)
	in.onState(action.StateEvent{Type: "producer", Payload: map[string]any{
		"producerId": "prod-1", "producerGeneration": 2, "enabled": true}})
	if s := dv.nextState(t, "producer"); s["producerGeneration"] != 2.0 {
		t.Fatalf("producer state %v", s)
	}
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	dv.expectAck(t, "", action.StatusRejected, errcode.StaleGeneration)
	g.prodGen, g.ctl = 2, 0
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	if got := in.next(t, 5*time.Second); got.ProducerGeneration != 2 || got.ControlSeq != 1 {
		t.Fatalf("after renewal %+v", got)
	}
	dv.expectAck(t, "", action.StatusAccepted, "")
	dv.expectAck(t, "", action.StatusCompleted, "")
	in.none(t)
	if in.closes.Load() != 0 {
		t.Fatal("input closed early")
	}

	// The viewer closes its pointer channel: the producer ends, once;
	// control messages are refused from then on.
	if err := dv.dc(wire.ChannelPointer).Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "Input.Close", func() bool { return in.closes.Load() == 1 })
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	dv.expectAck(t, "", action.StatusRejected, errcode.StaleGeneration)
	in.none(t)

	v.send(map[string]string{"type": "bye"})
	v.waitClosed(5 * time.Second)
	waitFor(t, 5*time.Second, "release", func() bool { return e.media.releases.Load() == 1 })
	if n := in.closes.Load(); n != 1 {
		t.Fatalf("Input.Close called %d times", n)
	}
}

// TestInputClosedOnceWhenSocketOrPeerEnds: whatever ends first, the
// producer is closed exactly once.
func TestInputClosedOnceWhenSocketOrPeerEnds(t *testing.T) {
	e := newEnv(t, "vp8")
	// The socket ends (bye).
	dv := newDCViewer(t)
	v, _ := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello"}, dv.setup)
	dv.waitOpen(t)
	in := e.media.lastProducer()
	v.send(map[string]string{"type": "bye"})
	v.waitClosed(5 * time.Second)
	waitFor(t, 5*time.Second, "Input.Close after bye", func() bool { return in.closes.Load() == 1 })

	// The peer ends (the viewer closes its PeerConnection).
	dv = newDCViewer(t)
	v, w := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello"}, dv.setup)
	dv.waitOpen(t)
	in2 := e.media.lastProducer()
	if in2 == in || w.ProducerID != "prod-2" {
		t.Fatalf("second viewer got grant %q", w.ProducerID)
	}
	_ = v.recv.Close()
	if st := v.waitClosed(15 * time.Second); st != websocket.StatusNormalClosure {
		t.Fatalf("close status %v", st)
	}
	waitFor(t, 5*time.Second, "Input.Close after peer end", func() bool { return in2.closes.Load() == 1 })
	waitFor(t, 5*time.Second, "releases", func() bool { return e.media.releases.Load() == 2 })
	if in.closes.Load() != 1 || in2.closes.Load() != 1 {
		t.Fatalf("closes %d %d", in.closes.Load(), in2.closes.Load())
	}
}

// TestViewOnlyAndRefusedInput: interactive:false gets no producer and no
// DataChannels; a session that refuses input still streams, and welcome
// says why.
func TestViewOnlyAndRefusedInput(t *testing.T) {
	e := newEnv(t, "vp8")
	v, w := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello", "interactive": false})
	if w.Interactive || w.ProducerID != "" || w.InputError != "" || w.ConnectionGeneration == 0 {
		t.Fatalf("view-only welcome %+v", w)
	}
	if e.media.inputCount() != 0 {
		t.Fatal("a producer granted to a view-only viewer")
	}
	if sdp := v.recv.PC.RemoteDescription().SDP; strings.Contains(sdp, "m=application") {
		t.Fatal("view-only offer has DataChannels")
	}

	e.media.inputFull.Store(true)
	v2, w := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello"})
	if w.Interactive || w.InputError != "capacity_exceeded" || w.ProducerID != "" {
		t.Fatalf("welcome %+v", w)
	}
	if _, err := v2.recv.WaitFrames(5, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	e.media.inputFull.Store(false)
	e.media.inputOff.Store(true)
	_, w3 := connectViewer(t, e.wsURL("s1"), map[string]any{"type": "hello"})
	if w3.Interactive || w3.InputError != "not_interactive" {
		t.Fatalf("welcome %+v", w3)
	}
	if w3.ConnectionGeneration <= w.ConnectionGeneration {
		t.Fatalf("connection generations %d then %d", w.ConnectionGeneration, w3.ConnectionGeneration)
	}

	// interactive must be a boolean.
	c := dial(t, e.wsURL("s1"))
	c.send(map[string]any{"type": "hello", "interactive": "yes"})
	c.expectError("bad_field")
}

// TestInputSurvivesGarbage: mutated envelopes (a fixed pseudo-random
// sequence of byte flips, inserts, cuts) on both channels each end in a
// rejected ack with a known code, or in a submit when the mutation happens
// to leave a valid envelope of this connection; the session keeps working.
func TestInputSurvivesGarbage(t *testing.T) {
	e := newEnv(t, "vp8")
	dv := newDCViewer(t)
	_, w := connectViewerWith(t, e.wsURL("s1"), map[string]any{"type": "hello", "codec": "vp8"}, dv.setup)
	dv.waitOpen(t)
	in := e.media.lastProducer()
	g := grantOf(w)
	known := map[string]bool{
		errcode.BadVersion: true, errcode.BadEnvelope: true, errcode.TooLarge: true, errcode.WrongChannel: true,
		errcode.UnknownKind: true, errcode.BadField: true, errcode.WrongIdentity: true, errcode.StaleGeneration: true,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rejected, submitted := 0, 0
	for i := 0; i < 400; i++ {
		channel, a := wire.ChannelControl, action.Action{Kind: action.KeyDown, Key: "a", Code: "KeyA"}
		if i%2 == 1 {
			channel, a = wire.ChannelPointer, action.Action{Kind: action.PointerMove, X: 0.5, Y: 0.25}
		}
		b := mutate(rng, g.envelope(t, a, nil))
		dv.sendRaw(t, channel, b)
		select {
		case <-in.submits:
			submitted++
			if channel == wire.ChannelControl {
				dv.expectAck(t, "", action.StatusAccepted, "")
				dv.expectAck(t, "", action.StatusCompleted, "")
			}
		case ack := <-dv.acks:
			code, _ := ack["code"].(string)
			if ack["status"] != action.StatusRejected || !known[code] {
				t.Fatalf("message %d (%q): ack %v", i, b, ack)
			}
			rejected++
		case <-time.After(5 * time.Second):
			t.Fatalf("message %d (%q): neither submitted nor rejected", i, b)
		}
	}
	t.Logf("%d rejected, %d still valid after mutation", rejected, submitted)
	if rejected < 300 {
		t.Fatalf("only %d of 400 mutations rejected", rejected)
	}
	// Still working.
	dv.sendRaw(t, wire.ChannelControl, g.envelope(t, action.Action{Kind: action.Reload}, nil))
	if got := in.next(t, 5*time.Second); got.Action.Kind != action.Reload {
		t.Fatalf("after garbage %+v", got)
	}
	dv.expectAck(t, "", action.StatusAccepted, "")
	if in.closes.Load() != 0 {
		t.Fatal("garbage ended the producer")
	}
}

// mutate damages b: flips, inserts or deletes a few bytes, or cuts it.
func mutate(rng *rand.Rand, b []byte) []byte {
	b = append([]byte(nil), b...)
	for n := 1 + rng.IntN(3); n > 0 && len(b) > 0; n-- {
		i := rng.IntN(len(b))
		switch rng.IntN(4) {
		case 0:
			b[i] ^= byte(1 + rng.IntN(255))
		case 1:
			b = append(b[:i], append([]byte{byte(rng.IntN(256))}, b[i:]...)...)
		case 2:
			b = append(b[:i], b[i+1:]...)
		case 3:
			b = b[:i]
		}
	}
	return b
}
