package dispatch

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

func TestQueueBounds(t *testing.T) {
	t.Run("per producer", func(t *testing.T) {
		h := newHarness(t, Config{})
		p := h.d.Grant(KindHuman, "alice")
		unblock := h.ex.blockOn("https://slow.test/")
		defer unblock()
		h.ctl(p, 1, "run", nav("https://slow.test/"))
		h.waitStarted("https://slow.test/") // running: not counted as queued
		for i := range DefaultProducerQueue {
			if got := first(t, h.ctl(p, uint64(i+2), fmt.Sprint(i), text("x"))); got.Status != action.StatusAccepted {
				t.Fatalf("action %d: %+v", i, got)
			}
		}
		if got := first(t, h.ctl(p, DefaultProducerQueue+2, "over", text("x"))); got.Code != errcode.QueueFull {
			t.Fatalf("33rd queued: %+v", got)
		}
		if got := first(t, h.ptr(p, 1, move(0.5, 0.5))); got.Code != errcode.QueueFull {
			t.Fatalf("pointer move over the bound: %+v", got)
		}
		st := h.d.Stats()
		if st.Queued != DefaultProducerQueue || st.ProducerQueue[p.ID] != DefaultProducerQueue || !st.Running {
			t.Fatalf("stats %+v", st)
		}
		// Another producer still has room.
		other := h.d.Grant(KindAgent, "bot")
		if got := first(t, h.ctl(other, 1, "o", text("x"))); got.Status != action.StatusAccepted {
			t.Fatalf("other producer: %+v", got)
		}
	})
	t.Run("per session count", func(t *testing.T) {
		h := newHarness(t, Config{})
		runner := h.d.Grant(KindAgent, "bot")
		unblock := h.ex.blockOn("https://slow.test/")
		defer unblock()
		h.ctl(runner, 1, "run", nav("https://slow.test/"))
		h.waitStarted("https://slow.test/")
		for n := range DefaultSessionQueue / DefaultProducerQueue {
			p := h.d.Grant(KindHuman, fmt.Sprint("u", n))
			for i := range DefaultProducerQueue {
				if got := first(t, h.ctl(p, uint64(i+1), fmt.Sprint(i), text("x"))); got.Status != action.StatusAccepted {
					t.Fatalf("producer %d action %d: %+v", n, i, got)
				}
			}
		}
		if got := first(t, h.ctl(runner, 2, "over", text("x"))); got.Code != errcode.QueueFull {
			t.Fatalf("129th queued: %+v", got)
		}
		if st := h.d.Stats(); st.Queued != DefaultSessionQueue {
			t.Fatalf("queued %d", st.Queued)
		}
	})
	t.Run("per session bytes", func(t *testing.T) {
		h := newHarness(t, Config{})
		p := h.d.Grant(KindHuman, "alice")
		unblock := h.ex.blockOn("https://slow.test/")
		defer unblock()
		h.ctl(p, 1, "run", nav("https://slow.test/"))
		h.waitStarted("https://slow.test/")
		big := text(strings.Repeat("a", 200<<10))
		per := big.Size() + len("b0")
		fit := DefaultSessionBytes / per
		for i := range fit {
			if got := first(t, h.ctl(p, uint64(i+2), fmt.Sprint("b", i), big)); got.Status != action.StatusAccepted {
				t.Fatalf("big %d: %+v", i, got)
			}
		}
		if got := first(t, h.ctl(p, uint64(fit+2), "over", big)); got.Code != errcode.QueueFull {
			t.Fatalf("over the byte bound: %+v", got)
		}
		if st := h.d.Stats(); st.QueuedBytes != fit*per || st.QueuedBytes > DefaultSessionBytes {
			t.Fatalf("queued bytes %d", st.QueuedBytes)
		}
	})
	t.Run("an action larger than the byte budget fits an empty queue", func(t *testing.T) {
		h := newHarness(t, Config{})
		p := h.d.Grant(KindHuman, "alice")
		unblock := h.ex.blockOn("https://slow.test/")
		defer unblock()
		h.ctl(p, 1, "run", nav("https://slow.test/"))
		h.waitStarted("https://slow.test/")
		if got := first(t, h.ctl(p, 2, "huge", text(strings.Repeat("a", MaxTextBytes)))); got.Status != action.StatusAccepted {
			t.Fatalf("1 MiB text into an empty queue: %+v", got)
		}
		if got := first(t, h.ctl(p, 3, "small", text("a"))); got.Code != errcode.QueueFull {
			t.Fatalf("behind 1 MiB: %+v", got)
		}
	})
}

