package dispatch

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strings"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// release is one synthesized key_up or pointer_up.
type release struct {
	producerID string
	a          action.Action
}

// job is the worker's next piece of work: a queued action or a release.
type job struct {
	it      *item
	rel     release
	closing bool      // picked after Close: run on the close budget
	closeBy time.Time // real time
}

// run is the worker: the only goroutine that calls Execute (besides
// executions it abandoned past their deadline). It stops once Close was
// called and every release has run.
func (d *Dispatcher) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		d.mu.Lock()
		now := d.cfg.Now()
		d.watchdogLocked(now)
		j, ok := d.nextLocked()
		if !ok {
			for _, b := range d.barriers {
				close(b)
			}
			d.barriers = nil
			if d.closed {
				d.stopped = true
				d.mu.Unlock()
				return
			}
			wait := d.watchdogWaitLocked(now)
			d.mu.Unlock()
			var tick <-chan time.Time
			if wait > 0 {
				timer.Reset(wait)
				tick = timer.C
			}
			select {
			case <-d.wake:
			case <-tick:
			}
			timer.Stop()
			continue
		}
		d.running = true
		d.mu.Unlock()
		if j.it != nil {
			d.runItem(j.it)
		} else {
			d.runRelease(j)
		}
	}
}

// nextLocked picks the next job: releases first, then one action from the
// next producer in round-robin order.
func (d *Dispatcher) nextLocked() (job, bool) {
	if len(d.sys) > 0 {
		r := d.sys[0]
		d.sys[0] = release{}
		d.sys = d.sys[1:]
		return job{rel: r, closing: d.closed, closeBy: d.closeBy}, true
	}
	// A pointer gesture (a button held down) belongs to its producer: the
	// others' pointer actions wait until it lets go, so nobody's click or
	// drag is split by another's pointer (the page has one mouse). Their
	// keys and other actions go on. The held-input watchdog bounds the wait.
	var gesture *producer
	for _, p := range d.ring {
		if p.gen != nil && len(p.gen.held.buttons) > 0 {
			gesture = p
			break
		}
	}
	n := len(d.ring)
	for i := range n {
		idx := (d.rr + i) % n
		p := d.ring[idx]
		if len(p.queue) == 0 {
			continue
		}
		if gesture != nil && p != gesture && isPointer(p.queue[0].env.Action.Kind) {
			continue
		}
		it := p.queue[0]
		p.queue[0] = nil
		p.queue = p.queue[1:]
		if len(p.queue) == 0 {
			p.queue = nil
		}
		d.queued--
		d.qbytes -= it.size
		d.rr = (idx + 1) % n
		d.cfg.Telemetry.QueueWait(time.Since(it.at))
		return job{it: it}, true
	}
	return job{}, false
}

func isPointer(k action.Kind) bool {
	switch k {
	case action.PointerMove, action.PointerDown, action.PointerUp, action.Wheel, action.Click:
		return true
	}
	return false
}

func (d *Dispatcher) runItem(it *item) {
	a := it.env.Action
	// The page may have changed while the action waited.
	if pr := d.ex.PageRevision(); stalePage(a, pr) {
		d.finish(it, action.Result{}, errcode.Newf(errcode.StalePage, "page changed (revision %d); observe again", pr), true)
		return
	}
	d.mu.Lock()
	// A key_up of a key this generation does not hold (its key_down was
	// refused, or it was lifted already) has nothing to lift.
	unheld := a.Kind == action.KeyUp && !it.gen.held.hasKey(keyID(a))
	if isPointer(a.Kind) {
		a.Buttons = d.buttonsLocked(nil)
	}
	if a.Kind == action.KeyDown || a.Kind == action.PointerDown {
		d.pressing = it
	}
	d.mu.Unlock()
	if unheld {
		d.finish(it, action.Result{}, nil, false)
		return
	}
	res, err := d.exec(d.ctx, it.p.id, a)
	d.finish(it, res, err, false)
}

