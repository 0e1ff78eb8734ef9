package session

// Crash containment. A renderer that crashes or hangs costs its session a
// reload of the tab; a browser that crashes costs each of its sessions a
// new page in a relaunched browser, at the URL it showed. Either way the
// session stays the same *Session: same id, owner, invitations, pipelines
// and tracks, dispatcher and producer grants, so viewers keep their WebRTC
// peers and DataChannels and see the picture come back without the panel
// reconnecting, and an agent's next call just works. Meanwhile the session
// is in StateRecovering, which its snapshot (pushed to every viewer) shows.
// A session that cannot be brought back within recoverBudget ends failed at
// once; the appliance's default session is then created again, with the same
// id, as soon as a browser runs (KeepDefault).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabcast/tabcast/core/browser"
)

// StateRecovering: the session's page or browser crashed (or hung) and the
// session is bringing it back. It is ready again within seconds, or ends
// failed. Status.Recovering says why.
const StateRecovering State = "recovering"

// Why a session recovers (Status.Recovering, Recovery.Reason) or why its
// page shows nothing (Status.PageError); ReasonBrowserCrashed names a
// browser crash.
const (
	ReasonRendererCrashed = "renderer_crashed"
	ReasonRendererHung    = "renderer_hung"
)

// Browser isolation (Config.Isolation).
const (
	// IsolationShared: every session is a BrowserContext of one Chromium
	// (the default).
	IsolationShared = "shared"
	// IsolationPerSession: every session has a Chromium of its own, as a
	// persistent profile does: a browser crash reaches one session, at
	// about three times the memory of a shared session and a slower start
	// (docs/architecture.md, "Crashes").
	IsolationPerSession = "per-session"
)

// Bounds of crash containment.
const (
	// recoverBudget: a browser crash's sessions are back (relaunch and new
	// pages) within it, or end failed.
	recoverBudget = 5 * time.Second
	// relaunchBudget is the relaunch's share of it.
	relaunchBudget = 4 * time.Second
	// hangAfter: a page that sent no frame and did not answer for this
	// long is hung.
	hangAfter = 5 * time.Second
	// quietBeforeProbe: the watchdog asks a page that sent no frame for
	// this long whether it still runs.
	quietBeforeProbe = 2 * time.Second
	watchdogEvery    = time.Second
	// reloadTimeout bounds a crashed tab's reload, up to its new
	// document's commit.
	reloadTimeout = 5 * time.Second
	// autoReloadWindow: a tab that crashes again this soon after its
	// automatic reload is left as it is (PageError): a page that crashes
	// its renderer every time must not reload forever.
	autoReloadWindow = 30 * time.Second
	// hungCrashWindow: a crash this soon after the watchdog crashed a hung
	// renderer is that hang; crashEventWait: how long the watchdog waits
	// for that crash's event before it reloads the tab anyway.
	hungCrashWindow = 5 * time.Second
	crashEventWait  = 3 * time.Second
	// captureGrace: how long a capture that ended waits to learn whether
	// its page or browser died (the plugin may notice before we do).
	captureGrace = 250 * time.Millisecond
	// restoreTimeout bounds loading a recovered session's last URL.
	restoreTimeout = 30 * time.Second
	// keepRetryMin/Max: the tender's backoff between failed relaunches or
	// re-creations of the default session.
	keepRetryMin = time.Second
	keepRetryMax = 15 * time.Second
)

// Recovery is a session's last recovery from a crash, as the snapshot
// shows it: a renderer comes back in well under the snapshot push period,
// so the state recovering alone may never reach a viewer.
type Recovery struct {
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
	TookMs int64     `json:"tookMs"`
}

// sessionRecovery is a session's crash-containment state.
type sessionRecovery struct {
	// mu serializes the recoveries of the session's tabs: one crash may be
	// reported twice (Target.targetCrashed, Inspector.targetCrashed) and
	// found by the watchdog too. Taken before s.mu.
	mu sync.Mutex

	// Guarded by s.mu:
	reason  string    // why the session is StateRecovering
	since   time.Time // when it became so
	pageErr string    // the current tab crashed again and was left as it is
	errRev  uint64    // pageErr holds while the page revision is this
	last    *Recovery
	watch   *tabWatch // the tab watcher of the session's browser (pages.go)
	// relaunch starts the session's own browser again (a persistent
	// profile's, or its own with per-session isolation); nil for a
	// session of the shared browser.
	relaunch func(context.Context) (Browser, error)
}

// managerRecovery is the manager's crash-containment state.
type managerRecovery struct {
	up   atomic.Pointer[browserRef] // the shared browser now, for BrowserUp
	kick chan struct{}              // wakes tend
	busy atomic.Int32               // recoveries running: tend leaves the relaunch to them
	keep *keptSession               // m.mu; the default session, if kept
}