func TestRateLimit(t *testing.T) {
	h := newHarness(t, Config{Burst: DefaultBurst}) // 16, 8/s on the fake clock
	p := h.d.Grant(KindHuman, "alice")
	seq := uint64(0)
	send := func() action.Ack {
		t.Helper()
		return first(t, h.ctl(p, seq+1, fmt.Sprint("a", seq+1), text("x")))
	}
	accept := func(n int) {
		t.Helper()
		for i := range n {
			if got := send(); got.Status != action.StatusAccepted {
				t.Fatalf("action %d of %d: %+v", i+1, n, got)
			}
			seq++
		}
		if got := send(); got.Code != errcode.RateLimited {
			t.Fatalf("action %d: %+v, want rate_limited", n+1, got)
		}
	}
	accept(16) // the 17th in a burst is refused (and does not consume its seq)
	// The refusal says when the next credit is due: 1/8 s on an empty
	// bucket, less once part of it has refilled.
	if got := send(); got.RetryAfterMs != 125 {
		t.Fatalf("retryAfterMs %d on an empty bucket, want 125", got.RetryAfterMs)
	}
	h.clock.Advance(100 * time.Millisecond)
	if got := send(); got.Code != errcode.RateLimited || got.RetryAfterMs != 25 {
		t.Fatalf("100 ms later: %+v, want rate_limited with retryAfterMs 25", got)
	}
	h.clock.Advance(25 * time.Millisecond)
	accept(1)
	h.clock.Advance(time.Second)
	accept(8)
	// Pointer moves and heartbeats are not charged; wheel is.
	for i := range 100 {
		if got := h.ptr(p, uint64(i+1), move(0.5, 0.5)).all(); len(got) != 0 {
			t.Fatalf("move %d: %+v", i, got)
		}
	}
	if got := h.submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: 1, Action: action.Action{Kind: action.Heartbeat}}).all(); len(got) != 2 {
		t.Fatalf("heartbeat %+v", got)
	}
	if got := first(t, h.ptr(p, 101, action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaY: 1})); got.Code != errcode.RateLimited {
		t.Fatalf("wheel: %+v", got)
	}
	// A reconnect does not refill the bucket.
	p, err := h.d.Renew(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	seq = 0
	if got := send(); got.Code != errcode.RateLimited {
		t.Fatalf("after renew: %+v", got)
	}
	// Releases are never charged: with the bucket empty, a key_up and a
	// pointer_up still get through.
	for i, a := range []action.Action{{Kind: action.KeyUp, Key: "a", Code: "KeyA"}, {Kind: action.PointerUp, X: 0.5, Y: 0.5, Button: "left"}} {
		if got := first(t, h.ctl(p, seq+1, fmt.Sprint("rel", i), a)); got.Status != action.StatusAccepted {
			t.Fatalf("release %s with an empty bucket: %+v", a.Kind, got)
		}
		seq++
	}
	// Refill stops at the burst.
	h.clock.Advance(time.Hour)
	accept(16)
	if st := h.d.Stats(); st.Rejected[errcode.RateLimited] != 8 {
		t.Fatalf("rate_limited count %d", st.Rejected[errcode.RateLimited])
	}
}

