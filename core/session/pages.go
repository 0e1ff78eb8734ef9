package session

// Tabs. A session streams and drives one page at a time, its current tab,
// but its browser context may hold more: tabs an agent opened (TabNew) and
// popups its pages opened. Every tab gets its own input.Executor as soon as
// it is seen, so the navigation policy (the executor's Fetch interception)
// covers background tabs too; only the current tab's executor receives the
// dispatcher's actions, and only its events reach the viewers.
//
// A switch (SwitchPage, a followed popup, the current tab closing) runs
// inside the dispatcher's executor turn (pageExec): it waits for the action
// that is running, and no action starts until the new page is current. So
// every action runs wholly on one page, and the page revision rises inside
// the turn: a coordinate action aimed at the old page that runs after the
// switch is refused stale_page, and refs of the old page are stale_ref.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/input"
)

// MaxTabs bounds the tabs of one session: TabNew beyond it fails
// ErrTooManyTabs, and popups beyond it are closed at once (as a popup
// blocker would).
const MaxTabs = 10

// ReasonPageClosed ends a session whose last tab closed (window.close()).
const ReasonPageClosed = "page_closed"

// Tab errors with stable meaning at the API edge.
var (
	ErrTooManyTabs = errors.New("session: too many tabs")
	ErrNoTab       = errors.New("session: no such tab")
	ErrLastTab     = errors.New("session: the session's last tab")
)

// Bounds of the tab machinery.
const (
	tabEventQueue = 64               // target events waiting for the watcher
	tabOpTimeout  = 15 * time.Second // one adopt, switch or close by the watcher
	releaseWait   = time.Second      // lifting held input on the page left
	navCommitWait = 5 * time.Second  // TabNew: the new document's commit
)

// tab is one page of the session's browser context that the session is
// attached to.
type tab struct {
	id     string
	page   *browser.Page
	exec   *input.Executor
	opener string // target id of the tab that opened it, if any
	opened uint64 // adoption order: stable tab indices
	used   uint64 // when it last became current (s.tabSeq), for "the most recent"
	// vetted: the tab's first document passed the navigation policy. A
	// popup's first request may leave before its executor intercepts
	// requests, so its first URL is checked after the fact.
	vetted atomic.Bool
	gone   atomic.Bool // closed; nothing is sent to it any more
	// reloadAt is when the session last reloaded the tab after a crash,
	// hungAt when its watchdog crashed the tab's hung renderer; crashSeen
	// counts the crashes each listener reported, crashHandled those
	// handled (s.rec.mu; renderer.go).
	reloadAt, hungAt time.Time
	crashSeen        [crashSources]int
	crashHandled     int
}

// TabInfo is one tab of the session, in the order the session saw them.
type TabInfo struct {
	ID       string `json:"id"`
	URL      string `json:"url"`
	Title    string `json:"title"`
	Current  bool   `json:"current"`
	OpenerID string `json:"openerId,omitempty"`
}

// pageExec is the dispatcher's executor: the current tab's. Its turn (a
// channel of one, so a switch can give up on a context) is held by every
// Execute and by a tab switch (see the package comment above).
//
// Why not a dispatcher action kind: the kinds are the panel's wire
// vocabulary, and switching is the agent API's; holding the turn gives the
// guarantee that matters for ordering (an action never straddles two pages,
// and the revision rises between them) without one.
type pageExec struct {
	turn chan struct{}
	cur  atomic.Pointer[input.Executor]
	live func() bool // the session is ready (not closing)
}

func newPageExec(e *input.Executor, live func() bool) *pageExec {
	x := &pageExec{turn: make(chan struct{}, 1), live: live}
	x.cur.Store(e)
	return x
}

func (x *pageExec) Execute(ctx context.Context, producerID string, a action.Action) (action.Result, error) {
	select {
	case x.turn <- struct{}{}:
	case <-ctx.Done():
		return action.Result{PageRevision: x.PageRevision()}, errcode.Newf(errcode.Timeout, "%s timed out while the session switched tabs", a.Kind)
	}
	defer func() { <-x.turn }()
	res, err := x.cur.Load().Execute(ctx, producerID, a)
	var ae *errcode.Error
	if errors.As(err, &ae) && ae.Code == errcode.SessionClosed && x.live() {
		// The tab closed under the action while the session lives on: a
		// click on a button that calls window.close(). The event reached
		// the page; the session shows another tab next.
		return action.Result{PageRevision: res.PageRevision}, nil
	}
	return res, err
}

func (x *pageExec) PageRevision() uint64 { return x.cur.Load().PageRevision() }

