package session

// Renderer crashes and hangs: the tab is reloaded (recover.go says why in
// place).

import (
	"context"
	"errors"
	"time"

	"github.com/chromedp/cdproto/inspector"
)

// Who reports a renderer crash: each crash comes once from each listener
// (the browser's session and the page's own), in no set order between
// them and with no id; the watchdog finds what neither reported.
type crashSource int

const (
	fromTarget    crashSource = iota // Target.targetCrashed (tab watcher)
	fromInspector                    // Inspector.targetCrashed (watchdog's listener)
	crashSources
	fromWatchdog crashSource = -1 // a hang, or a crash nobody reported
)

// tabCrashed handles a crash of the renderer of one of the session's tabs
// (Target.targetCrashed).
func (s *Session) tabCrashed(ctx context.Context, id string) {
	s.mu.Lock()
	t := s.tabs[id]
	s.mu.Unlock()
	if t != nil {
		s.pageCrashed(ctx, t, ReasonRendererCrashed, fromTarget)
	}
}

// pageCrashed reloads tab t, whose renderer crashed (or hung: the watchdog
// crashed it), as src reported. The crash is logged, and for the current
// tab shown (StateRecovering until the reload committed, then
// Status.LastRecovery). A tab is reloaded once: crashing again within
// autoReloadWindow of its automatic reload, it is left for a person or
// agent (Status.PageError).
func (s *Session) pageCrashed(ctx context.Context, t *tab, reason string, src crashSource) {
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	if t.gone.Load() {
		return
	}
	if src != fromWatchdog {
		// The n-th crash a listener reports is the n-th crash: one the
		// other listener reported first is handled already.
		t.crashSeen[src]++
		if t.crashSeen[src] <= t.crashHandled {
			return
		}
	}
	t.crashHandled++
	now := time.Now()
	if !t.hungAt.IsZero() && now.Sub(t.hungAt) < hungCrashWindow {
		reason = ReasonRendererHung
	}
	cur := s.isCurrent(t)
	if !t.reloadAt.IsZero() && now.Sub(t.reloadAt) < autoReloadWindow {
		s.log.Warn("the page's renderer crashed again soon after its automatic reload; left as it is", "reason", reason, "tab", shortTab(t.id), "current", cur)
		if cur {
			s.mu.Lock()
			s.rec.pageErr, s.rec.errRev = reason, t.exec.PageRevision()
			s.mu.Unlock()
		}
		return
	}
	s.log.Warn("the page's renderer crashed; reloading the tab", "reason", reason, "tab", shortTab(t.id), "current", cur)
	if cur && !s.beginRecovery(reason) {
		return // closing, or its browser is being relaunched
	}
	t.reloadAt = time.Now()
	rctx, cancel := context.WithTimeout(ctx, reloadTimeout)
	rev := t.exec.PageRevision()
	err := t.page.Reload(rctx)
	if err != nil {
		s.log.Warn("reload the crashed tab", "err", err)
	}
	if err == nil && cur {
		// The capture starts over now, while the new renderer comes up:
		// its first paint is the first frame, with no restart after it.
		s.mu.Lock()
		stopped := s.restartCapturesLocked()
		s.mu.Unlock()
		for _, done := range stopped {
			<-done
		}
	}
	// Page.reload answers before the new document commits: the tab is
	// back once it did, which moves the revision.
	for err == nil && t.exec.PageRevision() == rev && rctx.Err() == nil {
		select {
		case <-rctx.Done():
		case <-time.After(10 * time.Millisecond):
		}
	}
	cancel()
	if !cur {
		return
	}
	var stopped []chan struct{}
	s.mu.Lock()
	if s.state == StateRecovering && s.rec.reason == reason {
		s.rec.pageErr = ""
		if err == nil {
			s.markReadyLocked()
		} else {
			stopped = s.readyAgainLocked() // nothing restarted yet
		}
		s.log.Info("page back after a renderer crash", "reason", reason, "took", time.Since(s.rec.since).Round(time.Millisecond))
	}
	s.mu.Unlock()
	for _, done := range stopped {
		<-done
	}
}

// startWatchdog starts the session's watchdog (s.wg), unless it ended.
func (s *Session) startWatchdog() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == StateClosing || s.state == StateClosed || s.state == StateFailed {
		return
	}
	s.wg.Add(1)
	go s.watchdog()
}

