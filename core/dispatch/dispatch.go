package dispatch

import (
	"context"
	"crypto/rand"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/telemetry"
)

// Executor performs actions on the page. The dispatcher calls Execute from
// one goroutine at a time; PageRevision may be called concurrently with
// anything and must be cheap.
type Executor interface {
	// Execute performs one action on the page. ctx carries the 30 s deadline. A refusal returns *errcode.Error
	// (its Code is passed through in the ack); any other error after the action may have had a side effect → outcome_unknown.
	Execute(ctx context.Context, producerID string, a action.Action) (action.Result, error)
	// PageRevision is the page's current revision (rises on top-level navigation / page switch).
	PageRevision() uint64
}

// Defaults for zero Config fields.
const (
	DefaultSessionQueue  = 128
	DefaultSessionBytes  = 1 << 20
	DefaultProducerQueue = 32
	DefaultBurst         = 16
	DefaultRatePerSec    = 8
	DefaultDeadline      = 30 * time.Second
	DefaultHeldWatchdog  = 5 * time.Second
	DefaultLedgerSize    = 256
)

// Fixed limits.
const (
	// MaxActionIDLen bounds an actionId (bytes).
	MaxActionIDLen = 128
	// MaxHeldKeys bounds the keys one producer may hold at once.
	MaxHeldKeys = 64
	// maxTombstones bounds how many ended producer ids are remembered (so
	// they answer stale_generation rather than unknown_producer).
	maxTombstones = 4096
	// closeReleaseBudget bounds the releases run by Close.
	closeReleaseBudget = 5 * time.Second
	// maxGrace bounds how long the worker waits for an executor that
	// overran its deadline before abandoning it.
	maxGrace = time.Second
)

// Config bounds one dispatcher. Zero fields take the defaults above.
type Config struct {
	SessionQueue  int           // queued actions per session (128)
	SessionBytes  int           // queued bytes per session (1 MiB)
	ProducerQueue int           // queued actions per producer (32)
	Burst         int           // token bucket burst per producer (16)
	RatePerSec    float64       // token bucket refill per producer (8/s)
	Deadline      time.Duration // per action (30 s)
	HeldWatchdog  time.Duration // release held input after this long without a message (5 s)
	LedgerSize    int           // results kept per producer generation for duplicate actionIds (256)
	Logger        *slog.Logger
	Now           func() time.Time   // token bucket and watchdog clock; default time.Now
	Telemetry     *telemetry.Metrics // event counters; nil = none
}

func (c Config) withDefaults() Config {
	if c.SessionQueue <= 0 {
		c.SessionQueue = DefaultSessionQueue
	}
	if c.SessionBytes <= 0 {
		c.SessionBytes = DefaultSessionBytes
	}
	if c.ProducerQueue <= 0 {
		c.ProducerQueue = DefaultProducerQueue
	}
	if c.Burst <= 0 {
		c.Burst = DefaultBurst
	}
	if !(c.RatePerSec > 0) {
		c.RatePerSec = DefaultRatePerSec
	}
	if c.Deadline <= 0 {
		c.Deadline = DefaultDeadline
	}
	if c.HeldWatchdog <= 0 {
		c.HeldWatchdog = DefaultHeldWatchdog
	}
	if c.LedgerSize <= 0 {
		c.LedgerSize = DefaultLedgerSize
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Producer kinds (Grant.Kind).
const (
	KindHuman = "human"
	KindAgent = "agent"
)

// Grant is a producer's right to act: who may submit actions, under which generation.
type Grant struct {
	ID         string
	Generation uint64
	Kind       string // "human" | "agent"
	Owner      string
}

// Dispatcher is the one action dispatcher of a browser session.
type Dispatcher struct {
	cfg   Config
	ex    Executor
	log   *slog.Logger
	grace time.Duration

	ctx    context.Context // cancelled by Close: aborts the running action
	cancel context.CancelFunc
	wake   chan struct{} // cap 1: something changed for the worker
	done   chan struct{} // closed when the worker has stopped

	closeOnce sync.Once

	mu        sync.Mutex
	closed    bool
	stopped   bool
	closeBy   time.Time // real-time budget for releases after Close
	producers map[string]*producer
	ring      []*producer // live producers, grant order; round-robin over it
	rr        int         // index in ring of the next producer to serve
	tombs     []string    // ended producer ids, oldest first
	sys       []release   // synthesized releases, run before queued actions
	barriers  []chan struct{}
	queued    int
	qbytes    int
	rev       uint64 // last actionRevision
	running   bool
	pressing  *item // the running key_down or pointer_down, until finish notes it (see LiftHeld)
	st        counters
}

// New starts a dispatcher and its one worker goroutine; Close stops it.
func New(cfg Config, ex Executor) *Dispatcher {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		cfg:       cfg,
		ex:        ex,
		log:       cfg.Logger,
		grace:     min(maxGrace, cfg.Deadline),
		ctx:       ctx,
		cancel:    cancel,
		wake:      make(chan struct{}, 1),
		done:      make(chan struct{}),
		producers: make(map[string]*producer),
		st:        counters{rejected: make(map[string]uint64)},
	}
	go d.run()
	return d
}

// Grant registers a new producer at generation 1 with a random,
// unguessable id.
func (d *Dispatcher) Grant(kind, owner string) Grant {
	id := rand.Text() // 128 bits from crypto/rand
	d.mu.Lock()
	defer d.mu.Unlock()
	now := d.cfg.Now()
	p := &producer{
		id: id, kind: kind, owner: owner,
		gen:      newGeneration(1, now),
		tokens:   float64(d.cfg.Burst),
		refilled: now,
	}
	d.producers[id] = p
	if d.closed {
		p.ended = true // a grant on a closed session is born refused
		return p.grant()
	}
	d.ring = append(d.ring, p)
	return p.grant()
}

// Renew bumps a producer's generation (reconnect, peer replacement). The old
// generation is refused forever; its held input is released and its queued
// actions are rejected stale_generation.
func (d *Dispatcher) Renew(id string) (Grant, error) {
	pageRev := d.ex.PageRevision()
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return Grant{}, errcode.Newf(errcode.SessionClosed, "session closed")
	}
	p := d.producers[id]
	if p == nil {
		d.mu.Unlock()
		return Grant{}, errcode.Newf(errcode.UnknownProducer, "unknown producer")
	}
	if p.ended {
		d.mu.Unlock()
		return Grant{}, errcode.Newf(errcode.StaleGeneration, "producer ended")
	}
	drops := d.endGenerationLocked(p, errcode.StaleGeneration, "producer renewed", pageRev)
	p.gen = newGeneration(p.gen.n+1, d.cfg.Now())
	g := p.grant()
	d.mu.Unlock()
	d.replyDrops(drops)
	return g, nil
}