// lock takes the turn: the running action has ended and no other starts.
func (x *pageExec) lock(ctx context.Context) error {
	select {
	case x.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("session: wait for the running action: %w", ctx.Err())
	}
}

func (x *pageExec) unlock() { <-x.turn }

// newTabExec attaches an executor to t's page; its events reach the
// viewers only while t is current.
func (s *Session) newTabExec(t *tab) (*input.Executor, error) {
	ex, err := input.New(t.page, s.m.cfg.Input, input.Events{
		OnPageState: func(ps input.PageState) {
			s.vetLater(t, ps.URL)
			if s.isCurrent(t) {
				s.onPageState(ps)
			}
		},
		OnDialogOpened: func(d input.Dialog) {
			if s.isCurrent(t) {
				s.onDialogOpened(d)
			}
		},
		OnDialogClosed: func() {
			if s.isCurrent(t) {
				s.onDialogClosed()
			}
		},
	}, s.log.With("component", "input", "tab", shortTab(t.id)))
	if err != nil {
		return nil, err
	}
	ex.SetEgressCount(s.egressRefused)
	return ex, nil
}

func shortTab(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

func (s *Session) isCurrent(t *tab) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur == t
}

// Tabs lists the session's tabs in the order it saw them (stable indices).
func (s *Session) Tabs() []TabInfo {
	s.mu.Lock()
	tabs := make([]*tab, 0, len(s.tabs))
	for _, t := range s.tabs {
		tabs = append(tabs, t)
	}
	cur := s.cur
	s.mu.Unlock()
	slices.SortFunc(tabs, func(a, b *tab) int { return int(a.opened) - int(b.opened) })
	out := make([]TabInfo, 0, len(tabs))
	for _, t := range tabs {
		ps := t.exec.PageState()
		out = append(out, TabInfo{ID: t.id, URL: ps.URL, Title: ps.Title, Current: t == cur, OpenerID: t.opener})
	}
	return out
}

