package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// releasesOf returns the synthesized releases among calls (after index from).
func releasesOf(calls []call, from int) []call {
	var out []call
	for _, c := range calls[from:] {
		if c.a.Kind == action.KeyUp || c.a.Kind == action.PointerUp {
			out = append(out, c)
		}
	}
	return out
}

// pressAll makes p hold ShiftLeft, KeyA and the left button at (0.5,0.6).
func pressAll(t *testing.T, h *harness, p Grant) {
	t.Helper()
	for i, a := range []action.Action{keyDown("ShiftLeft"), keyDown("KeyA"), ptrDown(0.3, 0.4)} {
		if got := first(t, h.ctl(p, uint64(i+1), fmt.Sprint("press", i), a)); got.Status != action.StatusAccepted {
			t.Fatalf("press %d: %+v", i, got)
		}
	}
	h.ptr(p, 1, move(0.5, 0.6)) // the drag goes on: last position moves
	h.idle()
	if st := h.d.Stats(); st.Held != 3 {
		t.Fatalf("held %d, want 3", st.Held)
	}
}

func wantReleases(t *testing.T, got []call, id string) {
	t.Helper()
	want := []action.Action{
		{Kind: action.PointerUp, X: 0.5, Y: 0.6, Button: "left"},
		{Kind: action.KeyUp, Key: "KeyA", Code: "KeyA"},
		{Kind: action.KeyUp, Key: "ShiftLeft", Code: "ShiftLeft"},
	}
	if len(got) != len(want) {
		t.Fatalf("releases %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].a != want[i] || got[i].producer != id {
			t.Fatalf("release %d: %+v by %q, want %+v by %q", i, got[i].a, got[i].producer, want[i], id)
		}
	}
}