// End ends a producer (peer or DataChannel closed, socket lost, revoke): its
// held input is released, its queued actions are rejected
// stale_generation, and it is refused forever. Unknown ids are ignored.
func (d *Dispatcher) End(id string) {
	pageRev := d.ex.PageRevision()
	d.mu.Lock()
	p := d.producers[id]
	if p == nil || p.ended {
		d.mu.Unlock()
		return
	}
	drops := d.endProducerLocked(p, errcode.StaleGeneration, "producer ended", pageRev)
	d.mu.Unlock()
	d.replyDrops(drops)
}

// Close rejects every queued action (session_closed), cancels the running
// one, releases every producer's held input and stops the worker. It is
// idempotent and returns once the worker has stopped.
func (d *Dispatcher) Close() {
	d.closeOnce.Do(func() {
		pageRev := d.ex.PageRevision()
		d.mu.Lock()
		d.closed = true
		d.closeBy = time.Now().Add(closeReleaseBudget)
		var drops []drop
		for _, p := range append([]*producer(nil), d.ring...) {
			drops = append(drops, d.endProducerLocked(p, errcode.SessionClosed, "session closed", pageRev)...)
		}
		d.kickLocked()
		d.mu.Unlock()
		d.cancel()
		d.replyDrops(drops)
	})
	<-d.done
}

// Submit validates and fences e, then replies exactly once with accepted or
// rejected before it returns, and for accepted actions once more with
// completed or rejected (usually later from the worker; possibly before
// Submit returns, never before the accepted ack). Pointer-channel actions
// are acked only when rejected for a reason other than staleness.
//
// reply is called from the caller's goroutine or the worker's, never under
// the dispatcher's lock. It must not block and must not call Close; it may
// call Submit, End, Renew or Stats.
func (d *Dispatcher) Submit(e action.Envelope, reply func(action.Ack)) {
	if reply == nil {
		reply = func(action.Ack) {}
	}
	verr := Validate(e.Action)
	pageRev := d.ex.PageRevision()
	d.mu.Lock()
	out := d.submitLocked(e, verr, pageRev, reply)
	d.mu.Unlock()
	for _, a := range out.acks {
		reply(a)
	}
	if it := out.item; it != nil {
		// The accepted ack is out: a final ack that came first was held
		// back for us to send now.
		d.mu.Lock()
		it.acceptPending = false
		def := it.deferred
		it.deferred = nil
		d.mu.Unlock()
		if def != nil {
			reply(*def)
		}
	}
}

type submitOut struct {
	acks []action.Ack
	item *item // accepted control action, its accepted ack in acks
}

