package dispatch

import (
	"strings"
	"testing"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// step is one Submit in a fencing scenario.
type step struct {
	ch   byte // 'c' control, 'p' pointer
	seq  uint64
	id   string
	a    action.Action
	page uint64 // if non-zero, the page revision is set to this first
	// want is the synchronous outcome: a status, a rejection code, or ""
	// for "no ack at all" (pointer accepted, or dropped as stale).
	want string
	// runs reports whether the step makes exactly one Execute call.
	runs bool
}

func TestFencing(t *testing.T) {
	long := strings.Repeat("x", MaxActionIDLen+1)
	scenarios := []struct {
		name  string
		steps []step
	}{
		{"gap then fill", []step{
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 3, id: "a3", a: keyDown("KeyB"), want: errcode.SeqGap},
			{ch: 'c', seq: 2, id: "a2", a: keyUp("KeyA"), want: action.StatusAccepted, runs: true},
			// (a key_up of a key not held would complete without running)
			{ch: 'c', seq: 3, id: "a3", a: keyDown("KeyB"), want: action.StatusAccepted, runs: true},
		}},
		{"first seq is 1", []step{
			{ch: 'c', seq: 0, id: "a0", a: keyDown("KeyA"), want: errcode.SeqGap},
			{ch: 'c', seq: 2, id: "a2", a: keyDown("KeyA"), want: errcode.SeqGap},
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
		}},
		{"replay of unknown actionId", []step{
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 2, id: "a2", a: keyUp("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 1, id: "other", a: keyDown("KeyA"), want: errcode.SeqGap},
			{ch: 'c', seq: 2, id: "other2", a: keyDown("KeyA"), want: errcode.SeqGap},
			{ch: 'c', seq: 3, id: "a3", a: keyDown("KeyB"), want: action.StatusAccepted, runs: true},
		}},
		{"duplicate same payload returns ledger result, never re-runs", []step{
			{ch: 'c', seq: 1, id: "a1", a: nav("https://example.test/"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 1, id: "a1", a: nav("https://example.test/"), want: action.StatusCompleted},
			// whatever its seq: a known actionId is answered from the ledger and consumes nothing
			{ch: 'c', seq: 2, id: "a1", a: nav("https://example.test/"), want: action.StatusCompleted},
			{ch: 'c', seq: 7, id: "a1", a: nav("https://example.test/"), want: action.StatusCompleted},
			{ch: 'c', seq: 2, id: "a2", a: action.Action{Kind: action.Reload}, want: action.StatusAccepted, runs: true},
		}},
		{"duplicate different payload is a conflict", []step{
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyB"), want: errcode.Conflict},
			{ch: 'c', seq: 2, id: "a1", a: keyDown("KeyB"), want: errcode.Conflict},
			{ch: 'c', seq: 2, id: "a2", a: keyDown("KeyB"), want: action.StatusAccepted, runs: true},
		}},
		{"a rejected message does not consume its seq", []step{
			{ch: 'c', seq: 1, id: "a1", a: ptrDown(2, 0), want: errcode.InvalidArgument},
			{ch: 'c', seq: 1, id: "a1", a: action.Action{Kind: action.ReleaseAll}, want: errcode.NotAllowed},
			{ch: 'c', seq: 1, id: "", a: keyDown("KeyA"), want: errcode.InvalidArgument},
			{ch: 'c', seq: 1, id: long, a: keyDown("KeyA"), want: errcode.InvalidArgument},
			{ch: 'c', seq: 1, id: "a1", a: action.Action{Kind: "teleport"}, want: errcode.UnknownKind},
			// the rejected actionId was not recorded: it can be used again
			{ch: 'c', seq: 1, id: "a1", a: ptrDown(0.5, 0.5), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 2, id: "a2", a: ptrUp(0.5, 0.5), want: action.StatusAccepted, runs: true},
		}},
		{"stale page revision at submit", []step{
			{page: 5, ch: 'c', seq: 1, id: "a1", a: withPage(ptrDown(0.1, 0.1), 4), want: errcode.StalePage},
			{ch: 'c', seq: 1, id: "a1", a: withPage(ptrDown(0.1, 0.1), 5), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 2, id: "a2", a: ptrUp(0.1, 0.1), want: action.StatusAccepted, runs: true}, // 0: not given
			{ch: 'c', seq: 3, id: "a3", a: withPage(keyDown("KeyA"), 1), want: action.StatusAccepted, runs: true},
			{ch: 'p', seq: 1, a: withPage(move(0.2, 0.2), 4), want: ""},             // dropped silently
			{ch: 'p', seq: 2, a: withPage(move(0.3, 0.3), 5), want: "", runs: true}, // accepted, no ack
			{page: 6, ch: 'c', seq: 4, id: "a4", a: withPage(ptrDown(0.1, 0.1), 5), want: errcode.StalePage},
		}},
		{"pointer reorder: 12 before 11 drops 11", []step{
			{ch: 'p', seq: 12, a: move(0.12, 0.12), want: "", runs: true},
			{ch: 'p', seq: 11, a: move(0.11, 0.11), want: ""},
			{ch: 'p', seq: 12, a: move(0.12, 0.12), want: ""},
			{ch: 'p', seq: 13, a: action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaY: 120}, want: "", runs: true},
		}},
		{"a dropped pointer never blocks the next control", []step{
			{ch: 'p', seq: 5, a: move(0.5, 0.5), want: "", runs: true},
			{ch: 'p', seq: 3, a: move(0.3, 0.3), want: ""},
			{ch: 'c', seq: 1, id: "a1", a: ptrDown(0.5, 0.5), want: action.StatusAccepted, runs: true},
			{ch: 'p', seq: 1, a: move(0.1, 0.1), want: ""},
			{ch: 'c', seq: 2, id: "a2", a: ptrUp(0.5, 0.5), want: action.StatusAccepted, runs: true},
		}},
		{"control never moves the pointer high-water", []step{
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 2, id: "a2", a: keyUp("KeyA"), want: action.StatusAccepted, runs: true},
			{ch: 'c', seq: 3, id: "a3", a: keyDown("KeyB"), want: action.StatusAccepted, runs: true},
			{ch: 'p', seq: 1, a: move(0.1, 0.1), want: "", runs: true},
			{ch: 'p', seq: 2, a: move(0.2, 0.2), want: "", runs: true},
		}},
		{"invalid pointer action is acked", []step{
			{ch: 'p', seq: 1, a: move(-0.1, 0.5), want: errcode.InvalidArgument},
			{ch: 'p', seq: 2, a: action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaX: 1e9}, want: errcode.InvalidArgument},
			{ch: 'p', seq: 3, a: move(0.5, 0.5), want: "", runs: true},
		}},
		{"heartbeat is out of band", []step{
			{ch: 'c', seq: 0, id: "", a: action.Action{Kind: action.Heartbeat}, want: action.StatusAccepted},
			{ch: 'c', seq: 99, id: "hb", a: action.Action{Kind: action.Heartbeat}, want: action.StatusAccepted},
			{ch: 'c', seq: 1, id: "a1", a: keyDown("KeyA"), want: action.StatusAccepted, runs: true},
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			p := h.d.Grant(KindHuman, "alice")
			calls := 0
			for i, s := range sc.steps {
				if s.page != 0 {
					h.ex.page.Store(s.page)
				}
				var got *sub
				if s.ch == 'p' {
					got = h.ptr(p, s.seq, s.a)
				} else {
					got = h.ctl(p, s.seq, s.id, s.a)
				}
				h.idle()
				acks := got.all()
				switch {
				case s.want == "":
					if len(acks) != 0 {
						t.Fatalf("step %d: want no ack, got %+v", i, acks)
					}
				case len(acks) == 0:
					t.Fatalf("step %d: want %s, got no ack", i, s.want)
				case statusOrCode(acks[0]) != s.want:
					t.Fatalf("step %d: want %s, got %+v", i, s.want, acks[0])
				}
				if s.want == action.StatusAccepted && s.runs {
					if len(acks) != 2 || acks[1].Status != action.StatusCompleted || acks[1].ActionRevision != acks[0].ActionRevision {
						t.Fatalf("step %d: want accepted then completed with one revision, got %+v", i, acks)
					}
				}
				if len(acks) > 0 && acks[0].Status == action.StatusRejected && acks[0].Message == "" {
					t.Fatalf("step %d: rejection without message: %+v", i, acks[0])
				}
				if s.runs {
					calls++
				}
				if n := len(h.ex.snapshot()); n != calls {
					t.Fatalf("step %d: executor called %d times, want %d", i, n, calls)
				}
			}
		})
	}
}