func TestHeldReleasedOnEndAndRenew(t *testing.T) {
	for _, how := range []string{"end", "renew"} {
		t.Run(how, func(t *testing.T) {
			h := newHarness(t, Config{})
			p := h.d.Grant(KindHuman, "alice")
			bystander := h.d.Grant(KindAgent, "bot")
			pressAll(t, h, p)
			unblock := h.ex.blockOn("https://slow.test/")
			running := h.ctl(p, 4, "nav", nav("https://slow.test/"))
			h.waitStarted("https://slow.test/")
			queued := []*sub{h.ctl(p, 5, "t", text("hello")), h.ctl(p, 6, "k", keyDown("KeyB"))}
			wheel := h.ptr(p, 2, action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaY: 100})
			before := len(h.ex.snapshot())

			switch how {
			case "end":
				h.d.End(p.ID)
			case "renew":
				np, err := h.d.Renew(p.ID)
				if err != nil || np.Generation != 2 {
					t.Fatalf("renew %+v %v", np, err)
				}
			}
			for _, s := range append(queued, wheel) {
				if got := s.all(); len(got) == 0 || got[len(got)-1].Code != errcode.StaleGeneration {
					t.Fatalf("dropped action acks %+v, want stale_generation", got)
				}
			}
			if st := h.d.Stats(); st.Queued != 0 || st.Held != 0 {
				t.Fatalf("after %s: %+v", how, st)
			}
			// The bystander is not blocked by any of this.
			bs := h.ctl(bystander, 1, "b1", keyDown("KeyZ"))
			unblock()
			h.idle()
			if got := final(t, running); got.Status != action.StatusCompleted {
				t.Fatalf("the running action %+v, want completed", got)
			}
			if got := final(t, bs); got.Status != action.StatusCompleted {
				t.Fatalf("bystander %+v", got)
			}
			calls := h.ex.snapshot()
			var mine []call
			for _, c := range releasesOf(calls, before) {
				if c.producer == p.ID {
					mine = append(mine, c)
				}
			}
			wantReleases(t, mine, p.ID)
			for _, c := range calls[before:] {
				if c.a.Kind == action.TextInsert || c.a.Code == "KeyB" || c.a.Kind == action.Wheel {
					t.Fatalf("a dropped action ran: %+v", c)
				}
			}
			if st := h.d.Stats(); st.ReleaseEvents != 1 || st.Released != 3 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

func TestReleasedKeysAreNotReleasedAgain(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	steps := []action.Action{keyDown("KeyA"), keyUp("KeyA"), ptrDown(0.1, 0.1), ptrUp(0.1, 0.1)}
	for i, a := range steps {
		h.ctl(p, uint64(i+1), fmt.Sprint(i), a)
	}
	h.idle()
	h.d.End(p.ID)
	h.idle()
	if n := len(h.ex.snapshot()); n != len(steps) {
		t.Fatalf("executor calls %d, want %d (nothing held, nothing released)", n, len(steps))
	}
}

// A down that ran after its producer ended is released right after.
func TestDownRunningAtEndIsReleased(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	gate := make(chan struct{})
	h.ex.setFn(func(ctx context.Context, c call) (action.Result, error) {
		if c.a.Kind == action.KeyDown {
			<-gate
		}
		return action.Result{}, nil
	})
	h.ctl(p, 1, "k", keyDown("KeyZ"))
	h.waitStarted("")
	h.d.End(p.ID)
	close(gate)
	h.idle()
	calls := h.ex.snapshot()
	if len(calls) != 2 || calls[1].a.Kind != action.KeyUp || calls[1].a.Code != "KeyZ" {
		t.Fatalf("calls %+v, want key_down then its release", calls)
	}
}

func TestHeldTrackingOnFailures(t *testing.T) {
	cases := []struct {
		name     string
		downErr  error // what the executor answers to key_down
		upErr    error // … and to key_up (nil: no key_up sent)
		sendUp   bool
		released bool // whether End releases the key
	}{
		{"refused down is not held", errcode.Newf(errcode.ShortcutBlocked, "blocked"), nil, false, false},
		{"unknown down is held", errors.New("cdp: connection reset"), nil, false, true},
		{"completed down is held", nil, nil, false, true},
		{"completed up clears", nil, nil, true, false},
		{"refused up keeps it held", nil, errcode.Newf(errcode.Failed, "no"), true, true},
		{"unknown up keeps it held", nil, errors.New("cdp: timeout"), true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			p := h.d.Grant(KindHuman, "alice")
			h.ex.setFn(func(ctx context.Context, cl call) (action.Result, error) {
				switch cl.a.Kind {
				case action.KeyDown:
					return action.Result{}, c.downErr
				case action.KeyUp:
					if cl.producer == p.ID && len(h.ex.snapshot()) == 2 { // the client's key_up, not a release
						return action.Result{}, c.upErr
					}
				}
				return action.Result{}, nil
			})
			h.ctl(p, 1, "d", keyDown("KeyQ"))
			if c.sendUp {
				h.ctl(p, 2, "u", keyUp("KeyQ"))
			}
			h.idle()
			before := len(h.ex.snapshot())
			h.d.End(p.ID)
			h.idle()
			got := releasesOf(h.ex.snapshot(), before)
			if c.released != (len(got) == 1) {
				t.Fatalf("releases %+v, want released=%v", got, c.released)
			}
		})
	}
}

func TestWatchdog(t *testing.T) {
	h := newHarness(t, Config{}) // HeldWatchdog 5 s on the fake clock
	p := h.d.Grant(KindHuman, "alice")
	idler := h.d.Grant(KindHuman, "bob") // holds nothing: never released
	h.ctl(p, 1, "d", keyDown("KeyA"))
	h.idle()

	h.clock.Advance(4 * time.Second)
	hb := h.submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: p.Generation, Action: action.Action{Kind: action.Heartbeat}})
	if got := hb.all(); len(got) != 2 || got[0].Status != action.StatusAccepted || got[1].Status != action.StatusCompleted {
		t.Fatalf("heartbeat acks %+v", got)
	}
	h.idle()
	h.clock.Advance(4 * time.Second) // 8 s after the press, 4 s after the heartbeat
	h.idle()
	if got := releasesOf(h.ex.snapshot(), 0); len(got) != 0 {
		t.Fatalf("released while renewed: %+v", got)
	}
	// Any authenticated message renews, even a refused one.
	h.ctl(p, 7, "gap", keyDown("KeyB"))
	h.clock.Advance(4 * time.Second)
	h.idle()
	if got := releasesOf(h.ex.snapshot(), 0); len(got) != 0 {
		t.Fatalf("released while renewed by a refused message: %+v", got)
	}
	// Messages of another producer do not renew this one.
	h.submit(action.Envelope{ProducerID: idler.ID, ProducerGeneration: idler.Generation, Action: action.Action{Kind: action.Heartbeat}})
	h.clock.Advance(1 * time.Second)
	h.idle()
	got := releasesOf(h.ex.snapshot(), 0)
	if len(got) != 1 || got[0].a.Code != "KeyA" || got[0].producer != p.ID {
		t.Fatalf("releases %+v, want KeyA of the silent producer", got)
	}
	st := h.d.Stats()
	if st.WatchdogFired != 1 || st.Held != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The producer lives on: it may press again.
	if got := first(t, h.ctl(p, 2, "d2", keyDown("KeyA"))); got.Status != action.StatusAccepted {
		t.Fatalf("after watchdog: %+v", got)
	}
	h.clock.Advance(time.Hour)
	h.idle()
	if got := releasesOf(h.ex.snapshot(), 0); len(got) != 2 {
		t.Fatalf("second watchdog release missing: %+v", got)
	}
}