// finish records an action's outcome and sends its final ack.
func (d *Dispatcher) finish(it *item, res action.Result, err error, stale bool) {
	pageRev := res.PageRevision
	if pageRev == 0 {
		pageRev = d.ex.PageRevision()
	}
	ack := action.Ack{ActionID: it.env.ActionID, ActionRevision: it.rev, PageRevision: pageRev}
	var ae *errcode.Error
	mayHave, surely := false, false
	switch {
	case err == nil:
		ack.Status = action.StatusCompleted
		r := res
		ack.Result = &r
		mayHave, surely = true, true
	case errors.As(err, &ae):
		ack.Status, ack.Code, ack.Message = action.StatusRejected, ae.Code, ae.Message
		if ack.Code == "" {
			ack.Code = errcode.Failed
		}
	default:
		// The action may have had its effect: say so, never re-run it.
		ack.Status, ack.Code = action.StatusRejected, errcode.OutcomeUnknown
		ack.Message = "the action may have taken effect; it is not re-run"
		mayHave = true
		d.log.Warn("dispatch: action outcome unknown", "kind", it.env.Action.Kind, "err", err)
	}
	silent := stale && !it.control // stale pointer actions are dropped without an ack

	d.mu.Lock()
	d.running = false
	if !stale {
		d.st.executed++
	}
	switch {
	case ack.Status == action.StatusCompleted:
		d.st.completed++
	case silent:
		d.st.droppedStalePage++
	default:
		d.st.rejected[ack.Code]++
		d.cfg.Telemetry.ActionRejected(ack.Code)
	}
	if !silent {
		d.cfg.Telemetry.ActionAcked(it.env.Action.Kind, time.Since(it.at))
	}
	if stale && isRelease(it.env.Action) {
		// The page it was held on is gone (a page switch releases what was
		// held there): the hold ends with it, or the producer would be
		// thought to hold a button until the watchdog.
		mayHave, surely = true, true
	}
	if d.pressing == it {
		d.pressing = nil
	}
	if it.liftedOn != 0 && pageRev == it.liftedOn {
		// It ran on the page a tab switch left, and was lifted there.
		mayHave = false
	}
	it.gen.held.note(it.env.Action, mayHave, surely)
	if it.gen.ended {
		// The generation ended while this ran: lift what it pressed now.
		d.releaseLocked(it.p.id, it.gen, "producer ended")
	}
	if it.control {
		if en := it.gen.ledger.get(it.env.ActionID); en != nil && en.rev == it.rev {
			f := cloneAck(ack)
			en.final = &f
		}
	}
	send := !silent && (it.control || ack.Status != action.StatusCompleted)
	if send && it.acceptPending {
		it.deferred, send = &ack, false // Submit sends it after the accepted ack
	}
	d.mu.Unlock()
	if send {
		it.reply(ack)
	}
}

func (d *Dispatcher) runRelease(j job) {
	parent := d.ctx
	if j.closing {
		if !time.Now().Before(j.closeBy) {
			d.mu.Lock()
			d.running = false
			d.st.releaseSkipped++
			d.mu.Unlock()
			d.log.Warn("dispatch: close budget spent; held input release skipped", "producer", shortID(j.rel.producerID), "kind", j.rel.a.Kind)
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), j.closeBy)
		defer cancel()
		parent = ctx
	}
	_, err := d.exec(parent, j.rel.producerID, j.rel.a)
	d.mu.Lock()
	d.running = false
	d.st.released++
	if err != nil {
		d.st.releaseFailed++
	}
	d.mu.Unlock()
	if err != nil {
		d.log.Warn("dispatch: held input release failed", "producer", shortID(j.rel.producerID), "kind", j.rel.a.Kind, "err", err)
	}
}

type execResult struct {
	res action.Result
	err error
}