// SwitchPage makes the tab targetID the session's current page: the one
// streamed to viewers and driven by people and agents. Held keys and
// buttons are lifted on the page left; pageRevision rises.
func (s *Session) SwitchPage(ctx context.Context, targetID string) error {
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.mu.Lock()
	t := s.tabs[targetID]
	st := s.state
	s.mu.Unlock()
	if st != StateReady {
		return fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	if t == nil {
		return ErrNoTab
	}
	return s.switchToLocked(ctx, t)
}

// TabNew opens url (policy-checked like navigate: a refused URL is an
// *errcode.Error navigation_blocked) in a new tab of the session's browser
// context and, unless background, switches to it. It returns once the new
// document committed.
func (s *Session) TabNew(ctx context.Context, url string, background bool) (TabInfo, error) {
	if url == "" {
		url = "about:blank"
	}
	if err := s.m.cfg.Input.CheckURL(ctx, url); err != nil {
		return TabInfo{}, err
	}
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.mu.Lock()
	st, n, root := s.state, len(s.tabs), s.root
	s.mu.Unlock()
	if st != StateReady {
		return TabInfo{}, fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	if n >= MaxTabs {
		return TabInfo{}, fmt.Errorf("%w: at most %d", ErrTooManyTabs, MaxTabs)
	}
	pg, err := s.chromium().NewTab(ctx, root.BrowserContextID(), browser.PageOptions{Width: s.width, Height: s.height})
	if err != nil {
		return TabInfo{}, fmt.Errorf("%w: new tab: %v", ErrUnavailable, err)
	}
	t, err := s.adoptLocked(ctx, pg.TargetID(), "", pg)
	if err != nil {
		return TabInfo{}, err
	}
	t.vetted.Store(true) // its requests are intercepted from the start
	if url != "about:blank" {
		// Through the tab's own executor, exactly as a navigate action:
		// the same policy, redirects included, and the same error codes.
		rev := t.exec.PageRevision()
		if _, err := t.exec.Execute(ctx, "session", action.Action{Kind: action.Navigate, URL: url}); err != nil {
			s.dropTabLocked(ctx, t)
			return TabInfo{}, err
		}
		// Page.navigate may answer before the new document's
		// frameNavigated: switch after it, so the revision the caller
		// sees is the new document's.
		for deadline := time.Now().Add(navCommitWait); t.exec.PageRevision() == rev && time.Now().Before(deadline) && ctx.Err() == nil; {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if !background {
		if err := s.switchToLocked(ctx, t); err != nil {
			return TabInfo{}, err
		}
	} else {
		s.frontCurrent(ctx)
	}
	ps := t.exec.PageState()
	return TabInfo{ID: t.id, URL: ps.URL, Title: ps.Title, Current: s.isCurrent(t)}, nil
}

// CloseTab closes the tab targetID. The current tab is left first for its
// opener, else the tab used most recently; the last tab is ErrLastTab
// (close the session instead).
func (s *Session) CloseTab(ctx context.Context, targetID string) error {
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.mu.Lock()
	t, n, cur, st := s.tabs[targetID], len(s.tabs), s.cur, s.state
	s.mu.Unlock()
	switch {
	case st != StateReady:
		return fmt.Errorf("%w: %s", ErrNotReady, st)
	case t == nil:
		return ErrNoTab
	case n <= 1:
		return ErrLastTab
	}
	if t == cur {
		if err := s.switchToLocked(ctx, s.nextTabLocked(t)); err != nil {
			return err
		}
	}
	s.dropTabLocked(ctx, t)
	return nil
}

// adoptLocked attaches to the page target id of the session's context (pg
// when the caller attached already) and registers it as a tab; tabsMu held.
// A tab known already is returned as it is.
func (s *Session) adoptLocked(ctx context.Context, id, opener string, pg *browser.Page) (*tab, error) {
	s.mu.Lock()
	t, n, st := s.tabs[id], len(s.tabs), s.state
	s.mu.Unlock()
	if t != nil {
		return t, nil
	}
	closePg := func() {
		if pg != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
			defer cancel()
			_ = pg.CloseTab(cctx)
		}
	}
	if st != StateReady {
		closePg()
		return nil, fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	if n >= MaxTabs {
		closePg()
		return nil, fmt.Errorf("%w: at most %d", ErrTooManyTabs, MaxTabs)
	}
	if pg == nil {
		var err error
		if pg, err = s.chromium().AttachPage(ctx, id, browser.PageOptions{Width: s.width, Height: s.height}); err != nil {
			return nil, fmt.Errorf("%w: attach tab: %v", ErrUnavailable, err)
		}
	}
	t = &tab{id: id, page: pg, opener: opener}
	exec, err := s.newTabExec(t)
	if err != nil {
		// A tab we cannot police is not left open.
		closePg()
		return nil, fmt.Errorf("%w: tab input: %v", ErrUnavailable, err)
	}
	t.exec = exec
	s.mu.Lock()
	if s.state != StateReady {
		s.mu.Unlock()
		exec.Close()
		closePg()
		return nil, ErrNotReady
	}
	s.tabSeq++
	t.opened = s.tabSeq
	s.tabs[id] = t
	s.mu.Unlock()
	return t, nil
}

// dropTabLocked forgets a tab that is not current and closes it; tabsMu
// held.
func (s *Session) dropTabLocked(ctx context.Context, t *tab) {
	s.mu.Lock()
	if s.tabs[t.id] == t {
		delete(s.tabs, t.id)
	}
	s.mu.Unlock()
	t.gone.Store(true)
	t.exec.Close()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := t.page.CloseTab(cctx); err != nil {
		s.log.Debug("close tab", "err", err)
	}
}

// nextTabLocked is the tab to show when t goes: its opener if still open,
// else the one current most recently (else the newest). nil if none.
func (s *Session) nextTabLocked(t *tab) *tab {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.tabs[t.opener]; o != nil && o != t {
		return o
	}
	var best *tab
	for _, x := range s.tabs {
		if x == t {
			continue
		}
		if best == nil || x.used > best.used || (x.used == best.used && x.opened > best.opened) {
			best = x
		}
	}
	return best
}

// switchToLocked makes t the current tab; tabsMu held. See the package
// comment for how it is ordered with the dispatcher.
func (s *Session) switchToLocked(ctx context.Context, t *tab) error {
	if t == nil {
		return ErrNoTab
	}
	start := time.Now()
	if err := s.ex.lock(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	old, st := s.cur, s.state
	s.mu.Unlock()
	if st != StateReady || old == t {
		s.ex.unlock()
		if st != StateReady {
			return fmt.Errorf("%w: %s", ErrNotReady, st)
		}
		return nil
	}
	if old != nil && !old.gone.Load() && s.disp != nil {
		// Nothing stays pressed on a page nobody drives any more. The
		// dispatcher owns what is held; the turn is ours, so nothing runs.
		rctx, cancel := context.WithTimeout(ctx, releaseWait)
		for _, r := range s.disp.LiftHeld() {
			if _, err := old.exec.Execute(rctx, r.ProducerID, r.Action); err != nil {
				s.log.Debug("release held input on the tab left", "kind", r.Action.Kind, "err", err)
			}
		}
		cancel()
	}
	if old != nil {
		old.exec.HandOver(t.exec)
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if err := t.page.Activate(actx); err != nil {
		s.log.Debug("bring the tab to the front", "err", err)
	}
	cancel()
	rev := t.exec.NewRevision()
	s.mu.Lock()
	s.tabSeq++
	t.used = s.tabSeq
	s.cur, s.page = t, t.page
	s.ex.cur.Store(t.exec)
	// The old page's capture stops; a picture of it must not be re-sent
	// as the new page's keyframe.
	stopped := s.stopCapturesLocked()
	s.mu.Unlock()
	s.ex.unlock()
	s.publishTab(t)
	for _, done := range stopped {
		<-done
	}
	s.mu.Lock()
	if s.state == StateReady {
		s.reconcileCapturesLocked()
		for _, p := range s.pipes {
			p.CaptureRestarted()
		}
	}
	s.mu.Unlock()
	s.log.Info("switched tab", "tab", shortTab(t.id), "pageRevision", rev, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// publishTab tells the viewers about the tab that became current: its page
// state (URL, title, revision) and its dialog.
func (s *Session) publishTab(t *tab) {
	s.onPageState(t.exec.PageState())
	if d, ok := t.exec.OpenDialog(); ok {
		s.onDialogOpened(d)
	} else if s.hub.hasDialog() {
		s.onDialogClosed()
	}
}

func (h *stateHub) hasDialog() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dialog != nil
}

// frontCurrent brings the current tab back to the front of its window (a
// popup opened in the same window hides it otherwise).
func (s *Session) frontCurrent(ctx context.Context) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur == nil {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := cur.page.Activate(actx); err != nil {
		s.log.Debug("bring the current tab to the front", "err", err)
	}
}

// tabCheck asks the watcher to check a tab's first URL against the policy.
type tabCheck struct {
	t   *tab
	url string
}

// vetLater queues a check of t's first real URL (from an executor event:
// it must not block, the check may resolve names).
func (s *Session) vetLater(t *tab, url string) {
	if t.vetted.Load() || url == "" || url == "about:blank" {
		return
	}
	s.mu.Lock()
	checks := s.tabChecks
	s.mu.Unlock()
	select {
	case checks <- tabCheck{t: t, url: url}:
	default: // the watcher is busy (or none runs); the next page state asks again
	}
}

// tabWatch is the running watcher of one browser's page targets: a
// session's browser changes when it is relaunched after a crash, and the
// watcher with it (stopTabWatch, startTabWatch).
type tabWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startTabWatch follows the page targets of the session's browser; the
// watcher goroutine is the session's (s.wg) and ends with it, or earlier
// with stopTabWatch.
func (s *Session) startTabWatch() error {
	events := make(chan browser.TargetEvent, tabEventQueue)
	checks := make(chan tabCheck, tabEventQueue)
	wctx, stopWatch := context.WithCancel(s.ctx)
	ctx, cancel := context.WithTimeout(wctx, 5*time.Second)
	defer cancel()
	var dropped atomic.Uint64
	stop, err := s.chromium().WatchPages(ctx, func(ev browser.TargetEvent) {
		select {
		case events <- ev:
		default:
			dropped.Add(1) // the watcher is far behind: the tab is not followed
		}
	})
	if err != nil {
		stopWatch()
		return err
	}
	w := &tabWatch{cancel: stopWatch, done: make(chan struct{})}
	s.mu.Lock()
	// Under s.mu with the state checked: close waits for s.wg only after
	// it set the state, so no Add comes after its Wait.
	if s.state == StateClosing || s.state == StateClosed || s.state == StateFailed {
		s.mu.Unlock()
		stopWatch()
		stop()
		return fmt.Errorf("%w: %s", ErrNotReady, s.state)
	}
	s.tabChecks, s.rec.watch = checks, w
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		defer close(w.done)
		defer stop()
		for {
			select {
			case <-wctx.Done():
				return
			case ev := <-events:
				if n := dropped.Swap(0); n > 0 {
					s.log.Warn("tab events dropped", "count", n)
				}
				if ev.Crashed {
					s.tabCrashed(wctx, ev.TargetID)
					continue
				}
				s.onTarget(wctx, ev)
			case c := <-checks:
				s.vet(wctx, c)
			}
		}
	}()
	return nil
}

// stopTabWatch ends the tab watcher and waits for it (the browser it
// watched is gone).
func (s *Session) stopTabWatch() {
	s.mu.Lock()
	w := s.rec.watch
	s.rec.watch = nil
	s.mu.Unlock()
	if w != nil {
		w.cancel()
		<-w.done
	}
}

// mine reports whether a page target belongs to the session's context.
func (s *Session) mine(ev browser.TargetEvent) bool {
	s.mu.Lock()
	root := s.root
	s.mu.Unlock()
	if root == nil {
		return false
	}
	// A persistent profile's Chromium is the session's own: every page of
	// it is the session's.
	return root.BrowserContextID() == "" || ev.BrowserContextID == root.BrowserContextID()
}

// onTarget adopts a new page of the session (following a popup of the
// current tab) or lets a closed one go.
func (s *Session) onTarget(wctx context.Context, ev browser.TargetEvent) {
	ctx, cancel := context.WithTimeout(wctx, tabOpTimeout)
	defer cancel()
	if ev.Destroyed {
		s.tabGone(ctx, ev.TargetID)
		return
	}
	if !s.mine(ev) {
		return
	}
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.mu.Lock()
	known := s.tabs[ev.TargetID] != nil
	cur := s.cur
	s.mu.Unlock()
	if known {
		return
	}
	t, err := s.adoptLocked(ctx, ev.TargetID, ev.OpenerID, nil)
	if errors.Is(err, ErrTooManyTabs) {
		s.log.Info("a page opened a tab over the session's limit; closed it", "limit", MaxTabs)
		if err := s.chromium().CloseTarget(ctx, ev.TargetID); err != nil {
			s.log.Debug("close a tab over the limit", "err", err)
		}
		return
	}
	if err != nil {
		s.log.Debug("adopt a new tab", "err", err)
		return
	}
	if ev.OpenerID == "" {
		t.vetted.Store(true) // not a popup: opened through the session
	}
	if u := t.exec.PageState().URL; u != "" && u != "about:blank" && !t.vetted.Load() {
		if !s.vetNow(ctx, t, u) {
			return
		}
	}
	if !s.m.cfg.PopupsInBackground && cur != nil && ev.OpenerID == cur.id {
		if err := s.switchToLocked(ctx, t); err != nil {
			s.log.Debug("follow a popup", "err", err)
		}
		return
	}
	s.frontCurrent(ctx)
}

// vet checks a popup's first URL from the watcher.
func (s *Session) vet(wctx context.Context, c tabCheck) {
	if c.t.vetted.Load() || c.t.gone.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(wctx, tabOpTimeout)
	defer cancel()
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.vetNow(ctx, c.t, c.url)
}

// vetNow closes t when url is refused by the navigation policy (its first
// document loaded before the interception was in place); tabsMu held.
func (s *Session) vetNow(ctx context.Context, t *tab, url string) bool {
	if err := s.m.cfg.Input.CheckURL(ctx, url); err == nil {
		t.vetted.Store(true)
		return true
	}
	s.log.Info("a tab opened a page the navigation policy refuses; closed it")
	s.mu.Lock()
	cur, n := s.cur == t, len(s.tabs)
	s.mu.Unlock()
	if cur && n > 1 {
		if err := s.switchToLocked(ctx, s.nextTabLocked(t)); err != nil {
			s.log.Debug("leave a refused tab", "err", err)
		}
	}
	if !s.isCurrent(t) {
		s.dropTabLocked(ctx, t)
		return false
	}
	// The session's only tab: show a blank page instead.
	if _, err := t.exec.Execute(ctx, "session", action.Action{Kind: action.Navigate, URL: "about:blank"}); err != nil {
		s.log.Debug("blank a refused tab", "err", err)
	}
	return false
}

// tabGone handles a tab closed by its page (window.close()) or by anyone:
// when it was current the session shows its opener, else the tab used
// most recently; with no tab left the session ends.
func (s *Session) tabGone(ctx context.Context, id string) {
	s.tabsMu.Lock()
	defer s.tabsMu.Unlock()
	s.mu.Lock()
	t := s.tabs[id]
	cur := s.cur == t
	s.mu.Unlock()
	if t == nil {
		return
	}
	t.gone.Store(true)
	if cur {
		next := s.nextTabLocked(t)
		if next == nil {
			s.log.Info("the session's last tab closed")
			s.endSoon(ReasonPageClosed)
			return
		}
		if err := s.switchToLocked(ctx, next); err != nil {
			s.log.Warn("leave a closed tab", "err", err)
		}
	}
	s.dropTabLocked(ctx, t)
}

// endSoon closes the session from a goroutine of the manager's (close
// waits for the session's own goroutines, the caller among them).
func (s *Session) endSoon(reason string) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	if s.m.ctx.Err() != nil {
		return // Shutdown closes it
	}
	s.m.wg.Add(1)
	go func() {
		defer s.m.wg.Done()
		s.close(context.Background(), reason, false)
	}()
}

func (s *Session) ready() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == StateReady
}