// watchdog finds what no event reports: a current tab whose renderer hangs
// (no frame, and no answer for hangAfter) is crashed and reloaded; one
// whose renderer crashed is reloaded (Inspector.targetCrashed on its own
// session, besides the browser's Target.targetCrashed); a session still
// ready on a dead browser is recovered. It runs for the session's life.
func (s *Session) watchdog() {
	defer s.wg.Done()
	tick := time.NewTicker(watchdogEvery)
	defer tick.Stop()
	crashed := make(chan *tab, 4) // Inspector.targetCrashed of the current tab
	var listened *tab
	stopListen := func() {}
	defer func() { stopListen() }()
	frames, quiet := s.framesIn.Load(), time.Now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case t := <-crashed:
			s.pageCrashed(s.ctx, t, ReasonRendererCrashed, fromInspector)
			continue
		case <-tick.C:
		}
		now := time.Now()
		s.mu.Lock()
		st, cur, b, pageErr := s.state, s.cur, s.browser, s.rec.pageErr
		s.mu.Unlock()
		if st != StateReady || cur == nil {
			quiet = now
			continue
		}
		if exited(b) {
			s.m.recoverLate(s, b)
			quiet = now
			continue
		}
		if cur != listened {
			stopListen()
			stopListen, listened = s.listenCrash(cur, crashed), cur
		}
		if n := s.framesIn.Load(); n != frames || pageErr != "" {
			frames, quiet = n, now
			continue
		}
		if now.Sub(quiet) < quietBeforeProbe {
			continue
		}
		if _, open := cur.exec.OpenDialog(); open {
			quiet = now // a dialog holds the page's script, rightly
			continue
		}
		if !s.hung(cur, frames) {
			quiet = time.Now()
			continue
		}
		s.log.Warn("the page sent no frame and answered nothing for 5 s; crashing its renderer to reload it", "tab", shortTab(cur.id))
		s.rec.mu.Lock()
		cur.hungAt = time.Now()
		s.rec.mu.Unlock()
		if err := cur.page.CrashRenderer(s.ctx); err != nil {
			s.log.Debug("crash the hung renderer", "err", err) // e.g. crashed already
		}
		// The reload must follow the renderer's end, or the crash would
		// look like a second one: wait for its event (either listener
		// reloads; hungAt makes it a hang), reload anyway without one.
		select {
		case <-s.ctx.Done():
			return
		case t := <-crashed:
			s.pageCrashed(s.ctx, t, ReasonRendererCrashed, fromInspector)
		case <-time.After(crashEventWait):
			s.pageCrashed(s.ctx, cur, ReasonRendererHung, fromWatchdog)
		}
		frames, quiet = s.framesIn.Load(), time.Now()
	}
}

// hung asks t's page whether it runs: true when it left the question
// unanswered for hangAfter while still the session's ready, current,
// silent tab, with no dialog, on a live browser.
func (s *Session) hung(t *tab, frames uint64) bool {
	ctx, cancel := context.WithTimeout(s.ctx, hangAfter)
	err := t.page.Ping(ctx)
	cancel()
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || s.ctx.Err() != nil {
		return false // answered, or its browser is gone (not a hang)
	}
	s.mu.Lock()
	st, cur, b := s.state, s.cur, s.browser
	s.mu.Unlock()
	_, dialog := t.exec.OpenDialog()
	return st == StateReady && cur == t && !exited(b) && !dialog && s.framesIn.Load() == frames
}

// listenCrash reports Inspector.targetCrashed of t's page to ch until the
// returned stop.
func (s *Session) listenCrash(t *tab, ch chan<- *tab) (stop func()) {
	stop, err := t.page.Listen(func(ev any) {
		if _, ok := ev.(*inspector.EventTargetCrashed); ok {
			select {
			case ch <- t:
			default:
			}
		}
	})
	if err != nil {
		s.log.Debug("listen for the page's crash", "err", err)
	}
	return stop
}

// brokeWithThePage tells a capture that ended because its browser or its
// page's renderer died (the recovery restarts it on the page that comes
// back) from a failure of the capture itself. The plugin may notice the
// death before we do, so it waits up to captureGrace.
func (s *Session) brokeWithThePage(ctx context.Context) bool {
	deadline := time.NewTimer(captureGrace)
	defer deadline.Stop()
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		st, b := s.state, s.browser
		s.mu.Unlock()
		if st == StateRecovering || exited(b) {
			return true
		}
		select {
		case <-ctx.Done():
			return true
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}
