// Package agent lets AI agents work a session by page semantics: they read
// accessibility snapshots with refs and act on elements. Every action that
// touches the page goes through the session's one dispatcher as an agent
// producer, in order with the people in the panel; reads (snapshots,
// queries, waits, screenshots) use the page's CDP session directly.
package agent

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/snapshot"
)

// Policy is what the operator allows agents beyond the page's own UI.
type Policy struct {
	// AllowEval lets callers with the admin scope run JavaScript in the
	// page (eval, wait function). Off by default (config agent.allowEval).
	AllowEval bool
}

// errorf is the package's *errcode.Error with its hint and an explicit
// recoverability: the agent knows per call whether retrying can help (a
// session that is not ready yet, or one that is shutting down).
func errorf(code string, recoverable bool, hint, format string, args ...any) *errcode.Error {
	return errcode.Newf(code, format, args...).WithHint(hint).WithRecoverable(recoverable)
}

// Service holds one driver per (session, user): its producer, sequence
// numbers, ref table and idempotency ledger.
type Service struct {
	log  *slog.Logger
	snap *snapshot.Snapshotter

	mu      sync.Mutex
	drivers map[string]*driver
	closed  bool
	policy  Policy
}

// SetPolicy sets what agents may do beyond the page's own UI; it applies
// to the next command.
func (sv *Service) SetPolicy(p Policy) {
	sv.mu.Lock()
	sv.policy = p
	sv.mu.Unlock()
}

func (sv *Service) currentPolicy() Policy {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.policy
}

// NewService returns an empty service.
func NewService(log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	return &Service{log: log, snap: snapshot.NewSnapshotter(), drivers: map[string]*driver{}}
}

// driverFor returns the user's driver for s, opening its producer on first
// use. A driver of a session that ended is replaced.
func (sv *Service) driverFor(s *session.Session, user string) (*driver, error) {
	key := s.ID() + "\x00" + user
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.closed {
		return nil, errorf(errcode.NotReady, false, "", "the appliance is shutting down")
	}
	if d := sv.drivers[key]; d != nil && !d.ended() {
		return d, nil
	}
	if len(sv.drivers) >= maxDrivers {
		sv.pruneLocked()
	}
	p, err := s.OpenProducer(dispatch.KindAgent, "agent:"+user, nil)
	if err != nil {
		return nil, errorf(errcode.NotReady, true, "read the session snapshot; wait until it is ready", "the session is not ready")
	}
	d := &driver{sv: sv, s: s, p: p, user: user, ledger: map[string]*Result{}}
	sv.drivers[key] = d
	// The producer ends with the session; drop the driver then.
	go func() {
		<-s.Done()
		p.Close()
		d.closeAttacher()
		d.stopNetwork()
		sv.mu.Lock()
		if sv.drivers[key] == d {
			delete(sv.drivers, key)
		}
		sv.mu.Unlock()
		if pg := s.Page(); pg != nil {
			sv.snap.Forget(pg)
		}
	}()
	return d, nil
}

// maxDrivers bounds the table; ended sessions' drivers go first.
const maxDrivers = 1024

func (sv *Service) pruneLocked() {
	for k, d := range sv.drivers {
		if d.ended() {
			delete(sv.drivers, k)
		}
	}
}

// Close ends every agent producer.
func (sv *Service) Close() {
	sv.mu.Lock()
	sv.closed = true
	ds := sv.drivers
	sv.drivers = map[string]*driver{}
	sv.mu.Unlock()
	for _, d := range ds {
		d.p.Close()
		d.closeAttacher()
		d.stopNetwork()
	}
}

// Do runs one request for user on s.
func (sv *Service) Do(ctx context.Context, s *session.Session, user string, r Request) (*Result, error) {
	d, err := sv.driverFor(s, user)
	if err != nil {
		return nil, err
	}
	return d.do(ctx, r)
}

// driver is one agent's handle on one session. Its commands run one at a
// time, so its sequence numbers stay in order.
type driver struct {
	sv   *Service
	s    *session.Session
	p    *session.Producer
	user string

	mu         sync.Mutex
	attacher   *snapshot.Attacher // OOPIF sessions on the browser's shared connection; lazily
	controlSeq uint64
	pointerSeq uint64
	nextID     uint64
	ledger     map[string]*Result // actionId → result, bounded
	ledgerKeys []string

	net *netTracker // requests in flight, for wait load=networkidle; lazily
}

const ledgerSize = 256

// page is the session's tab with its out-of-process iframes reachable.
// Without an attacher (it failed to connect) OOPIFs show as unreachable.
func (d *driver) page(ctx context.Context) snapshot.Page {
	pg := d.s.Page()
	if d.attacher != nil && d.attacher.Broken() {
		// The browser's connection closed under it: attach anew over the
		// next one.
		_ = d.attacher.Close()
		d.attacher = nil
	}
	if d.attacher == nil {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := d.s.BrowserConn(actx)
		cancel()
		switch {
		case errors.Is(err, session.ErrNoBrowser):
		case err != nil:
			d.sv.log.Warn("agent: frames attacher", "err", err)
			return pg
		default:
			d.attacher = snapshot.NewAttacher(conn)
		}
	}
	if d.attacher == nil {
		return pg
	}
	return snapshot.WithFrames(pg, d.attacher)
}

func (d *driver) closeAttacher() {
	d.mu.Lock()
	a := d.attacher
	d.attacher = nil
	d.mu.Unlock()
	if a != nil {
		_ = a.Close()
	}
}

