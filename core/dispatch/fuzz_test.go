package dispatch

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

var validateCodes = map[string]bool{
	errcode.UnknownKind: true, errcode.NotAllowed: true,
	errcode.InvalidArgument: true, errcode.TooLarge: true,
}

// oracleValid restates Validate's rules independently, field by field.
func oracleValid(a action.Action) bool {
	clientKinds := "pointer_move wheel pointer_down pointer_up click key_down key_up key_press text_insert navigate back forward reload stop viewport clipboard_write clipboard_read dialog_response heartbeat"
	if a.Kind == "" || strings.Contains(string(a.Kind), " ") || !strings.Contains(" "+clientKinds+" ", " "+string(a.Kind)+" ") {
		return false
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if !finite(a.X) || !finite(a.Y) || !finite(a.DeltaX) || !finite(a.DeltaY) {
		return false
	}
	coord := a.Kind == action.PointerMove || a.Kind == action.Wheel || a.Kind == action.PointerDown || a.Kind == action.PointerUp || a.Kind == action.Click
	if coord && !(a.X >= 0 && a.X <= 1 && a.Y >= 0 && a.Y <= 1) {
		return false
	}
	if !(a.DeltaX >= -100000 && a.DeltaX <= 100000 && a.DeltaY >= -100000 && a.DeltaY <= 100000) {
		return false
	}
	if a.Button != "" && a.Button != "left" && a.Button != "middle" && a.Button != "right" {
		return false
	}
	if (a.Kind == action.PointerDown || a.Kind == action.PointerUp || a.Kind == action.Click) && a.Button == "" {
		return false
	}
	if a.ClickCount < 0 || a.ClickCount > 3 || a.Modifiers < 0 || a.Modifiers > 15 {
		return false
	}
	if len(a.Key) > 64 || len(a.Code) > 64 || len(a.Text) > 1<<20 || len(a.PromptText) > 1<<20 || len(a.URL) > 8192 {
		return false
	}
	switch a.Kind {
	case action.KeyDown, action.KeyUp, action.KeyPress:
		return a.Key != "" || a.Code != ""
	case action.TextInsert:
		return a.Text != "" || a.Replace
	case action.Navigate:
		return a.URL != ""
	case action.Viewport:
		return a.Width >= 320 && a.Width <= 3840 && a.Height >= 240 && a.Height <= 2160
	}
	return true
}

func FuzzValidate(f *testing.F) {
	type seed struct {
		kind                string
		x, y, dx, dy        float64
		button, key, code   string
		text, url, prompt   string
		clicks, mods, w, hh int
	}
	seeds := []seed{
		{kind: "pointer_move", x: 0.5, y: 0.5},
		{kind: "pointer_down", x: 1, y: 0, button: "left", clicks: 1},
		{kind: "pointer_up", x: 1.0000001, y: 0, button: "right"},
		{kind: "pointer_down", x: 0.1, y: 0.1},
		{kind: "click", x: 0.5, y: 0.5, button: "left", clicks: 2},
		{kind: "click", x: 0.5, y: 0.5},
		{kind: "click", x: -0.1, y: 0.5, button: "left"},
		{kind: "wheel", x: 0.5, y: 0.5, dy: -120},
		{kind: "wheel", x: 0.5, y: 0.5, dx: math.Inf(1)},
		{kind: "pointer_move", x: math.NaN()},
		{kind: "key_down", key: "a", code: "KeyA", mods: action.ModCtrl | action.ModShift},
		{kind: "key_up", mods: 16},
		{kind: "key_press", key: "Enter", code: "Enter"},
		{kind: "key_press"},
		{kind: "key_down", code: strings.Repeat("K", 65)},
		{kind: "text_insert", text: "héllo"},
		{kind: "text_insert"},
		{kind: "clipboard_write"},
		{kind: "navigate", url: "https://example.test/"},
		{kind: "navigate", url: strings.Repeat("u", 8193)},
		{kind: "viewport", w: 1280, hh: 720},
		{kind: "viewport", w: 319, hh: 720},
		{kind: "viewport", w: 3840, hh: 2161},
		{kind: "dialog_response", prompt: "ok"},
		{kind: "release_all"},
		{kind: "teleport"},
		{kind: ""},
		{kind: "heartbeat", clicks: 4},
		{kind: "pointer_move", x: 0.5, y: 0.5, button: "back"},
		{kind: "reload", clicks: -1},
	}
	for _, s := range seeds {
		f.Add(s.kind, s.x, s.y, s.dx, s.dy, s.button, s.key, s.code, s.text, s.url, s.prompt, s.clicks, s.mods, s.w, s.hh)
	}
	f.Fuzz(func(t *testing.T, kind string, x, y, dx, dy float64, button, key, code, text, url, prompt string, clicks, mods, w, hh int) {
		a := action.Action{Kind: action.Kind(kind), X: x, Y: y, DeltaX: dx, DeltaY: dy, Button: button, Key: key, Code: code,
			Text: text, URL: url, PromptText: prompt, ClickCount: clicks, Modifiers: mods, Width: w, Height: hh}
		err := Validate(a)
		if want := oracleValid(a); want != (err == nil) {
			t.Fatalf("Validate(%+v) = %v, oracle says valid=%v", a, err, want)
		}
		if err == nil {
			return
		}
		var ae *errcode.Error
		if !errors.As(err, &ae) || !validateCodes[ae.Code] || ae.Message == "" {
			t.Fatalf("Validate(%+v) = %#v: want an *errcode.Error with a stable code", a, err)
		}
		if len(text) >= 32 && strings.Contains(ae.Message, text) {
			t.Fatalf("message echoes the text: %q", ae.Message)
		}
	})
}

// opReader hands out the bytes of a fuzz input; zeros once exhausted.
type opReader struct {
	b []byte
	i int
}

func (r *opReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	c := r.b[r.i]
	r.i++
	return c
}

func (r *opReader) done() bool { return r.i >= len(r.b) }

var fuzzKinds = []action.Kind{
	action.PointerMove, action.Wheel, action.PointerDown, action.PointerUp, action.Click, action.KeyDown, action.KeyUp, action.KeyPress,
	action.TextInsert, action.Navigate, action.Back, action.Reload, action.Viewport, action.ClipboardRead,
	action.Heartbeat, action.ReleaseAll, "bogus",
}

func (r *opReader) action() action.Action {
	a := action.Action{Kind: fuzzKinds[int(r.next())%len(fuzzKinds)]}
	a.X, a.Y = float64(r.next())/200, float64(r.next())/200 // sometimes > 1
	a.Button = []string{"left", "right", "", "bogus"}[r.next()%4]
	code := []string{"KeyA", "KeyB", "ShiftLeft", ""}[r.next()%4]
	a.Key, a.Code = code, code
	a.Text = []string{"x", "", "E refuse", "U unknown", "S slow"}[r.next()%5]
	a.URL = []string{"https://a.test/", "", "S"}[r.next()%3]
	a.Width, a.Height = 320+int(r.next())*16, 240+int(r.next())*8
	a.DeltaY = float64(int8(r.next()))
	a.PageRevision = uint64(r.next() % 4)
	return a
}

// fuzzExec completes at once, except: text "E…" is refused, "U…" fails
// with an unknown outcome, "S…" (or URL "S") waits for its deadline.
type fuzzExec struct {
	page atomic.Uint64
	bad  atomic.Value // string: the first call that should never have reached the executor
}

func (x *fuzzExec) Execute(ctx context.Context, _ string, a action.Action) (action.Result, error) {
	if err := Validate(a); err != nil || a.Kind == action.Heartbeat {
		x.bad.CompareAndSwap(nil, string(a.Kind))
	}
	switch {
	case strings.HasPrefix(a.Text, "E") && a.Kind == action.TextInsert:
		return action.Result{}, errcode.Newf(errcode.NotAllowed, "refused")
	case strings.HasPrefix(a.Text, "U") && a.Kind == action.TextInsert:
		return action.Result{}, errors.New("lost")
	case (strings.HasPrefix(a.Text, "S") && a.Kind == action.TextInsert) || (a.URL == "S" && a.Kind == action.Navigate):
		<-ctx.Done()
		return action.Result{}, ctx.Err()
	}
	return action.Result{PageRevision: x.page.Load()}, nil
}

func (x *fuzzExec) PageRevision() uint64 { return x.page.Load() }

var ackCodes = map[string]bool{
	errcode.InvalidArgument: true, errcode.UnknownKind: true, errcode.TooLarge: true,
	errcode.SeqGap: true, errcode.Conflict: true, errcode.StalePage: true,
	errcode.StaleGeneration: true, errcode.UnknownProducer: true, errcode.QueueFull: true,
	errcode.RateLimited: true, errcode.OutcomeUnknown: true, errcode.NotAllowed: true,
	errcode.SessionClosed: true,
}

// runOps drives one dispatcher with the operations encoded in data and
// checks the ack contract.
func runOps(t *testing.T, data []byte) {
	clock := newClock()
	ex := &fuzzExec{}
	ex.page.Store(1)
	d := New(Config{Now: clock.Now, Deadline: 20 * time.Millisecond, ProducerQueue: 4, SessionQueue: 6, Burst: 6, HeldWatchdog: time.Second,
		LedgerSize: 4, Logger: slog.New(slog.DiscardHandler)}, ex)
	type state struct {
		p   Grant
		seq uint64 // next controlSeq
		ptr uint64
	}
	var ps []*state
	for range 3 {
		ps = append(ps, &state{p: d.Grant(KindHuman, "u"), seq: 1, ptr: 1})
	}
	type record struct {
		control, heartbeat, fresh bool
		s                         *sub
	}
	var recs []record
	var maxRev uint64
	r := &opReader{b: data}
	for ops := 0; !r.done() && ops < 400; ops++ {
		op := r.next()
		st := ps[int(r.next())%len(ps)]
		gen := st.p.Generation
		if r.next()%16 == 0 {
			gen = uint64(r.next() % 4)
		}
		pid := st.p.ID
		if r.next()%32 == 0 {
			pid = "forged"
		}
		switch op % 8 {
		case 0, 1, 2, 3, 4, 5: // submit
			a := r.action()
			e := action.Envelope{ProducerID: pid, ProducerGeneration: gen, Action: a, ActionID: string(rune('a' + r.next()%6))}
			if r.next()%8 == 0 {
				e.ActionID = ""
			}
			if a.OnPointerChannel() {
				e.PointerSeq = st.ptr + uint64(r.next()%3) - 1
			} else {
				e.ControlSeq = st.seq + uint64(r.next()%3) - 1
			}
			s := &sub{}
			d.Submit(e, s.reply)
			acks := s.all()
			rec := record{control: !a.OnPointerChannel(), heartbeat: a.Kind == action.Heartbeat, s: s}
			switch {
			case rec.heartbeat:
				if len(acks) != 2 && !(len(acks) == 1 && acks[0].Status == action.StatusRejected) {
					t.Fatalf("heartbeat acks %+v", acks)
				}
			case rec.control:
				if len(acks) < 1 {
					t.Fatalf("control %+v: no synchronous ack", e)
				}
				if acks[0].Status == action.StatusAccepted && acks[0].ActionRevision > maxRev {
					rec.fresh = true
					st.seq++
				}
			default:
				if len(acks) > 1 || (len(acks) == 1 && acks[0].Status != action.StatusRejected) {
					t.Fatalf("pointer acks %+v", acks)
				}
				if e.PointerSeq >= st.ptr {
					st.ptr = e.PointerSeq + 1
				}
			}
			for _, ack := range acks {
				if ack.ActionRevision > maxRev {
					maxRev = ack.ActionRevision
				}
			}
			recs = append(recs, rec)
		case 6:
			switch r.next() % 4 {
			case 0:
				d.End(st.p.ID)
			default:
				if np, err := d.Renew(st.p.ID); err == nil {
					st.p, st.seq, st.ptr = np, 1, 1
				} else if !hasCode(err, errcode.StaleGeneration) {
					t.Fatalf("renew: %v", err)
				}
			}
		case 7:
			clock.Advance(time.Duration(r.next()) * 20 * time.Millisecond)
			if r.next()%4 == 0 {
				ex.page.Add(1)
			}
		}
	}
	d.Close()
	if v := ex.bad.Load(); v != nil {
		t.Fatalf("executor received an action it must never see: %v", v)
	}
	for _, rec := range recs {
		acks := rec.s.all()
		for _, a := range acks {
			if a.Status == action.StatusRejected && (!ackCodes[a.Code] || a.Message == "") {
				t.Fatalf("rejected without a stable code: %+v", a)
			}
		}
		switch {
		case rec.heartbeat:
		case rec.fresh:
			if len(acks) != 2 || acks[1].Status == action.StatusAccepted || acks[1].ActionRevision != acks[0].ActionRevision {
				t.Fatalf("accepted action acks %+v: want accepted then one final ack", acks)
			}
		case rec.control:
			if len(acks) != 1 {
				t.Fatalf("control acks %+v: want exactly one", acks)
			}
		}
	}
	st := d.Stats()
	if st.Queued != 0 || st.QueuedBytes != 0 || st.Running || st.Producers != 0 {
		t.Fatalf("after close: %+v", st)
	}
}

func FuzzSubmit(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 0, 1, 1, 4, 100, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte("control and pointer traffic from three producers, with renewals and page changes"))
	f.Add([]byte{6, 1, 1, 1, 1, 7, 0, 1, 1, 200, 0, 6, 2, 1, 1, 0})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 8 {
		b := make([]byte, 600)
		for i := range b {
			b[i] = byte(rng.UintN(256))
		}
		f.Add(b)
	}
	f.Fuzz(runOps)
}
