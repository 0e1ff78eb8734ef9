package session

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
)

// titled serves /t/NAME: a page titled NAME.
func titled(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `<!doctype html><title>%s</title><body>%s`, r.URL.Path[3:], r.URL.Path[3:])
	}))
	t.Cleanup(srv.Close)
	return srv
}

// titleOf reads the title of the session's current page; "" when the page
// does not answer.
func titleOf(s *Session) string {
	pg := s.Page()
	if pg == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	var title string
	if err := pg.Evaluate(ctx, "document.title", &title); err != nil {
		return ""
	}
	return title
}

// waitBack polls until s is ready again after a recovery for reason, with
// its page titled title; it returns when that was.
func waitBack(t *testing.T, s *Session, reason, title string, d time.Duration) (Status, time.Time) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		snap := s.Status()
		if snap.State == StateReady && snap.LastRecovery != nil && snap.LastRecovery.Reason == reason && titleOf(s) == title {
			return snap, time.Now()
		}
		if time.Now().After(deadline) || snap.State == StateFailed || snap.State == StateClosed {
			t.Fatalf("session %s: %s (recovering %q, last %+v), title %q after %v; want ready after %s with title %q",
				s.ID(), snap.State, snap.Recovering, snap.LastRecovery, titleOf(s), d, reason, title)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A browser crash brings its sessions back in place within 5 s: the same
// sessions (ids, producers) on a relaunched Chromium, showing their pages
// again; meanwhile they are recovering and BrowserUp is false.
func TestBrowserCrashRecoversSessions(t *testing.T) {
	m, first := newManager(t, Config{Input: tabPolicy(), Launch: func(ctx context.Context) (Browser, error) { return launch(ctx) }})
	srv := titled(t) // after newManager: closed before its leak check
	a, b := createAt(t, m, srv.URL+"/t/alpha"), createAt(t, m, srv.URL+"/t/beta")
	p, err := a.OpenProducer(dispatch.KindHuman, "t", func(action.StateEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitBack := waitBack
	for _, s := range []*Session{a, b} {
		deadline := time.Now().Add(5 * time.Second)
		for titleOf(s) == "" && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}

	oldPID := first.PID()
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	sawRecovering, sawDown := false, false
	for time.Since(killed) < time.Second && !(sawRecovering && sawDown) {
		sawRecovering = sawRecovering || a.Status().State == StateRecovering
		sawDown = sawDown || !m.BrowserUp()
		time.Sleep(5 * time.Millisecond)
	}
	if !sawRecovering || !sawDown {
		t.Errorf("within 1 s of the crash: recovering seen %v, BrowserUp false seen %v", sawRecovering, sawDown)
	}
	for _, x := range []struct {
		s     *Session
		title string
	}{{a, "alpha"}, {b, "beta"}} {
		snap, at := waitBack(t, x.s, ReasonBrowserCrashed, x.title, 5*time.Second-time.Since(killed))
		t.Logf("session %s back %v after the kill (recovery %d ms)", x.s.ID(), at.Sub(killed).Round(time.Millisecond), snap.LastRecovery.TookMs)
		if got, err := m.Get(x.s.ID()); err != nil || got != x.s {
			t.Errorf("Get(%s) after the recovery: %v %v", x.s.ID(), got, err)
		}
	}
	if !m.BrowserUp() {
		t.Error("BrowserUp false after the relaunch")
	}
	nb, ok := m.Browser().(*browser.Browser)
	if !ok || nb == first || nb.PID() == oldPID {
		t.Fatal("the browser was not relaunched")
	}
	if a.chromium() != Browser(nb) || b.chromium() != Browser(nb) {
		t.Error("a session is not on the relaunched browser")
	}
	// The producer granted before the crash drives the new page.
	ack := submitWait(t, p, 1, action.Action{Kind: action.Navigate, URL: srv.URL + "/t/gamma"})
	if ack.Status != action.StatusCompleted {
		t.Fatalf("navigate after the recovery: %+v", ack)
	}
	deadline := time.Now().Add(5 * time.Second)
	for titleOf(a) != "gamma" {
		if time.Now().After(deadline) {
			t.Fatalf("title after navigate: %q", titleOf(a))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for len(groupAlive(oldPID)) > 0 {
		if time.Since(killed) > 10*time.Second {
			t.Fatalf("crashed chromium left processes: %v", groupAlive(oldPID))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A renderer crash of a session's tab reloads that tab (the same target)
// and shows it; a second crash soon after is left as it is (pageError)
// until someone loads a new document.
func TestRendererCrashReloads(t *testing.T) {
	m, _ := newManager(t, Config{Input: tabPolicy()})
	srv := titled(t) // after newManager: closed before its leak check
	s := createAt(t, m, srv.URL+"/t/page")
	other := createAt(t, m, srv.URL+"/t/other")
	pg := s.Page()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	start := time.Now()
	if err := pg.CrashRenderer(ctx); err != nil {
		t.Fatal(err)
	}
	snap, at := waitBack(t, s, ReasonRendererCrashed, "page", 3*time.Second)
	t.Logf("page back %v after Page.crash (recovery %d ms)", at.Sub(start).Round(time.Millisecond), snap.LastRecovery.TookMs)
	if s.Page() != pg {
		t.Error("the crashed tab was replaced, not reloaded")
	}
	if o := other.Status(); o.State != StateReady || o.LastRecovery != nil || titleOf(other) != "other" {
		t.Errorf("the other session after the crash: %s %+v %q", o.State, o.LastRecovery, titleOf(other))
	}

	// Again, at once: left as it is.
	if err := pg.CrashRenderer(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for s.Status().PageError != ReasonRendererCrashed {
		if time.Now().After(deadline) {
			t.Fatalf("second crash: snapshot %+v", s.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(time.Second)
	if titleOf(s) != "" {
		t.Error("the tab that crashed twice was reloaded again")
	}
	if st := s.Status().State; st != StateReady {
		t.Errorf("state %s after the second crash, want ready", st)
	}
	// A person's reload brings it back and clears the error.
	p, err := s.OpenProducer(dispatch.KindHuman, "t", func(action.StateEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if ack := submitWait(t, p, 1, action.Action{Kind: action.Reload}); ack.Status != action.StatusCompleted {
		t.Fatalf("reload: %+v", ack)
	}
	deadline = time.Now().Add(5 * time.Second)
	for titleOf(s) != "page" || s.Status().PageError != "" {
		if time.Now().After(deadline) {
			t.Fatalf("after a reload: title %q, snapshot %+v", titleOf(s), s.Status())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A page whose script never yields (no frame, no answer) is found by the
// watchdog, its renderer crashed and the tab reloaded.
func TestRendererHangRecovered(t *testing.T) {
	m, _ := newManager(t, Config{Input: tabPolicy()})
	srv := titled(t) // after newManager: closed before its leak check
	s := createAt(t, m, srv.URL+"/t/hang")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Page().Evaluate(ctx, "setTimeout(() => { for (;;) {} }, 0), 1", nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	snap, at := waitBack(t, s, ReasonRendererHung, "hang", 15*time.Second)
	took := at.Sub(start)
	t.Logf("hung page back %v after the hang began (recovery %d ms)", took.Round(time.Millisecond), snap.LastRecovery.TookMs)
	if took < hangAfter {
		t.Errorf("recovered after %v: before the %v a hang takes", took, hangAfter)
	}
}

// A page in a dialog does not answer either, rightly: it is not hung.
func TestDialogIsNotAHang(t *testing.T) {
	m, _ := newManager(t, Config{Input: tabPolicy()})
	srv := titled(t) // after newManager: closed before its leak check
	s := createAt(t, m, srv.URL+"/t/dialog")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Page().Evaluate(ctx, "setTimeout(() => alert('hi'), 0), 1", nil); err != nil {
		t.Fatal(err)
	}
	time.Sleep(hangAfter + quietBeforeProbe + 2*time.Second)
	if snap := s.Status(); snap.LastRecovery != nil || snap.State != StateReady {
		t.Fatalf("a page in a dialog was recovered: %s %+v", snap.State, snap.LastRecovery)
	}
}

// When the relaunch fails, the sessions end at once; the kept default
// session comes back under its id as soon as a browser runs again.
func TestDefaultSessionComesBack(t *testing.T) {
	var refuse atomic.Int32
	m, first := newManager(t, Config{Input: tabPolicy(), Launch: func(ctx context.Context) (Browser, error) {
		if refuse.Add(-1) >= 0 {
			return nil, errors.New("refused by the test")
		}
		return launch(ctx)
	}})
	srv := titled(t) // after newManager: closed before its leak check
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	def, err := m.KeepDefault(ctx, CreateOptions{URL: srv.URL + "/t/default", KeepIdle: true})
	if err != nil {
		t.Fatal(err)
	}
	other := createAt(t, m, srv.URL+"/t/other")

	refuse.Store(1) // the recovery's relaunch fails; the tender's next one works
	if err := syscall.Kill(first.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	for _, s := range []*Session{def, other} {
		snap := waitState(t, s, StateFailed, 2*time.Second)
		if snap.TerminalReason != ReasonBrowserCrashed {
			t.Errorf("session %s: reason %q", s.ID(), snap.TerminalReason)
		}
	}
	t.Logf("sessions failed %v after the kill (the relaunch was refused)", time.Since(killed).Round(time.Millisecond))
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := m.Get(def.ID())
		if err == nil && s != def && s.Status().State == StateReady && titleOf(s) == "default" {
			t.Logf("default session back (same id) %v after the kill", time.Since(killed).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("default session not back: %v %v", s, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !m.BrowserUp() {
		t.Error("BrowserUp false after the tender's relaunch")
	}
	if s, _ := m.Get(other.ID()); s != other || s.Status().State != StateFailed {
		t.Error("a session that was not kept came back")
	}
	// Closed on purpose, it stays closed.
	if err := m.Close(ctx, def.ID()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if s, err := m.Get(def.ID()); err != nil || s.Status().State != StateClosed {
		t.Errorf("the closed default session: %v %v", s, err)
	}
}

// With per-session isolation every session has a Chromium of its own: a
// crash of one brings back that session only, the others never notice.
func TestPerSessionIsolation(t *testing.T) {
	m, shared := newManager(t, Config{Input: tabPolicy(), Isolation: IsolationPerSession,
		Launch: func(ctx context.Context) (Browser, error) { return launch(ctx) }})
	srv := titled(t) // after newManager: closed before its leak check
	a, b := createAt(t, m, srv.URL+"/t/a"), createAt(t, m, srv.URL+"/t/b")
	ba, ok1 := a.chromium().(*browser.Browser)
	bb, ok2 := b.chromium().(*browser.Browser)
	if !ok1 || !ok2 || ba == bb || ba == shared || bb == shared {
		t.Fatal("sessions do not have browsers of their own")
	}
	if err := syscall.Kill(ba.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_, at := waitBack(t, a, ReasonBrowserCrashed, "a", 5*time.Second)
	t.Logf("isolated session back %v after the kill", at.Sub(killed).Round(time.Millisecond))
	if na := a.chromium(); na == Browser(ba) || na == Browser(bb) {
		t.Error("the session was not moved to a browser of its own")
	}
	if snap := b.Status(); snap.State != StateReady || snap.LastRecovery != nil || titleOf(b) != "b" {
		t.Errorf("the other session: %s %+v", snap.State, snap.LastRecovery)
	}
	if !m.BrowserUp() {
		t.Error("BrowserUp false: the shared browser did not crash")
	}
	// Closing the session closes its (relaunched) browser.
	nb := a.chromium()
	if err := m.Close(context.Background(), a.ID()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nb.Done():
	case <-time.After(5 * time.Second):
		t.Error("the closed session's browser still runs")
	}
}

// A persistent profile's own browser that crashes is relaunched on the
// same profile, which stays the session's meanwhile.
func TestProfileBrowserCrashRecovers(t *testing.T) {
	root := t.TempDir()
	m, _ := newManager(t, Config{Input: tabPolicy(), ProfileRoot: root,
		LaunchProfile: func(ctx context.Context, dir, proxy string) (Browser, error) {
			ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			return browser.Launch(ctx, browser.Options{Headless: true, ProfileDir: dir, Proxy: proxy})
		}})
	srv := titled(t) // after newManager: closed before its leak check
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := m.Create(ctx, CreateOptions{URL: srv.URL + "/t/profile", Profile: "work", Owner: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	old, ok := s.chromium().(*browser.Browser)
	if !ok {
		t.Fatal("no browser of its own")
	}
	if err := syscall.Kill(old.PID(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_, at := waitBack(t, s, ReasonBrowserCrashed, "profile", 5*time.Second)
	t.Logf("profile session back %v after the kill", at.Sub(killed).Round(time.Millisecond))
	if s.chromium() == Browser(old) {
		t.Fatal("the session is still on the crashed browser")
	}
	if _, err := m.Create(ctx, CreateOptions{URL: "about:blank", Profile: "work", Owner: "ann"}); !errors.Is(err, ErrProfileInUse) {
		t.Errorf("the profile during the recovered session: %v, want ErrProfileInUse", err)
	}
	if err := m.Close(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	nb := s.chromium()
	select {
	case <-nb.Done():
	case <-time.After(5 * time.Second):
		t.Error("the closed session's relaunched profile browser still runs")
	}
}