func TestCoalescing(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	unblock := h.ex.blockOn("https://slow.test/")
	h.ctl(p, 1, "run", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	h.ptr(p, 1, move(0.1, 0.1))
	h.ptr(p, 2, move(0.2, 0.2))
	h.ptr(p, 3, move(0.3, 0.3)) // replaces 0.1 then 0.2
	h.ctl(p, 2, "down", ptrDown(0.3, 0.3))
	h.ptr(p, 4, move(0.4, 0.4)) // not hoisted in front of the down
	h.ptr(p, 5, move(0.5, 0.5))
	h.ctl(p, 3, "up", ptrUp(0.5, 0.5))
	wheel := action.Action{Kind: action.Wheel, X: 0.5, Y: 0.5, DeltaY: 10}
	h.ptr(p, 6, wheel)
	h.ptr(p, 7, wheel) // wheel is not coalesced
	h.ptr(p, 8, move(0.6, 0.6))
	if st := h.d.Stats(); st.Queued != 7 || st.CoalescedMoves != 3 {
		t.Fatalf("stats %+v", st)
	}
	unblock()
	h.idle()
	var got []string
	for _, c := range h.ex.snapshot()[1:] {
		got = append(got, fmt.Sprintf("%s@%.1f", c.a.Kind, c.a.X))
	}
	want := "pointer_move@0.3 pointer_down@0.3 pointer_move@0.5 pointer_up@0.5 wheel@0.5 wheel@0.5 pointer_move@0.6"
	if strings.Join(got, " ") != want {
		t.Fatalf("executed\n %s\nwant\n %s", strings.Join(got, " "), want)
	}
}

func TestDeadline(t *testing.T) {
	h := newHarness(t, Config{Deadline: 100 * time.Millisecond})
	p := h.d.Grant(KindAgent, "bot")
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) }) // runs before Close: lets the abandoned call exit
	h.ex.setFn(func(ctx context.Context, c call) (action.Result, error) {
		switch c.a.URL {
		case "https://hang.test/": // ignores its context
			<-hang
			return action.Result{}, nil
		case "https://slow.test/": // honours its context
			<-ctx.Done()
			return action.Result{}, ctx.Err()
		case "https://refuse-late.test/": // knows nothing happened
			<-ctx.Done()
			return action.Result{}, errcode.Newf(errcode.Timeout, "navigation did not start")
		}
		return action.Result{}, nil
	})
	cases := []struct {
		url, want string
	}{
		{"https://hang.test/", errcode.OutcomeUnknown},
		{"https://slow.test/", errcode.OutcomeUnknown},
		{"https://refuse-late.test/", errcode.Timeout},
	}
	for i, c := range cases {
		s := h.ctl(p, uint64(2*i+1), c.url, nav(c.url))
		next := h.ctl(p, uint64(2*i+2), fmt.Sprint("next", i), keyDown("KeyA"))
		if got := final(t, s); got.Code != c.want || got.Message == "" {
			t.Fatalf("%s: %+v, want %s", c.url, got, c.want)
		}
		if got := final(t, next); got.Status != action.StatusCompleted {
			t.Fatalf("the action after %s: %+v", c.url, got)
		}
		// Never re-run: a duplicate returns the recorded outcome.
		if got := h.ctl(p, uint64(2*i+1), c.url, nav(c.url)).all(); len(got) != 1 || got[0].Code != c.want {
			t.Fatalf("duplicate of %s: %+v", c.url, got)
		}
	}
	h.idle()
	runs := map[string]int{}
	for _, c := range h.ex.snapshot() {
		runs[c.a.URL]++
	}
	for _, c := range cases {
		if runs[c.url] != 1 {
			t.Fatalf("%s executed %d times", c.url, runs[c.url])
		}
	}
	if st := h.d.Stats(); st.AbandonedExecs != 1 || st.Rejected[errcode.OutcomeUnknown] != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestExecutorOutcomes(t *testing.T) {
	cases := []struct {
		name string
		fn   func() (action.Result, error)
		want action.Ack
	}{
		{"completed with result", func() (action.Result, error) { return action.Result{Text: "clip", PageRevision: 9}, nil },
			action.Ack{Status: action.StatusCompleted, PageRevision: 9, Result: &action.Result{Text: "clip", PageRevision: 9}}},
		{"refusal code passes through", func() (action.Result, error) {
			return action.Result{}, errcode.Newf(errcode.NavigationBlocked, "blocked by policy")
		}, action.Ack{Status: action.StatusRejected, Code: errcode.NavigationBlocked, Message: "blocked by policy", PageRevision: 3}},
		{"wrapped refusal", func() (action.Result, error) {
			return action.Result{}, fmt.Errorf("navigate: %w", errcode.Newf(errcode.NoDialog, "no dialog"))
		}, action.Ack{Status: action.StatusRejected, Code: errcode.NoDialog, Message: "no dialog", PageRevision: 3}},
		{"refusal without code", func() (action.Result, error) { return action.Result{}, &errcode.Error{Message: "?"} },
			action.Ack{Status: action.StatusRejected, Code: errcode.Failed, Message: "?", PageRevision: 3}},
		{"other error", func() (action.Result, error) { return action.Result{}, errors.New("cdp: websocket closed") },
			action.Ack{Status: action.StatusRejected, Code: errcode.OutcomeUnknown, Message: "the action may have taken effect; it is not re-run", PageRevision: 3}},
		{"panic", func() (action.Result, error) { panic("executor bug") },
			action.Ack{Status: action.StatusRejected, Code: errcode.OutcomeUnknown, Message: "the action may have taken effect; it is not re-run", PageRevision: 3}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.ex.page.Store(3)
			p := h.d.Grant(KindAgent, "bot")
			h.ex.setFn(func(context.Context, call) (action.Result, error) { return c.fn() })
			got := final(t, h.ctl(p, 1, "a1", action.Action{Kind: action.ClipboardRead}))
			want := c.want
			want.ActionID, want.ActionRevision = "a1", 1
			gotR, wantR := got.Result, want.Result
			got.Result, want.Result = nil, nil
			if got != want || (gotR == nil) != (wantR == nil) || (gotR != nil && *gotR != *wantR) {
				t.Fatalf("ack\n %+v %+v\nwant\n %+v %+v", got, gotR, want, wantR)
			}
			// The session goes on.
			h.ex.setFn(nil)
			if got := final(t, h.ctl(p, 2, "a2", keyDown("KeyA"))); got.Status != action.StatusCompleted {
				t.Fatalf("next: %+v", got)
			}
		})
	}
}