type browserRef struct{ b Browser }

func (r *managerRecovery) init(b Browser) {
	r.kick = make(chan struct{}, 1)
	r.up.Store(&browserRef{b})
}

func (m *Manager) kickTend() {
	select {
	case m.rec.kick <- struct{}{}:
	default:
	}
}

// chromium is the browser holding the session's pages now (it changes
// when a crashed one is relaunched).
func (s *Session) chromium() Browser {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.browser
}

// gone is closed when b's main process exited, which *browser.Browser
// knows before Done (Done also waits for its other processes to be
// reaped, and a crashed browser's take a while to exit on a busy box):
// recovery starts from here, as nothing of the old browser is needed.
func gone(b Browser) <-chan struct{} {
	if x, ok := b.(interface{ Exited() <-chan struct{} }); ok {
		return x.Exited()
	}
	return b.Done()
}

// exited reports whether b's main process is gone.
func exited(b Browser) bool {
	if b == nil {
		return false
	}
	select {
	case <-gone(b):
		return true
	default:
		return false
	}
}

// BrowserUp reports whether the shared browser runs: false from its crash
// until it runs again (for /readyz). It never waits for a relaunch.
func (m *Manager) BrowserUp() bool {
	r := m.rec.up.Load()
	return r != nil && !exited(r.b)
}

// ensureBrowserLocked returns the running shared browser, relaunching a
// dead one when Config.Launch allows it; bmu held.
func (m *Manager) ensureBrowserLocked(ctx context.Context) (Browser, error) {
	if !exited(m.browser) {
		return m.browser, nil
	}
	if m.cfg.Launch == nil || m.ctx.Err() != nil {
		return nil, ErrUnavailable
	}
	m.log.Info("relaunching browser")
	start := time.Now()
	nb, err := m.cfg.Launch(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: relaunch: %v", ErrUnavailable, err)
	}
	if i := slices.Index(m.owned, m.browser); i >= 0 {
		// Dead already; Close reaps what is left and removes its profile.
		if err := m.browser.Close(); err != nil {
			m.log.Debug("close dead browser", "err", err)
		}
		m.owned = slices.Delete(m.owned, i, i+1)
	}
	m.browser = nb
	m.owned = append(m.owned, nb) // Shutdown closes it (it takes bmu after us)
	m.rec.up.Store(&browserRef{nb})
	m.watch(nb)
	m.log.Info("browser relaunched", "took", time.Since(start).Round(time.Millisecond))
	return nb, nil
}

// watch follows b until it dies (watchBrowser), unless the manager shuts
// down: under m.mu, as Shutdown cancels under it before it waits.
func (m *Manager) watch(b Browser) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return
	}
	m.wg.Add(1)
	go m.watchBrowser(b)
}

// browserDown brings back the sessions of b, which died (watchBrowser).
func (m *Manager) browserDown(b Browser) {
	start := time.Now()
	var ss []*Session
	for _, s := range m.live() {
		s.mu.Lock()
		mine := s.browser == b
		s.mu.Unlock()
		if mine && s.beginRecovery(ReasonBrowserCrashed) {
			ss = append(ss, s)
		}
	}
	if len(ss) > 0 {
		m.log.Error("browser exited; bringing its sessions back", "sessions", len(ss))
	}
	m.recoverSessions(b, ss, start)
	// A shared browser without sessions, or one that could not be
	// relaunched in time, is relaunched there (readiness, the default
	// session).
	m.kickTend()
}

// recoverLate brings back a session that became ready on b after
// browserDown had looked (the watchdog finds it).
func (m *Manager) recoverLate(s *Session, b Browser) {
	if !s.beginRecovery(ReasonBrowserCrashed) {
		return
	}
	start := time.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx.Err() != nil {
		return // Shutdown closes the session
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		m.recoverSessions(b, []*Session{s}, start)
	}()
}

// recoverSessions gives each session (all StateRecovering, all of the dead
// browser b) a new page in a relaunched browser, within recoverBudget of
// start; a session it cannot bring back ends failed at once.
func (m *Manager) recoverSessions(b Browser, ss []*Session, start time.Time) {
	if len(ss) == 0 {
		return
	}
	m.rec.busy.Add(1)
	defer m.rec.busy.Add(-1)
	ctx, cancel := context.WithDeadline(m.ctx, start.Add(recoverBudget))
	defer cancel()
	var (
		wg     sync.WaitGroup
		shared []*Session
	)
	for _, s := range ss {
		s.mu.Lock()
		own := s.ownBrowser == b
		s.mu.Unlock()
		if !own {
			shared = append(shared, s)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.settle(s, start, m.recoverOwn(ctx, s, start))
		}()
	}
	if len(shared) > 0 {
		lctx, lcancel := context.WithDeadline(ctx, start.Add(relaunchBudget))
		m.bmu.Lock()
		nb, err := m.ensureBrowserLocked(lctx)
		m.bmu.Unlock()
		lcancel()
		for _, s := range shared {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := err
				if err == nil {
					err = s.recoverOn(ctx, nb, false)
				}
				m.settle(s, start, err)
			}()
		}
	}
	wg.Wait()
}

