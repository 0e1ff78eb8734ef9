package dispatch

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/action"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is the dispatcher's Now in tests: it moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

type call struct {
	producer string
	a        action.Action // as submitted: Buttons is in buttons
	buttons  int           // the Buttons the dispatcher handed the executor
}

// recExec is an in-memory executor: it records every call and, by default,
// completes at once. fn overrides the behaviour per call.
type recExec struct {
	page    atomic.Uint64
	started chan call // every call, as it starts

	mu    sync.Mutex
	calls []call
	fn    func(ctx context.Context, c call) (action.Result, error)
}

func newRecExec() *recExec { return &recExec{started: make(chan call, 1<<14)} }

func (r *recExec) Execute(ctx context.Context, producerID string, a action.Action) (action.Result, error) {
	c := call{producer: producerID, a: a, buttons: a.Buttons}
	c.a.Buttons = 0
	r.mu.Lock()
	r.calls = append(r.calls, c)
	fn := r.fn
	r.mu.Unlock()
	select {
	case r.started <- c:
	default:
		panic("recExec: started channel full")
	}
	if fn != nil {
		return fn(ctx, c)
	}
	return action.Result{PageRevision: r.page.Load()}, nil
}

func (r *recExec) PageRevision() uint64 { return r.page.Load() }

func (r *recExec) setFn(fn func(ctx context.Context, c call) (action.Result, error)) {
	r.mu.Lock()
	r.fn = fn
	r.mu.Unlock()
}

func (r *recExec) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// blockOn makes every call whose URL is url wait until the returned
// function is called (or its context ends). Other calls complete at once.
func (r *recExec) blockOn(url string) (unblock func()) {
	gate := make(chan struct{})
	var once sync.Once
	r.setFn(func(ctx context.Context, c call) (action.Result, error) {
		if c.a.URL == url {
			select {
			case <-gate:
			case <-ctx.Done():
				return action.Result{}, ctx.Err()
			}
		}
		return action.Result{PageRevision: r.page.Load()}, nil
	})
	return func() { once.Do(func() { close(gate) }) }
}

type harness struct {
	t     *testing.T
	d     *Dispatcher
	ex    *recExec
	clock *fakeClock
}

// newHarness starts a dispatcher with a frozen fake clock. Unless cfg says
// otherwise the token bucket is out of the way (burst 10000).
func newHarness(t *testing.T, cfg Config) *harness {
	t.Helper()
	h := &harness{t: t, ex: newRecExec(), clock: newClock()}
	if cfg.Now == nil {
		cfg.Now = h.clock.Now
	}
	if cfg.Burst == 0 {
		cfg.Burst = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h.d = New(cfg, h.ex)
	t.Cleanup(h.d.Close)
	return h
}

// sub records the acks of one Submit call.
type sub struct {
	mu   sync.Mutex
	acks []action.Ack
}

func (s *sub) reply(a action.Ack) {
	s.mu.Lock()
	s.acks = append(s.acks, a)
	s.mu.Unlock()
}

func (s *sub) all() []action.Ack {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]action.Ack(nil), s.acks...)
}

func (h *harness) submit(e action.Envelope) *sub {
	s := &sub{}
	h.d.Submit(e, s.reply)
	return s
}

func (h *harness) ctl(p Grant, seq uint64, id string, a action.Action) *sub {
	return h.submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: p.Generation, ControlSeq: seq, ActionID: id, Action: a})
}

func (h *harness) ptr(p Grant, seq uint64, a action.Action) *sub {
	return h.submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: p.Generation, PointerSeq: seq, Action: a})
}

// idle waits until the worker has nothing left to run.
func (h *harness) idle() {
	h.t.Helper()
	select {
	case <-h.d.idle():
	case <-time.After(10 * time.Second):
		h.t.Fatal("dispatcher never became idle")
	}
}

// waitStarted waits for the executor to start a call for url (any call if
// url is empty), skipping calls started before.
func (h *harness) waitStarted(url string) call {
	h.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case c := <-h.ex.started:
			if url == "" || c.a.URL == url {
				return c
			}
		case <-timeout:
			h.t.Fatal("executor never called")
			return call{}
		}
	}
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// first returns the synchronous ack of s (the first one).
func first(t *testing.T, s *sub) action.Ack {
	t.Helper()
	acks := s.all()
	if len(acks) == 0 {
		t.Fatal("no ack")
	}
	return acks[0]
}

// final waits for the second ack of s (the final one of an accepted action).
func final(t *testing.T, s *sub) action.Ack {
	t.Helper()
	eventually(t, "final ack", func() bool { return len(s.all()) >= 2 })
	acks := s.all()
	if len(acks) != 2 {
		t.Fatalf("want 2 acks, got %+v", acks)
	}
	return acks[1]
}

// statusOrCode summarizes an ack as its status, or its code if rejected.
func statusOrCode(a action.Ack) string {
	if a.Status == action.StatusRejected {
		return a.Code
	}
	return a.Status
}

func keyDown(code string) action.Action {
	return action.Action{Kind: action.KeyDown, Key: code, Code: code}
}

func keyUp(code string) action.Action {
	return action.Action{Kind: action.KeyUp, Key: code, Code: code}
}

func ptrDown(x, y float64) action.Action {
	return action.Action{Kind: action.PointerDown, X: x, Y: y, Button: "left", ClickCount: 1}
}

func ptrUp(x, y float64) action.Action {
	return action.Action{Kind: action.PointerUp, X: x, Y: y, Button: "left", ClickCount: 1}
}

func move(x, y float64) action.Action { return action.Action{Kind: action.PointerMove, X: x, Y: y} }

func nav(url string) action.Action { return action.Action{Kind: action.Navigate, URL: url} }

func text(s string) action.Action { return action.Action{Kind: action.TextInsert, Text: s} }
