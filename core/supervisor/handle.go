package supervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// State is where a handle is in its lifecycle. Its values are also what
// status pages and the CLI print, so they do not change.
type State string

// States of a handle.
const (
	StateStarting   State = "starting"
	StateRunning    State = "running"
	StateRestarting State = "restarting"
	StateDegraded   State = "degraded"
	StateStopped    State = "stopped"
)

// maxErrLen bounds LastError: plugin-provided text is shown in status pages.
const maxErrLen = 512

// Status is a snapshot of a supervised plugin.
type Status struct {
	Name, Kind string
	State      State
	// Generation counts successful (re)starts; 0 until the first.
	Generation uint64
	// Restarts counts start attempts after the first one.
	Restarts int
	// PID of the running process (0 when none). It is also the process
	// group id: every plugin runs in its own group.
	PID        int
	APIVersion int // negotiated with go-plugin
	Info       base.Info
	LastError  string // safe message, bounded
	Since      time.Time
}

// Handle is one supervised plugin.
type Handle struct {
	s    *Supervisor
	spec Spec
	log  *slog.Logger

	// first carries the outcome of the first start attempt to Start.
	first chan error
	// failCh carries one failure report to the run loop (ReportFailure
	// dedups per generation so a cap of 1 is enough).
	failCh chan uint64

	mu          sync.Mutex
	state       State
	gen         uint64
	client      any
	restarts    int
	pid         int
	apiVersion  int
	info        base.Info
	lastErr     string
	since       time.Time
	reportedGen uint64
	changed     chan struct{} // closed and replaced on every change
}

func newHandle(s *Supervisor, spec Spec) *Handle {
	return &Handle{
		s: s, spec: spec,
		log:     s.log.With("plugin", spec.Name),
		first:   make(chan error, 1),
		failCh:  make(chan uint64, 1),
		state:   StateStarting,
		since:   time.Now(),
		changed: make(chan struct{}),
	}
}

// Reconfigure hands the running plugin a new config subtree (SetConfig on
// the live process) and keeps it for every later restart. A config the
// plugin refuses changes nothing: the error names the key (see
// base.AsConfigError). The plugin decides what a new config means for its
// running streams.
func (h *Handle) Reconfigure(ctx context.Context, conf json.RawMessage) error {
	conf = bytes.TrimSpace(conf)
	if len(conf) == 0 || conf[0] != '{' || !json.Valid(conf) {
		return fmt.Errorf("plugin %s: config is not a JSON object", h.spec.Name)
	}
	bp, _, err := Dispense[base.Plugin](h).Get(ctx)
	if err != nil {
		return err
	}
	if err := bp.SetConfig(ctx, conf); err != nil {
		return fmt.Errorf("plugin %s: %w", h.spec.Name, err)
	}
	h.mu.Lock()
	h.spec.Config = append(json.RawMessage(nil), conf...)
	h.mu.Unlock()
	return nil
}

// Name is the plugin's name.
func (h *Handle) Name() string { return h.spec.Name }

// dispensed returns the dispensed client (e.g. *capture.Client,
// *encoder.Client) and its generation. It waits (ctx-bounded) while the
// plugin is (re)starting; it returns an error wrapping ErrDegraded when the
// plugin is degraded and ErrStopped after Shutdown. Callers outside the
// package go through Dispense, which types the client.
func (h *Handle) dispensed(ctx context.Context) (client any, generation uint64, err error) {
	for {
		h.mu.Lock()
		switch h.state {
		case StateRunning:
			c, g := h.client, h.gen
			h.mu.Unlock()
			return c, g, nil
		case StateDegraded:
			err := fmt.Errorf("plugin %s: %w: %s", h.spec.Name, ErrDegraded, h.lastErr)
			h.mu.Unlock()
			return nil, 0, err
		case StateStopped:
			h.mu.Unlock()
			return nil, 0, fmt.Errorf("plugin %s: %w", h.spec.Name, ErrStopped)
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("plugin %s: waiting for client: %w", h.spec.Name, ctx.Err())
		case <-ch:
		}
	}
}

// ReportFailure tells the supervisor that a call on generation gen failed
// in a way that suggests the plugin is broken (e.g. gRPC Unavailable). Only
// the first report for the running generation counts: many callers
// reporting the same generation cause one restart, and reports about an
// older generation are ignored.
func (h *Handle) ReportFailure(gen uint64, err error) {
	h.mu.Lock()
	if h.state != StateRunning || gen != h.gen || h.reportedGen == gen {
		h.mu.Unlock()
		return
	}
	h.reportedGen = gen
	h.mu.Unlock()
	msg := "unknown error"
	if err != nil {
		msg = bound(err.Error())
	}
	h.log.Warn("plugin failure reported; restarting", "generation", gen, "error", msg)
	select {
	case h.failCh <- gen:
	default: // an older report is still queued; the run loop drops it by gen
	}
}

// Status returns a snapshot.
func (h *Handle) Status() Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	info := h.info
	info.Capabilities = maps.Clone(h.info.Capabilities)
	return Status{
		Name: h.spec.Name, Kind: h.spec.Kind, State: h.state,
		Generation: h.gen, Restarts: h.restarts, PID: h.pid,
		APIVersion: h.apiVersion, Info: info, LastError: h.lastErr, Since: h.since,
	}
}