// recoverOwn relaunches a session's own browser and moves the session to
// it.
func (m *Manager) recoverOwn(ctx context.Context, s *Session, start time.Time) error {
	s.mu.Lock()
	relaunch := s.rec.relaunch
	s.mu.Unlock()
	if relaunch == nil {
		return fmt.Errorf("%w: no relaunch for the session's browser", ErrUnavailable)
	}
	lctx, cancel := context.WithDeadline(ctx, start.Add(relaunchBudget))
	nb, err := relaunch(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: relaunch the session's browser: %v", ErrUnavailable, err)
	}
	if err := s.recoverOn(ctx, nb, true); err != nil {
		if cerr := nb.Close(); cerr != nil {
			s.log.Debug("close the relaunched browser", "err", cerr)
		}
		return err
	}
	m.watch(nb)
	return nil
}

// settle logs a recovery's outcome, and ends a session that could not be
// brought back.
func (m *Manager) settle(s *Session, start time.Time, err error) {
	if err == nil {
		s.log.Info("session back after a browser crash", "took", time.Since(start).Round(time.Millisecond))
		return
	}
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st != StateRecovering {
		return // closed meanwhile
	}
	s.log.Error("session could not be brought back after a browser crash; ending it", "err", err)
	s.close(context.Background(), ReasonBrowserCrashed, true)
}

// beginRecovery puts a ready session into StateRecovering for reason
// (and stops its capture, for a browser crash); false when it is not the
// caller's to recover (not ready, or a browser recovery has it). A
// browser crash takes over a renderer recovery: that tab is gone with its
// browser.
func (s *Session) beginRecovery(reason string) bool {
	s.mu.Lock()
	take := s.state == StateReady ||
		(s.state == StateRecovering && reason == ReasonBrowserCrashed && s.rec.reason != ReasonBrowserCrashed)
	if !take {
		s.mu.Unlock()
		return false
	}
	if s.state == StateReady {
		s.rec.since = time.Now()
	}
	s.state, s.rec.reason = StateRecovering, reason
	stopped := s.reconcileCapturesLocked() // stops every loop for a new browser
	s.mu.Unlock()
	for _, done := range stopped {
		<-done
	}
	return true
}

// readyAgainLocked ends a recovery: the session is ready and captures its
// (new or reloaded) page afresh (restartCapturesLocked); s.mu held.
func (s *Session) readyAgainLocked() []chan struct{} {
	s.markReadyLocked()
	return s.restartCapturesLocked()
}

// markReadyLocked records the recovery that ends (Status.LastRecovery)
// and makes the session ready; s.mu held.
func (s *Session) markReadyLocked() {
	s.rec.last = &Recovery{Reason: s.rec.reason, At: s.rec.since.UTC(), TookMs: time.Since(s.rec.since).Milliseconds()}
	s.state, s.rec.reason = StateReady, ""
}

// restartCapturesLocked starts the capture loops the pipelines need
// afresh, on the session's page as it is now, whose first picture goes to
// every viewer as a keyframe; s.mu held. It returns the done channels of
// the loops it stopped, to wait on outside the lock. A loop that ran
// through a renderer crash is started again rather than left to find the
// new renderer: a screencast stream ends with its renderer and would
// retry on a backoff, a tab capture resumes seconds late by itself.
func (s *Session) restartCapturesLocked() []chan struct{} {
	stopped := s.stopCapturesLocked()
	s.reconcileCapturesLocked() // nothing runs now: it only starts loops
	for _, p := range s.pipes {
		p.CaptureRestarted()
	}
	return stopped
}