func (d *Dispatcher) submitLocked(e action.Envelope, verr error, pageRev uint64, reply func(action.Ack)) submitOut {
	reject := func(code, msg string) submitOut {
		d.st.rejected[code]++
		d.cfg.Telemetry.ActionRejected(code)
		return submitOut{acks: []action.Ack{{ActionID: e.ActionID, Status: action.StatusRejected, Code: code, Message: msg, PageRevision: pageRev}}}
	}
	if d.closed {
		return reject(errcode.SessionClosed, "session closed")
	}
	p := d.producers[e.ProducerID]
	if p == nil {
		return reject(errcode.UnknownProducer, "unknown producer")
	}
	if p.ended {
		return reject(errcode.StaleGeneration, "producer ended")
	}
	gen := p.gen
	if e.ProducerGeneration != gen.n {
		return reject(errcode.StaleGeneration, "producer generation is not current")
	}
	now := d.cfg.Now()
	gen.lastSeen = now // any authenticated message renews held input
	if verr != nil {
		ae := asActionError(verr)
		return reject(ae.Code, ae.Message)
	}
	if len(e.ActionID) > MaxActionIDLen {
		return reject(errcode.InvalidArgument, "actionId too long")
	}
	a := e.Action
	switch {
	case a.Kind == action.Heartbeat:
		d.st.heartbeats++
		return submitOut{acks: []action.Ack{
			{ActionID: e.ActionID, Status: action.StatusAccepted, PageRevision: pageRev},
			{ActionID: e.ActionID, Status: action.StatusCompleted, PageRevision: pageRev, Result: &action.Result{PageRevision: pageRev}},
		}}
	case a.OnPointerChannel():
		return d.submitPointerLocked(p, e, now, pageRev, reply, reject)
	}

	// Control channel.
	if e.ActionID == "" {
		return reject(errcode.InvalidArgument, "actionId is required")
	}
	if en := gen.ledger.get(e.ActionID); en != nil {
		if en.a != a {
			return reject(errcode.Conflict, "actionId already used with a different payload")
		}
		d.st.duplicates++
		if en.final != nil {
			return submitOut{acks: []action.Ack{cloneAck(*en.final)}}
		}
		return submitOut{acks: []action.Ack{{ActionID: e.ActionID, Status: action.StatusAccepted, ActionRevision: en.rev, PageRevision: pageRev}}}
	}
	if e.ControlSeq != gen.lastControl+1 {
		return reject(errcode.SeqGap, "controlSeq out of order: expected "+strconv.FormatUint(gen.lastControl+1, 10))
	}
	if stalePage(a, pageRev) {
		if isRelease(a) {
			gen.held.note(a, true, true) // the hold ended with its page (see finish)
		}
		return reject(errcode.StalePage, "page changed (revision "+strconv.FormatUint(pageRev, 10)+"); observe again")
	}
	if a.Kind == action.KeyDown && !gen.held.hasKey(keyID(a)) && len(gen.held.keys) >= MaxHeldKeys {
		return reject(errcode.NotAllowed, "too many keys held")
	}
	size := a.Size() + len(e.ActionID)
	if !d.roomLocked(p, size) {
		return reject(errcode.QueueFull, "action queue full")
	}
	// Releases are never charged: refusing a key_up or pointer_up would
	// leave input held, and each one follows a charged press anyway, so a
	// typist gets a keystroke per credit rather than half of one.
	if !isRelease(a) && !p.take(now, d.cfg.Burst, d.cfg.RatePerSec) {
		return rateLimited(reject, p, d.cfg.RatePerSec)
	}
	gen.lastControl++
	d.rev++
	gen.ledger.put(e.ActionID, &entry{a: a, rev: d.rev}, d.cfg.LedgerSize)
	it := &item{p: p, gen: gen, env: e, rev: d.rev, size: size, reply: reply, control: true, acceptPending: true}
	d.enqueueLocked(p, it)
	return submitOut{
		acks: []action.Ack{{ActionID: e.ActionID, Status: action.StatusAccepted, ActionRevision: it.rev, PageRevision: pageRev}},
		item: it,
	}
}