// exec runs one Execute under the deadline. If the executor overruns it,
// exec waits a short grace for it to return and then abandons it.
func (d *Dispatcher) exec(parent context.Context, producerID string, a action.Action) (action.Result, error) {
	ctx, cancel := context.WithTimeout(parent, d.cfg.Deadline)
	defer cancel()
	out := make(chan execResult, 1) // buffered: an abandoned Execute still exits
	go func() {
		var r execResult
		defer func() {
			if v := recover(); v != nil {
				d.log.Error("dispatch: executor panicked", "kind", a.Kind, "stack", string(debug.Stack()))
				r = execResult{err: fmt.Errorf("executor panicked: %T", v)}
			}
			out <- r
		}()
		r.res, r.err = d.ex.Execute(ctx, producerID, a)
	}()
	select {
	case r := <-out:
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
			d.cfg.Telemetry.ActionTimedOut(a.Kind)
		}
		return r.res, r.err
	case <-ctx.Done():
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && parent.Err() == nil {
		d.cfg.Telemetry.ActionTimedOut(a.Kind)
	}
	grace := time.NewTimer(d.grace)
	defer grace.Stop()
	select {
	case r := <-out:
		var ae *errcode.Error
		if r.err == nil || errors.As(r.err, &ae) {
			return r.res, r.err // the executor knows what happened
		}
		return action.Result{}, fmt.Errorf("execute %s: %w", a.Kind, r.err)
	case <-grace.C:
		d.mu.Lock()
		d.st.abandoned++
		d.mu.Unlock()
		d.log.Warn("dispatch: executor ignored its deadline; abandoned", "kind", a.Kind)
		return action.Result{}, fmt.Errorf("execute %s: executor ignored its deadline: %w", a.Kind, ctx.Err())
	}
}

// releaseLocked schedules the release of everything gen holds.
func (d *Dispatcher) releaseLocked(producerID string, gen *generation, reason string) {
	if gen.held.empty() {
		return
	}
	acts := gen.held.releases(d.buttonsLocked(gen))
	for _, a := range acts {
		d.sys = append(d.sys, release{producerID: producerID, a: a})
	}
	d.st.releaseEvents++
	d.cfg.Telemetry.InputCleanup(cleanupReason(reason))
	d.log.Info("dispatch: releasing held input", "producer", shortID(producerID), "reason", reason, "count", len(acts))
	d.kickLocked()
}

// watchdogLocked releases the held input of producers silent for longer
// than HeldWatchdog.
func (d *Dispatcher) watchdogLocked(now time.Time) {
	for _, p := range d.ring {
		g := p.gen
		if !g.held.empty() && now.Sub(g.lastSeen) >= d.cfg.HeldWatchdog {
			d.st.watchdogFired++
			d.releaseLocked(p.id, g, "watchdog: no input while holding keys or buttons")
		}
	}
}

// watchdogWaitLocked is how long the idle worker may sleep before the next
// watchdog check is due; 0 when nothing is held.
func (d *Dispatcher) watchdogWaitLocked(now time.Time) time.Duration {
	var earliest time.Time
	for _, p := range d.ring {
		g := p.gen
		if g.held.empty() {
			continue
		}
		if t := g.lastSeen.Add(d.cfg.HeldWatchdog); earliest.IsZero() || t.Before(earliest) {
			earliest = t
		}
	}
	if earliest.IsZero() {
		return 0
	}
	// Clamped: the clock may be a test clock that jumps or stands still.
	return min(max(earliest.Sub(now), 10*time.Millisecond), d.cfg.HeldWatchdog)
}

// shortID is a log-safe prefix of a producer id.
func shortID(id string) string {
	if len(id) > 6 {
		return id[:6]
	}
	return id
}

// cleanupReason is a release reason as a metric label.
func cleanupReason(reason string) string {
	switch {
	case reason == "producer renewed":
		return "renewed"
	case reason == "session closed":
		return "session_closed"
	case strings.HasPrefix(reason, "watchdog"):
		return "watchdog"
	}
	return "ended"
}