// recoverOn moves a recovering session to nb: a new page there (in a new
// browser context with the session's size, downloads and egress proxy),
// driven, streamed and watched like its first, loading the URL the session
// showed. own: nb is the session's own browser.
func (s *Session) recoverOn(ctx context.Context, nb Browser, own bool) error {
	s.stopTabWatch()
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	// The turn orders the move with the actions; one that runs now ends at
	// once, its browser connection being gone. Without it the move goes on
	// (an action stuck on the dead page must not hold the session).
	lctx, lcancel := context.WithTimeout(ctx, time.Second)
	locked := s.ex.lock(lctx) == nil
	lcancel()
	defer func() {
		if locked {
			s.ex.unlock()
		}
	}()
	s.mu.Lock()
	st, w, h, dl, u := s.state, s.width, s.height, s.downloads, s.url
	o := browser.PageOptions{Width: w, Height: h, DownloadDir: dl, DefaultContext: s.profile != "", Proxy: egressServer(s.egress)}
	s.mu.Unlock()
	if st != StateRecovering {
		return fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	page, err := nb.NewPage(ctx, o)
	if err != nil {
		return fmt.Errorf("%w: new page: %v", ErrUnavailable, err)
	}
	closePage := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = page.Close(cctx)
	}
	t := &tab{id: page.TargetID(), page: page}
	t.vetted.Store(true) // its requests are intercepted from the start
	exec, err := s.newTabExec(t)
	if err != nil {
		closePage()
		return fmt.Errorf("%w: input: %v", ErrUnavailable, err)
	}
	t.exec = exec
	s.mu.Lock()
	if s.state != StateRecovering || s.ctx.Err() != nil {
		st := s.state
		s.mu.Unlock()
		exec.Close()
		closePage()
		return fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	old := make([]*tab, 0, len(s.tabs)+1)
	for _, x := range s.tabs {
		old = append(old, x)
	}
	oldCur, oldOwn := s.cur, s.ownBrowser
	if oldCur != nil && !slices.Contains(old, oldCur) {
		old = append(old, oldCur)
	}
	s.browser = nb
	if own {
		s.ownBrowser = nb
	}
	s.tabSeq++
	t.opened, t.used = s.tabSeq, s.tabSeq
	s.tabs = map[string]*tab{t.id: t}
	s.cur, s.page, s.root = t, page, page
	s.ex.cur.Store(exec)
	// Under s.mu with the state checked, like every s.wg.Add (close).
	s.wg.Add(1)
	go func() {
		// The old executors' connections are gone; one may still wait
		// for an action stuck on the dead page.
		defer s.wg.Done()
		for _, x := range old {
			x.gone.Store(true)
			x.exec.Close()
		}
	}()
	if u != "" && u != "about:blank" {
		s.wg.Add(1)
		go s.restoreURL(page, u)
	}
	stopped := s.readyAgainLocked()
	s.mu.Unlock()
	for _, done := range stopped {
		<-done
	}
	if oldCur != nil && locked {
		oldCur.exec.HandOver(exec) // the session's clipboard
	}
	if own && oldOwn != nil && oldOwn != nb {
		if err := oldOwn.Close(); err != nil { // dead: reaps it
			s.log.Debug("close the crashed browser", "err", err)
		}
	}
	s.publishTab(t)
	if err := s.startTabWatch(); err != nil {
		s.log.Warn("tabs: cannot watch the relaunched browser's pages", "err", err)
	}
	return nil
}

// restoreURL loads the URL a recovered session showed before the crash
// (the new page's interception applies the navigation policy to it, as to
// any document); owned by s.wg.
func (s *Session) restoreURL(pg *browser.Page, u string) {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(s.ctx, restoreTimeout)
	defer cancel()
	if err := pg.Navigate(ctx, u); err != nil && s.ctx.Err() == nil {
		// Chromium's net error code only: never the URL.
		s.log.Info("the page shown before the crash did not load again", "code", netErrRE.FindString(err.Error()))
	}
}

// recoveryLocked is what the snapshot shows of crash containment; a page
// error ends with the document it was about; s.mu held.
func (s *Session) recoveryLocked() (reason, pageErr string, last *Recovery) {
	if s.rec.pageErr != "" && (s.ex == nil || s.ex.PageRevision() != s.rec.errRev) {
		s.rec.pageErr = ""
	}
	if s.state == StateRecovering {
		reason = s.rec.reason
	}
	if s.rec.last != nil {
		l := *s.rec.last
		last = &l
	}
	return reason, s.rec.pageErr, last
}

// lastRecoveryAt is when r was, for the snapshot's revision: a second
// recovery moves it as the first did.
func lastRecoveryAt(r *Recovery) time.Time {
	if r == nil {
		return time.Time{}
	}
	return r.At
}

// stopCapturesLocked cancels every capture loop and forgets the last frame
// and the view fixes (a picture of the page they captured must not be
// re-sent as a new page's keyframe); it returns the loops' done channels,
// to wait on outside the lock.
func (s *Session) stopCapturesLocked() []chan struct{} {
	var stopped []chan struct{}
	for mode, r := range s.captures {
		r.cancel()
		stopped = append(stopped, r.done)
		delete(s.captures, mode)
	}
	s.lastFrame.Store(nil)
	s.viewFixes.Store(0)
	s.viewFixedAt.Store(0)
	return stopped
}