// The watchdog runs on its own timer, with no other activity.
func TestWatchdogRealClock(t *testing.T) {
	ex := newRecExec()
	d := New(Config{HeldWatchdog: 50 * time.Millisecond}, ex)
	defer d.Close()
	p := d.Grant(KindHuman, "alice")
	d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: 1, ControlSeq: 1, ActionID: "d", Action: ptrDown(0.2, 0.2)}, nil)
	eventually(t, "watchdog release", func() bool { return len(releasesOf(ex.snapshot(), 0)) == 1 })
	if got := releasesOf(ex.snapshot(), 0)[0].a; got.Kind != action.PointerUp || got.Button != "left" || got.X != 0.2 {
		t.Fatalf("release %+v", got)
	}
}

func TestTooManyHeldKeys(t *testing.T) {
	h := newHarness(t, Config{ProducerQueue: 100, SessionQueue: 100})
	p := h.d.Grant(KindHuman, "alice")
	for i := range MaxHeldKeys {
		h.ctl(p, uint64(i+1), fmt.Sprint(i), keyDown(fmt.Sprint("K", i)))
	}
	h.idle()
	if got := first(t, h.ctl(p, MaxHeldKeys+1, "x", keyDown("Extra"))); got.Code != errcode.NotAllowed {
		t.Fatalf("%+v", got)
	}
	// Pressing a held key again (auto-repeat) is fine.
	if got := first(t, h.ctl(p, MaxHeldKeys+1, "r", keyDown("K0"))); got.Status != action.StatusAccepted {
		t.Fatalf("%+v", got)
	}
}

// reply may call back into the dispatcher, even from the accepted ack.
func TestReplyReentrancy(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	h.ctl(p, 1, "d", keyDown("KeyA"))
	h.idle()
	unblock := h.ex.blockOn("https://slow.test/")
	defer unblock()
	h.ctl(p, 2, "run", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	s := &sub{}
	h.d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: 1, ControlSeq: 3, ActionID: "q", Action: text("x")}, func(a action.Ack) {
		s.reply(a)
		if a.Status == action.StatusAccepted {
			_ = h.d.Stats()
			h.d.End(p.ID) // e.g. the send failed: the peer is gone
		}
	})
	got := s.all()
	if len(got) != 2 || got[0].Status != action.StatusAccepted || got[1].Code != errcode.StaleGeneration {
		t.Fatalf("acks %+v, want accepted then stale_generation, both before Submit returned", got)
	}
	unblock()
	h.idle()
	if rel := releasesOf(h.ex.snapshot(), 0); len(rel) != 1 || rel[0].a.Code != "KeyA" {
		t.Fatalf("releases %+v", rel)
	}
}

// A final ack ready before the accepted ack went out waits for it.
func TestFinalAckNeverOvertakesAccepted(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	s := &sub{}
	h.d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: 1, ControlSeq: 1, ActionID: "a", Action: keyDown("KeyA")}, func(a action.Ack) {
		if a.Status == action.StatusAccepted {
			// Hold the accepted ack until the worker has finished the action.
			eventually(t, "completion", func() bool { return h.d.Stats().Completed == 1 })
		}
		s.reply(a)
	})
	got := s.all()
	if len(got) != 2 || got[0].Status != action.StatusAccepted || got[1].Status != action.StatusCompleted {
		t.Fatalf("acks %+v, want accepted then completed", got)
	}
}