func withPage(a action.Action, rev uint64) action.Action {
	a.PageRevision = rev
	return a
}

func TestPointerReorderCounted(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	h.ptr(p, 12, move(0.12, 0.12))
	h.ptr(p, 11, move(0.11, 0.11))
	h.idle()
	calls := h.ex.snapshot()
	if len(calls) != 1 || calls[0].a.X != 0.12 {
		t.Fatalf("executor calls %+v, want only the move of seq 12", calls)
	}
	if st := h.d.Stats(); st.DroppedPointer != 1 {
		t.Fatalf("DroppedPointer = %d, want 1", st.DroppedPointer)
	}
}

func TestDuplicateInFlight(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindAgent, "bot")
	unblock := h.ex.blockOn("https://slow.test/")
	s1 := h.ctl(p, 1, "a1", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	acc := first(t, s1)
	if acc.Status != action.StatusAccepted || acc.ActionRevision == 0 {
		t.Fatalf("first ack %+v", acc)
	}
	dup := h.ctl(p, 1, "a1", nav("https://slow.test/"))
	if got := dup.all(); len(got) != 1 || got[0].Status != action.StatusAccepted || got[0].ActionRevision != acc.ActionRevision {
		t.Fatalf("in-flight duplicate acks %+v, want the accepted ack", got)
	}
	if got := first(t, h.ctl(p, 2, "a1", nav("https://other.test/"))); got.Code != errcode.Conflict {
		t.Fatalf("different payload: %+v, want conflict", got)
	}
	unblock()
	fin := final(t, s1)
	if fin.Status != action.StatusCompleted {
		t.Fatalf("final %+v", fin)
	}
	again := h.ctl(p, 1, "a1", nav("https://slow.test/"))
	if got := again.all(); len(got) != 1 || got[0].Status != action.StatusCompleted || got[0].ActionRevision != acc.ActionRevision {
		t.Fatalf("completed duplicate acks %+v, want the completed ack", got)
	}
	h.idle()
	if n := len(h.ex.snapshot()); n != 1 {
		t.Fatalf("executor called %d times, want 1", n)
	}
	if st := h.d.Stats(); st.Duplicates != 2 || st.Rejected[errcode.Conflict] != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestStalePageAtExecution(t *testing.T) {
	h := newHarness(t, Config{})
	h.ex.page.Store(5)
	p := h.d.Grant(KindHuman, "alice")
	unblock := h.ex.blockOn("https://slow.test/")
	h.ctl(p, 1, "a1", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	down := h.ctl(p, 2, "a2", withPage(ptrDown(0.5, 0.5), 5))
	h.ptr(p, 1, withPage(move(0.4, 0.4), 5))
	key := h.ctl(p, 3, "a3", withPage(keyDown("KeyA"), 5))
	for _, s := range []*sub{down, key} {
		if got := first(t, s); got.Status != action.StatusAccepted {
			t.Fatalf("ack %+v", got)
		}
	}
	h.ex.page.Store(6) // the navigation landed
	unblock()
	h.idle()
	if got := final(t, down); got.Code != errcode.StalePage || got.PageRevision != 6 {
		t.Fatalf("pointer_down final %+v, want stale_page at revision 6", got)
	}
	if got := final(t, key); got.Status != action.StatusCompleted {
		t.Fatalf("key_down final %+v, want completed (not a coordinate action)", got)
	}
	calls := h.ex.snapshot()
	if len(calls) != 2 || calls[1].a.Kind != action.KeyDown {
		t.Fatalf("executor calls %+v, want navigate and key_down only", calls)
	}
	st := h.d.Stats()
	if st.DroppedStalePage != 1 || st.Rejected[errcode.StalePage] != 1 {
		t.Fatalf("stats %+v", st)
	}
	// The stale pointer_down consumed its seq: it was accepted.
	if got := first(t, h.ctl(p, 4, "a4", withPage(ptrDown(0.5, 0.5), 6))); got.Status != action.StatusAccepted {
		t.Fatalf("next seq %+v", got)
	}
	// A stale action is answered from the ledger like any other.
	if got := first(t, h.ctl(p, 2, "a2", withPage(ptrDown(0.5, 0.5), 5))); got.Code != errcode.StalePage {
		t.Fatalf("duplicate of stale action %+v", got)
	}
}

func TestGenerations(t *testing.T) {
	h := newHarness(t, Config{})
	g1 := h.d.Grant(KindHuman, "alice")
	if g1.Generation != 1 || len(g1.ID) < 20 || g1.Kind != KindHuman || g1.Owner != "alice" {
		t.Fatalf("grant %+v", g1)
	}
	if other := h.d.Grant(KindHuman, "alice"); other.ID == g1.ID {
		t.Fatal("two grants share an id")
	}
	if got := first(t, h.ctl(g1, 1, "a1", keyDown("KeyA"))); got.Status != action.StatusAccepted {
		t.Fatalf("%+v", got)
	}
	h.idle()
	g2, err := h.d.Renew(g1.ID)
	if err != nil || g2.ID != g1.ID || g2.Generation != 2 {
		t.Fatalf("renew: %+v, %v", g2, err)
	}
	cases := []struct {
		name string
		e    action.Envelope
		want string
	}{
		{"old generation control", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 1, ControlSeq: 2, ActionID: "a2", Action: keyUp("KeyA")}, errcode.StaleGeneration},
		{"old generation pointer", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 1, PointerSeq: 1, Action: move(0.5, 0.5)}, errcode.StaleGeneration},
		{"future generation", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 3, ControlSeq: 1, ActionID: "x", Action: keyUp("KeyA")}, errcode.StaleGeneration},
		{"generation zero", action.Envelope{ProducerID: g1.ID, ControlSeq: 1, ActionID: "x", Action: keyUp("KeyA")}, errcode.StaleGeneration},
		{"unknown producer", action.Envelope{ProducerID: "nobody", ProducerGeneration: 1, ControlSeq: 1, ActionID: "x", Action: keyUp("KeyA")}, errcode.UnknownProducer},
		{"empty producer", action.Envelope{ControlSeq: 1, ActionID: "x", Action: keyUp("KeyA")}, errcode.UnknownProducer},
		{"old generation heartbeat", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 1, Action: action.Action{Kind: action.Heartbeat}}, errcode.StaleGeneration},
		// new generation: fresh sequence spaces and a fresh ledger
		{"new generation starts at 1", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 2, ControlSeq: 1, ActionID: "a1", Action: keyDown("KeyB")}, action.StatusAccepted},
		{"new generation pointer starts fresh", action.Envelope{ProducerID: g1.ID, ProducerGeneration: 2, PointerSeq: 1, Action: action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaY: 5}}, ""},
	}
	for _, c := range cases {
		got := h.submit(c.e).all()
		if c.want == "" {
			if len(got) != 0 {
				t.Fatalf("%s: want no ack, got %+v", c.name, got)
			}
			continue
		}
		if len(got) == 0 || statusOrCode(got[0]) != c.want {
			t.Fatalf("%s: want %s, got %+v", c.name, c.want, got)
		}
	}
	g3, err := h.d.Renew(g1.ID)
	if err != nil || g3.Generation != 3 {
		t.Fatalf("renew: %+v %v", g3, err)
	}
	for _, gen := range []uint64{1, 2} {
		if got := first(t, h.submit(action.Envelope{ProducerID: g1.ID, ProducerGeneration: gen, ControlSeq: 2, ActionID: "z", Action: keyUp("KeyB")})); got.Code != errcode.StaleGeneration {
			t.Fatalf("gen %d after renew: %+v", gen, got)
		}
	}
	h.d.End(g1.ID)
	h.d.End(g1.ID) // idempotent
	for _, gen := range []uint64{1, 2, 3, 4} {
		if got := first(t, h.submit(action.Envelope{ProducerID: g1.ID, ProducerGeneration: gen, ControlSeq: 1, ActionID: "z", Action: keyUp("KeyB")})); got.Code != errcode.StaleGeneration {
			t.Fatalf("gen %d after end: %+v", gen, got)
		}
	}
	if _, err := h.d.Renew(g1.ID); !hasCode(err, errcode.StaleGeneration) {
		t.Fatalf("renew of ended producer: %v", err)
	}
	if _, err := h.d.Renew("nobody"); !hasCode(err, errcode.UnknownProducer) {
		t.Fatalf("renew of unknown producer: %v", err)
	}
	h.d.End("nobody") // ignored
}