func (d *driver) ended() bool {
	select {
	case <-d.s.Done():
		return true
	default:
		return false
	}
}

func (d *driver) do(ctx context.Context, r Request) (*Result, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if r.ActionID != "" {
		if len(r.ActionID) > 128 {
			return nil, errorf(errcode.InvalidArgument, false, "", "actionId is limited to 128 bytes")
		}
		if res, ok := d.ledger[r.ActionID]; ok {
			dup := *res
			dup.Duplicate = true
			return &dup, nil
		}
	}
	timeout, limit := defaultTimeout, maxTimeout
	if r.Command == "request_human" {
		timeout, limit = defaultHumanWait, maxHumanWait
	}
	if r.TimeoutMs > 0 {
		timeout = min(time.Duration(r.TimeoutMs)*time.Millisecond, limit)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := d.run(ctx, r)
	if err != nil {
		return res, err
	}
	res.Command = r.Command
	res.PageRevision = d.p.PageRevision()
	if r.ActionID != "" {
		res.ActionID = r.ActionID
		d.remember(r.ActionID, res)
	}
	return res, nil
}

func (d *driver) remember(id string, r *Result) {
	if len(d.ledgerKeys) >= ledgerSize {
		delete(d.ledger, d.ledgerKeys[0])
		d.ledgerKeys = d.ledgerKeys[1:]
	}
	d.ledger[id] = r
	d.ledgerKeys = append(d.ledgerKeys, id)
}

// Timeouts of one request.
const (
	defaultTimeout = 15 * time.Second
	maxTimeout     = 2 * time.Minute
	// A person may need a while (a login, a captcha).
	defaultHumanWait = 5 * time.Minute
	maxHumanWait     = 30 * time.Minute
)

// submit sends one action through the dispatcher and waits for its end.
// It returns the action's revision in the session's order. An agent is
// charged like a person; over its budget it waits for tokens (the refusal
// came before acceptance, so the same seq is sent again) rather than fail
// halfway through a command.
func (d *driver) submit(ctx context.Context, a action.Action) (uint64, *action.Result, error) {
	w, err := d.accept(ctx, a)
	if err != nil {
		return w.rev, nil, err
	}
	return w.wait(ctx)
}

// budgetWait is about one token of the dispatcher's default refill (8/s).
const budgetWait = 125 * time.Millisecond

// accept submits a until the dispatcher accepts it, waiting out a full
// queue or an empty rate budget; the returned accepted waits for its end.
func (d *driver) accept(ctx context.Context, a action.Action) (*accepted, error) {
	for {
		w, retry, err := d.submitOnce(a)
		var ae *errcode.Error
		if err == nil || !errors.As(err, &ae) || (ae.Code != errcode.RateLimited && ae.Code != errcode.QueueFull) {
			return w, err
		}
		wait := budgetWait // a full queue: about one action's time
		if ae.Code == errcode.RateLimited && retry > 0 {
			wait = min(retry, time.Second) // the next credit is due then
		}
		select {
		case <-ctx.Done():
			return w, err
		case <-time.After(wait):
		}
	}
}

// accepted is a submitted action: its revision, and its final ack to come.
type accepted struct {
	rev  uint64
	acks chan action.Ack // nil: nothing to wait for (pointer channel)
}

// wait waits for the action's completion.
func (w *accepted) wait(ctx context.Context) (uint64, *action.Result, error) {
	if w.acks == nil {
		return w.rev, nil, nil
	}
	select {
	case k := <-w.acks:
		if k.Status == action.StatusCompleted {
			return max(w.rev, k.ActionRevision), k.Result, nil
		}
		return w.rev, nil, errcode.New(k.Code, k.Message)
	case <-ctx.Done():
		return w.rev, nil, errcode.New(errcode.OutcomeUnknown, "the action did not finish in time; its outcome is unknown")
	}
}

// submitOnce submits a once. The dispatcher answers accepted or refused
// before Submit returns; a rate_limited refusal comes with when the next
// credit is due.
func (d *driver) submitOnce(a action.Action) (*accepted, time.Duration, error) {
	a.PageRevision = d.p.PageRevision()
	d.nextID++
	id := "agent-" + strconv.FormatUint(d.nextID, 10)
	env := action.Envelope{ActionID: id, Action: a}
	if a.OnPointerChannel() {
		d.pointerSeq++
		env.PointerSeq = d.pointerSeq
		// Pointer actions are acked only when refused: nothing to wait for.
		d.p.Submit(env, func(action.Ack) {})
		return &accepted{}, 0, nil
	}
	env.ControlSeq = d.controlSeq + 1
	// Two acks at most: accepted (or refused), then completed or refused.
	acks := make(chan action.Ack, 2)
	var first *action.Ack
	d.p.Submit(env, func(k action.Ack) {
		if first == nil {
			// The first ack comes from inside Submit, on this goroutine.
			first = &k
			return
		}
		select {
		case acks <- k:
		default:
		}
	})
	switch {
	case first == nil:
		return &accepted{}, 0, errcode.New(errcode.OutcomeUnknown, "the dispatcher did not answer")
	case first.Status == action.StatusAccepted:
		d.controlSeq = env.ControlSeq // acceptance consumes the seq
		return &accepted{rev: first.ActionRevision, acks: acks}, 0, nil
	}
	// Refused (at submit the seq is not consumed: the next action reuses it).
	return &accepted{}, time.Duration(first.RetryAfterMs) * time.Millisecond, errcode.New(first.Code, first.Message)
}