func (d *Dispatcher) submitPointerLocked(p *producer, e action.Envelope, now time.Time, pageRev uint64, reply func(action.Ack), reject func(code, msg string) submitOut) submitOut {
	gen := p.gen
	if e.PointerSeq <= gen.pointerHW {
		d.st.droppedPointer++
		return submitOut{}
	}
	gen.pointerHW = e.PointerSeq
	a := e.Action
	if stalePage(a, pageRev) {
		d.st.droppedStalePage++
		return submitOut{}
	}
	size := a.Size() + len(e.ActionID)
	if a.Coalescable() {
		if n := len(p.queue); n > 0 && p.queue[n-1].env.Action.Kind == a.Kind {
			tail := p.queue[n-1]
			d.qbytes += size - tail.size
			d.rev++
			tail.env, tail.size, tail.rev, tail.reply = e, size, d.rev, reply
			d.st.coalesced++
			return submitOut{}
		}
	}
	if !d.roomLocked(p, size) {
		return reject(errcode.QueueFull, "action queue full")
	}
	if !a.Coalescable() && !p.take(now, d.cfg.Burst, d.cfg.RatePerSec) {
		return rateLimited(reject, p, d.cfg.RatePerSec)
	}
	d.rev++
	d.enqueueLocked(p, &item{p: p, gen: gen, env: e, rev: d.rev, size: size, reply: reply})
	return submitOut{}
}

// roomLocked reports whether one more action of size bytes fits the bounds.
// An action larger than the byte budget fits only an empty session queue.
func (d *Dispatcher) roomLocked(p *producer, size int) bool {
	if len(p.queue) >= d.cfg.ProducerQueue || d.queued >= d.cfg.SessionQueue {
		return false
	}
	return d.qbytes == 0 || d.qbytes+size <= d.cfg.SessionBytes
}

func (d *Dispatcher) enqueueLocked(p *producer, it *item) {
	p.queue = append(p.queue, it)
	d.queued++
	d.qbytes += it.size
	d.st.accepted++
	it.at = time.Now()
	d.kickLocked()
}

func (d *Dispatcher) kickLocked() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func stalePage(a action.Action, pageRev uint64) bool {
	return a.UsesCoordinates() && a.PageRevision != 0 && a.PageRevision < pageRev
}

// drop is a queued action refused because its producer generation ended.
type drop struct {
	it  *item
	ack action.Ack
}

// endGenerationLocked ends p's current generation: its queue is dropped
// with code and its held input scheduled for release.
func (d *Dispatcher) endGenerationLocked(p *producer, code, reason string, pageRev uint64) []drop {
	gen := p.gen
	gen.ended = true
	var drops []drop
	for _, it := range p.queue {
		d.queued--
		d.qbytes -= it.size
		ack := action.Ack{ActionID: it.env.ActionID, Status: action.StatusRejected, Code: code, Message: reason + "; the action did not run", ActionRevision: it.rev, PageRevision: pageRev}
		d.st.rejected[code]++
		d.cfg.Telemetry.ActionRejected(code)
		if it.control {
			if en := gen.ledger.get(it.env.ActionID); en != nil && en.rev == it.rev {
				f := ack
				en.final = &f
			}
		}
		if it.acceptPending {
			it.deferred = &ack // Submit sends it after the accepted ack
			continue
		}
		drops = append(drops, drop{it: it, ack: ack})
	}
	p.queue = nil
	d.releaseLocked(p.id, gen, reason)
	return drops
}

// endProducerLocked ends p for good.
func (d *Dispatcher) endProducerLocked(p *producer, code, reason string, pageRev uint64) []drop {
	drops := d.endGenerationLocked(p, code, reason, pageRev)
	p.ended = true
	for i, q := range d.ring {
		if q == p {
			d.ring = append(d.ring[:i], d.ring[i+1:]...)
			if i < d.rr {
				d.rr--
			}
			break
		}
	}
	if d.rr >= len(d.ring) {
		d.rr = 0
	}
	d.tombs = append(d.tombs, p.id)
	if len(d.tombs) > maxTombstones {
		delete(d.producers, d.tombs[0])
		d.tombs = d.tombs[1:]
	}
	return drops
}

// replyDrops sends the rejections of dropped actions.
func (d *Dispatcher) replyDrops(drops []drop) {
	for _, dr := range drops {
		dr.it.reply(dr.ack)
	}
}

// idle returns a channel closed the next time the worker has nothing to run
// (no releases, no queued actions, nothing running). For tests.
func (d *Dispatcher) idle() <-chan struct{} {
	ch := make(chan struct{})
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		close(ch)
		return ch
	}
	d.barriers = append(d.barriers, ch)
	d.kickLocked()
	return ch
}

func isRelease(a action.Action) bool { return a.Kind == action.KeyUp || a.Kind == action.PointerUp }

// rateLimited is the rate_limited refusal, with when the next credit is due.
func rateLimited(reject func(code, msg string) submitOut, p *producer, rate float64) submitOut {
	out := reject(errcode.RateLimited, "rate limited")
	for i := range out.acks {
		out.acks[i].RetryAfterMs = int(math.Ceil(p.due(rate).Seconds() * 1000))
	}
	return out
}