func TestFairness(t *testing.T) {
	h := newHarness(t, Config{})
	flood := h.d.Grant(KindAgent, "bot")
	other := h.d.Grant(KindHuman, "alice")
	third := h.d.Grant(KindAgent, "bot2")
	unblock := h.ex.blockOn("https://slow.test/")
	h.ctl(flood, 1, "run", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	for i := range DefaultProducerQueue {
		h.ctl(flood, uint64(i+2), fmt.Sprint("f", i), text("flood"))
	}
	for i := range DefaultProducerQueue {
		h.ctl(third, uint64(i+1), fmt.Sprint("t", i), text("third"))
	}
	for i := range 3 {
		h.ctl(other, uint64(i+1), fmt.Sprint("o", i), keyDown(fmt.Sprint("K", i)))
	}
	unblock()
	h.idle()
	calls := h.ex.snapshot()[1:]
	// Round k (k = 0, 1, …) serves each producer with work once, so the
	// other's i-th action runs within its round: at most (i+1)*3 executions in.
	seen := 0
	for pos, c := range calls {
		if c.producer == other.ID {
			if limit := (seen + 1) * 3; pos+1 > limit {
				t.Fatalf("the other's action %d ran at position %d, after more than %d executions", seen, pos+1, limit)
			}
			seen++
		}
	}
	if seen != 3 {
		t.Fatalf("the other's actions ran %d times, want 3", seen)
	}
	// And the very first one ran within 2 dispatch rounds of being queued.
	for pos, c := range calls {
		if c.producer == other.ID {
			if pos >= 2 {
				t.Fatalf("first action of the other ran at position %d", pos+1)
			}
			break
		}
	}
}

func TestClose(t *testing.T) {
	h := newHarness(t, Config{})
	p := h.d.Grant(KindHuman, "alice")
	h.ctl(p, 1, "d", keyDown("ShiftLeft"))
	h.idle()
	h.ex.blockOn("https://slow.test/") // honours ctx: Close cancels it
	running := h.ctl(p, 2, "run", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	queued := []*sub{h.ctl(p, 3, "q1", text("a")), h.ctl(p, 4, "q2", text("b"))}
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); h.d.Close() }()
	}
	wg.Wait()
	if got := final(t, running); got.Code != errcode.OutcomeUnknown {
		t.Fatalf("the running action: %+v", got)
	}
	for _, s := range queued {
		if got := final(t, s); got.Code != errcode.SessionClosed {
			t.Fatalf("queued: %+v", got)
		}
	}
	calls := h.ex.snapshot()
	if last := calls[len(calls)-1].a; last.Kind != action.KeyUp || last.Code != "ShiftLeft" {
		t.Fatalf("held key not released on close: %+v", calls)
	}
	if got := first(t, h.ctl(p, 5, "after", text("c"))); got.Code != errcode.SessionClosed {
		t.Fatalf("after close: %+v", got)
	}
	late := h.d.Grant(KindHuman, "late")
	if got := first(t, h.ctl(late, 1, "x", text("c"))); got.Code != errcode.SessionClosed {
		t.Fatalf("grant after close: %+v", got)
	}
	if _, err := h.d.Renew(p.ID); !hasCode(err, errcode.SessionClosed) {
		t.Fatalf("renew after close: %v", err)
	}
	h.d.End(p.ID)
	<-h.d.idle()
	if st := h.d.Stats(); st.Queued != 0 || st.Running {
		t.Fatalf("stats after close %+v", st)
	}
}