// TestStaleReleaseEndsTheHold: the page changed (a tab switch, which
// releases what was held on the old page) between a pointer_down and its
// pointer_up. The up is refused stale_page — there is nothing to lift on
// the new page — but the hold ends with it, at submit or while queued,
// instead of lasting until the watchdog.
func TestStaleReleaseEndsTheHold(t *testing.T) {
	h := newHarness(t, Config{})
	h.ex.page.Store(5)
	p := h.d.Grant(KindHuman, "alice")
	if got := final(t, h.ctl(p, 1, "d1", withPage(ptrDown(0.5, 0.5), 5))); got.Status != action.StatusCompleted {
		t.Fatalf("pointer_down: %+v", got)
	}
	if st := h.d.Stats(); st.Held != 1 {
		t.Fatalf("held %d after the down, want 1", st.Held)
	}
	h.ex.page.Store(6) // the tab switched
	up := action.Action{Kind: action.PointerUp, X: 0.5, Y: 0.5, Button: "left", PageRevision: 5}
	if got := first(t, h.ctl(p, 2, "u1", up)); got.Code != errcode.StalePage {
		t.Fatalf("stale pointer_up: %+v, want stale_page", got)
	}
	if st := h.d.Stats(); st.Held != 0 {
		t.Fatalf("held %d after the stale release, want 0", st.Held)
	}

	// The same while queued: the page changes while the up waits.
	if got := final(t, h.ctl(p, 2, "d2", withPage(ptrDown(0.5, 0.5), 6))); got.Status != action.StatusCompleted {
		t.Fatalf("pointer_down: %+v", got)
	}
	unblock := h.ex.blockOn("https://slow.test/")
	h.ctl(p, 3, "n", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	up.PageRevision = 6
	queued := h.ctl(p, 4, "u2", up)
	h.ex.page.Store(7)
	unblock()
	h.idle()
	if got := final(t, queued); got.Code != errcode.StalePage {
		t.Fatalf("queued stale pointer_up: %+v, want stale_page", got)
	}
	if st := h.d.Stats(); st.Held != 0 {
		t.Fatalf("held %d after the queued stale release, want 0", st.Held)
	}
}

// The dispatcher owns held input: the executor is handed the buttons down
// with each pointer action, and a key_up of a key not held never reaches it.
func TestButtonsHandedToTheExecutor(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	h.ex.page.Store(1)
	h.ctl(p, 1, "d", ptrDown(0.3, 0.4))
	h.idle()
	h.ptr(p, 1, move(0.5, 0.6))
	h.idle()
	h.ctl(p, 2, "u", ptrUp(0.5, 0.6))
	h.ctl(p, 3, "q", keyUp("KeyQ")) // never down
	h.idle()
	h.ptr(p, 2, move(0.6, 0.6))
	h.idle()
	var got []string
	for _, c := range h.ex.snapshot() {
		got = append(got, fmt.Sprintf("%s:%d", c.a.Kind, c.buttons))
	}
	want := "pointer_down:0 pointer_move:1 pointer_up:1 pointer_move:0"
	if strings.Join(got, " ") != want {
		t.Fatalf("executor saw %q, want %q", strings.Join(got, " "), want)
	}
}

// LiftHeld hands back the releases of everything held, with the buttons
// down as each starts, and forgets it: nothing is released again later.
func TestLiftHeld(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	pressAll(t, h, p)
	before := len(h.ex.snapshot())
	rels := h.d.LiftHeld()
	var got []call
	for _, r := range rels {
		got = append(got, call{producer: r.ProducerID, a: r.Action})
	}
	for i := range got {
		got[i].a.Buttons = 0
	}
	wantReleases(t, got, p.ID)
	if rels[0].Action.Buttons != action.ButtonLeft {
		t.Fatalf("the button release carries buttons %d, want left", rels[0].Action.Buttons)
	}
	if st := h.d.Stats(); st.Held != 0 {
		t.Fatalf("held %d after LiftHeld", st.Held)
	}
	h.d.End(p.ID)
	h.idle()
	if n := len(h.ex.snapshot()); n != before {
		t.Fatalf("executor ran %d more calls after LiftHeld and End, want none", n-before)
	}
}

// A press running while LiftHeld is called is lifted too, and not noted
// as held when it ran on the page left.
func TestLiftHeldRunningPress(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	gate := make(chan struct{})
	h.ex.setFn(func(ctx context.Context, c call) (action.Result, error) {
		if c.a.Kind == action.PointerDown {
			<-gate
		}
		return action.Result{PageRevision: h.ex.page.Load()}, nil
	})
	h.ex.page.Store(7)
	down := h.ctl(p, 1, "d", ptrDown(0.3, 0.4))
	eventually(t, "the press runs", func() bool { return len(h.ex.snapshot()) == 1 })
	rels := h.d.LiftHeld()
	if len(rels) != 1 || rels[0].Action.Kind != action.PointerUp || rels[0].Action.Button != "left" || rels[0].Action.Buttons != action.ButtonLeft {
		t.Fatalf("releases %+v, want the running press's", rels)
	}
	close(gate)
	if got := final(t, down); got.Status != action.StatusCompleted {
		t.Fatalf("press %+v", got)
	}
	h.idle()
	if st := h.d.Stats(); st.Held != 0 {
		t.Fatalf("held %d: the press lifted on the page left was noted", st.Held)
	}
}