func hasCode(err error, code string) bool {
	ae, ok := err.(*errcode.Error)
	return ok && ae.Code == code
}

func TestActionRevision(t *testing.T) {
	h := newHarness(t, Config{})
	a := h.d.Grant(KindHuman, "alice")
	b := h.d.Grant(KindAgent, "bot")
	var last uint64
	check := func(s *sub) {
		t.Helper()
		got := first(t, s)
		if got.Status != action.StatusAccepted || got.ActionRevision <= last {
			t.Fatalf("ack %+v after revision %d", got, last)
		}
		last = got.ActionRevision
	}
	for i := uint64(1); i <= 5; i++ {
		check(h.ctl(a, i, "a"+string(rune('0'+i)), keyDown("KeyA")))
		check(h.ctl(b, i, "b"+string(rune('0'+i)), keyDown("KeyB")))
	}
	h.ptr(a, 1, move(0.1, 0.1)) // pointer actions take a revision too
	check(h.ctl(b, 6, "b6", keyUp("KeyB")))
	if last != 12 {
		t.Fatalf("last revision %d, want 12 (11 control + 1 pointer)", last)
	}
	// Rejections take none.
	h.ctl(a, 9, "gap", keyUp("KeyA"))
	check(h.ctl(a, 6, "a6", keyUp("KeyA")))
	if last != 13 {
		t.Fatalf("revision after a rejection %d, want 13", last)
	}
}