// Many producers and goroutines at once: every control message gets exactly
// one synchronous ack, accepted ones exactly one final ack, nothing races.
func TestConcurrentProducers(t *testing.T) {
	ex := newRecExec()
	d := New(Config{Burst: 40, RatePerSec: 1000, Deadline: time.Second}, ex)
	const producers, perProducer = 6, 150
	type rec struct {
		accepted bool
		s        *sub
	}
	var mu sync.Mutex
	var recs []rec
	var wg sync.WaitGroup
	for n := range producers {
		p := d.Grant(KindHuman, fmt.Sprint("u", n))
		wg.Add(2)
		go func() { // control channel
			defer wg.Done()
			seq := uint64(1)
			gen := p.Generation
			for i := range perProducer {
				if n%3 == 0 && i == perProducer/2 {
					np, err := d.Renew(p.ID)
					if err != nil {
						t.Error(err)
						return
					}
					gen, seq = np.Generation, 1
				}
				s := &sub{}
				a := []action.Action{keyDown("KeyA"), keyUp("KeyA"), ptrDown(0.5, 0.5), ptrUp(0.5, 0.5), text("x")}[i%5]
				d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: gen, ControlSeq: seq, ActionID: fmt.Sprint(gen, "-", i), Action: a}, s.reply)
				acks := s.all()
				if len(acks) == 0 {
					t.Error("no synchronous ack")
					return
				}
				if acks[0].Status == action.StatusAccepted {
					seq++
				}
				mu.Lock()
				recs = append(recs, rec{accepted: acks[0].Status == action.StatusAccepted, s: s})
				mu.Unlock()
			}
			if n == 1 {
				d.End(p.ID)
			}
		}()
		go func() { // pointer channel
			defer wg.Done()
			for i := range perProducer {
				d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: p.Generation, PointerSeq: uint64(perProducer - i%7 + i), Action: move(float64(i%10)/10, 0.5)}, nil)
			}
		}()
	}
	wg.Wait()
	d.Close()
	for _, r := range recs {
		acks := r.s.all()
		want := 1
		if r.accepted {
			want = 2
		}
		if len(acks) != want {
			t.Fatalf("acks %+v, want %d", acks, want)
		}
		if r.accepted && acks[1].Status == action.StatusAccepted {
			t.Fatalf("final ack is accepted: %+v", acks)
		}
	}
	st := d.Stats()
	if st.Queued != 0 || st.QueuedBytes != 0 || st.Held != 0 || st.Producers != 0 {
		t.Fatalf("after close: %+v", st)
	}
}