// Changes returns a channel that is closed at the next change of the
// handle's status (new generation, restarting, degraded, stopped). Call it
// again after it fires. Nothing needs to be released: an abandoned channel
// is simply garbage.
func (h *Handle) Changes() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.changed
}

// update changes the status under the lock and wakes waiters.
func (h *Handle) update(f func()) {
	h.mu.Lock()
	f()
	h.since = time.Now()
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

func bound(s string) string {
	if len(s) > maxErrLen {
		return s[:maxErrLen] + "…"
	}
	return s
}

// permanentError is a start failure that retrying cannot fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// run is the handle's supervision loop; it owns every process of the
// handle, one at a time, and returns once stopped.
func (h *Handle) run() {
	defer h.s.wg.Done()
	o := h.s.opts
	var (
		attempt    int         // consecutive failures, drives the backoff
		crashes    []time.Time // failures within CrashWindow
		firstSent  bool
		stopped    bool
		launchedAt int // start attempts so far
	)
	sendFirst := func(err error) {
		if !firstSent {
			firstSent = true
			h.first <- err
		}
	}
	// fail records a crash or a failed start and says whether to go on.
	fail := func(msg string, permanent bool) bool {
		now := time.Now()
		keep := crashes[:0]
		for _, t := range crashes {
			if now.Sub(t) < o.CrashWindow {
				keep = append(keep, t)
			}
		}
		crashes = append(keep, now)
		if permanent || len(crashes) > o.CrashBudget {
			why := "permanent failure"
			if !permanent {
				why = fmt.Sprintf("%d failures within %v", len(crashes), o.CrashWindow)
			}
			h.log.Error("plugin degraded; not restarting", "reason", why, "error", msg)
			h.update(func() {
				h.state, h.lastErr, h.client, h.pid = StateDegraded, msg, nil, 0
			})
			return false
		}
		h.update(func() {
			h.state, h.lastErr, h.client, h.pid = StateRestarting, msg, nil, 0
		})
		return true
	}

	for !stopped {
		if launchedAt > 0 {
			delay := backoff(o.BackoffMin, o.BackoffMax, attempt)
			h.log.Info("plugin restart scheduled", "in", delay.String(), "attempt", attempt)
			t := time.NewTimer(delay)
			select {
			case <-t.C:
			case <-h.s.stopCtx.Done():
				t.Stop()
				stopped = true
				continue
			}
			h.update(func() { h.restarts++ })
		}
		launchedAt++

		inst, err := h.launch()
		if err != nil {
			if h.s.stopCtx.Err() != nil {
				sendFirst(fmt.Errorf("plugin %s: %w", h.spec.Name, ErrStopped))
				stopped = true
				continue
			}
			var perm *permanentError
			permanent := errors.As(err, &perm)
			msg := bound(err.Error())
			h.log.Warn("plugin start failed", "error", msg, "permanent", permanent)
			attempt++
			goOn := fail(msg, permanent) // status first, so Start's caller sees it
			sendFirst(fmt.Errorf("plugin %s: start: %w", h.spec.Name, err))
			if !goOn {
				break
			}
			continue
		}

		runningSince := time.Now()
		var gen uint64
		h.update(func() {
			h.gen++
			gen = h.gen
			inst.gen = gen
			h.state, h.client, h.pid = StateRunning, inst.client, inst.run.PID()
			h.apiVersion, h.info = inst.apiVersion, inst.info
		})
		h.log.Info("plugin running", "generation", gen, "pid", inst.run.PID(),
			"api_version", inst.apiVersion, "version", inst.info.Version)
		sendFirst(nil)

		reason := h.watch(inst)
		graceful := reason == ""
		if !graceful {
			// Callers wait from now on rather than get the dying client.
			h.update(func() { h.state, h.client, h.pid = StateRestarting, nil, 0 })
		}
		h.teardown(inst, graceful)
		if graceful {
			stopped = true
			continue
		}
		if st := inst.run.ExitState(); reason == reasonExited && st != "" {
			reason += " (" + st + ")"
		}
		if time.Since(runningSince) >= o.HealthyReset {
			attempt = 0
		}
		attempt++
		h.log.Warn("plugin lost", "generation", gen, "reason", bound(reason))
		if !fail(bound(reason), false) {
			break
		}
	}
	sendFirst(fmt.Errorf("plugin %s: %w", h.spec.Name, ErrStopped))
	// Degraded: stay idle until Shutdown so the state reads "degraded"
	// until then.
	<-h.s.stopCtx.Done()
	h.update(func() { h.state, h.client, h.pid = StateStopped, nil, 0 })
}

const reasonExited = "process exited"

// watch blocks until the instance must go; the reason is "" when the
// supervisor is shutting down.
func (h *Handle) watch(inst *instance) string {
	for {
		select {
		case <-h.s.stopCtx.Done():
			return ""
		case <-inst.run.exited:
			return reasonExited
		case <-inst.hung:
			return "hung: " + inst.hungErr.Error()
		case g := <-h.failCh:
			if g == inst.gen {
				return "failure reported by a caller"
			}
		}
	}
}

// backoff is min·2^(attempt-1), capped at max.
func backoff(min, max time.Duration, attempt int) time.Duration {
	d := min
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	if d > max {
		d = max
	}
	return d
}