// TestPointerGestureIsOneProducers: while one producer holds a mouse
// button, another's pointer actions wait (its keys do not), so a click or
// a drag is never split by someone else's pointer.
// gestureSetup grants a person and a bot and keeps the worker busy on the
// bot's navigation (its first action) until unblock is called, so that
// what the test queues next waits together.
func gestureSetup(t *testing.T, cfg Config) (h *harness, person, bot Grant, unblock func()) {
	h = newHarness(t, cfg)
	person = h.d.Grant(KindHuman, "alice")
	bot = h.d.Grant(KindAgent, "bot")
	unblock = h.ex.blockOn("https://slow.test/")
	h.ctl(bot, 1, "slow", nav("https://slow.test/"))
	h.waitStarted("https://slow.test/")
	return h, person, bot, unblock
}

// runOrder is who ran what after the first (blocking) call: "p:kind b:kind".
func runOrder(h *harness, person, bot Grant) string {
	var order []string
	for _, c := range h.ex.snapshot()[1:] {
		who := map[string]string{person.ID: "p", bot.ID: "b"}[c.producer]
		order = append(order, who+":"+string(c.a.Kind))
	}
	return strings.Join(order, " ")
}

var (
	personDown = action.Action{Kind: action.PointerDown, X: 0.1, Y: 0.1, Button: "left", ClickCount: 1}
	personUp   = action.Action{Kind: action.PointerUp, X: 0.1, Y: 0.1, Button: "left", ClickCount: 1}
)

func TestPointerGestureIsOneProducers(t *testing.T) {
	h, person, bot, unblock := gestureSetup(t, Config{})
	// Queued while the worker is busy: the person's press, the bot's whole
	// click and a key, then the person's release.
	down, up := personDown, personUp
	bdown, bup := down, up
	bdown.X, bup.X = 0.9, 0.9
	h.ctl(person, 1, "p-down", down)
	h.ctl(bot, 2, "b-down", bdown)
	h.ctl(bot, 3, "b-up", bup)
	h.ctl(bot, 4, "b-key", keyDown("KeyB"))
	h.ctl(person, 2, "p-up", up)
	unblock()
	h.idle()
	got := runOrder(h, person, bot)
	// The bot's pointer waits for the person's release (and its key, queued
	// behind its pointer, follows in its own order).
	if got != "p:pointer_down p:pointer_up b:pointer_down b:pointer_up b:key_down" {
		t.Fatalf("order %s: the bot's pointer ran inside the person's click", got)
	}
}

// An agent's click action is a pointer action too: it waits for a person's
// release, and it is charged one credit like a press.
func TestClickActionWaitsForGesture(t *testing.T) {
	h, person, bot, unblock := gestureSetup(t, Config{Burst: 2}) // the fake clock stands still: no refill
	click := action.Action{Kind: action.Click, X: 0.9, Y: 0.9, Button: "left", ClickCount: 1}
	h.ctl(person, 1, "p-down", personDown)
	h.ctl(bot, 2, "b-click", click)
	h.ctl(person, 2, "p-up", personUp)
	// The bot's budget (2) went on the navigation and the click.
	if k := first(t, h.ctl(bot, 3, "b-click-2", click)); k.Code != errcode.RateLimited {
		t.Fatalf("third charged action: %+v, want rate_limited", k)
	}
	unblock()
	h.idle()
	if got := runOrder(h, person, bot); got != "p:pointer_down p:pointer_up b:click" {
		t.Fatalf("order %s: the bot's click ran inside the person's press", got)
	}
	for _, bad := range []action.Action{
		{Kind: action.Click, X: 0.5, Y: 0.5},
		{Kind: action.Click, X: 1.5, Y: 0.5, Button: "left"},
		{Kind: action.Click, X: 0.5, Y: 0.5, Button: "left", ClickCount: 4},
		{Kind: action.TextInsert},
	} {
		if err := Validate(bad); err == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
	if err := Validate(action.Action{Kind: action.TextInsert, Replace: true}); err != nil {
		t.Errorf("a replace with no text (delete the field's content): %v", err)
	}
}
