package session

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
	"go.uber.org/goleak"
)

// noPlugin stands in for the capture and encoder plugins: lifecycle tests
// never start media, and a call would be a bug.
type noPlugin[T any] struct{}

var errNoPlugin = errors.New("no plugin in lifecycle tests")

func (noPlugin[T]) Get(context.Context) (T, uint64, error) {
	var zero T
	return zero, 0, errNoPlugin
}
func (noPlugin[T]) Call(context.Context, func(T) error) error { return errNoPlugin }
func (noPlugin[T]) Report(uint64, error)                      {}

func launch(ctx context.Context) (*browser.Browser, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return browser.Launch(ctx, browser.Options{Headless: true})
}

// newManager starts a real Chromium and a manager on it; cleanup shuts
// both down and checks that no goroutine is left.
func newManager(t *testing.T, cfg Config) (*Manager, *browser.Browser) {
	t.Helper()
	testenv.NeedsChromium(t)
	b, err := launch(context.Background())
	if err != nil {
		t.Fatalf("launch chromium: %v", err)
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = 4
	}
	if cfg.MaxViewers == 0 {
		cfg.MaxViewers = 4
	}
	cfg.Width, cfg.Height = 640, 480
	m := NewManager(cfg, b, noPlugin[capture.Capturer]{}, noPlugin[encoder.Encoder]{}, []string{"vp8"})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m.Shutdown(ctx)
		_ = b.Close()
		goleak.VerifyNone(t)
	})
	return m, b
}

func create(t *testing.T, m *Manager) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := m.Create(ctx, CreateOptions{URL: "about:blank"})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

// waitState polls the snapshot until it is in state st, for at most d.
func waitState(t *testing.T, s *Session, st State, d time.Duration) Status {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		snap := s.Status()
		if snap.State == st {
			return snap
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s: state %s (reason %q) after %v, want %s", s.ID(), snap.State, snap.TerminalReason, d, st)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCapacityAndTerminalSnapshots(t *testing.T) {
	m, _ := newManager(t, Config{MaxSessions: 2, TerminalTTL: 300 * time.Millisecond})
	a, b := create(t, m), create(t, m)

	_, err := m.Create(context.Background(), CreateOptions{URL: "about:blank"})
	if !errors.Is(err, ErrCapacity) {
		t.Fatalf("third Create: %v, want ErrCapacity", err)
	}
	for _, s := range []*Session{a, b} {
		if st := s.Status().State; st != StateReady {
			t.Fatalf("existing session %s is %s after a refused Create", s.ID(), st)
		}
	}

	if err := m.Close(context.Background(), a.ID()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	got, err := m.Get(a.ID())
	if err != nil {
		t.Fatalf("Get after close: %v", err)
	}
	if snap := got.Status(); snap.State != StateClosed || snap.TerminalReason != ReasonClosedByUser {
		t.Fatalf("closed snapshot: %s/%q", snap.State, snap.TerminalReason)
	}
	if _, err := a.OpenProducer(dispatch.KindHuman, "t", nil); !errors.Is(err, ErrNotReady) {
		t.Fatalf("OpenProducer on closed session: %v", err)
	}
	if _, _, err := a.Subscribe("vp8"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Subscribe on closed session: %v", err)
	}
	if err := a.Navigate(context.Background(), "about:blank"); !errors.Is(err, ErrNotReady) {
		t.Fatalf("Navigate on closed session: %v", err)
	}
	// A closed session does not hold a slot.
	c := create(t, m)

	// The janitor drops the terminal snapshot after the TTL.
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := m.Get(a.ID()); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("closed session still listed 5 s after a 300 ms TTL")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(m.List()); n != 2 {
		t.Fatalf("List has %d sessions, want the 2 live ones", n)
	}
	for _, s := range []*Session{b, c} {
		if st := s.Status().State; st != StateReady {
			t.Fatalf("live session %s is %s after the janitor ran", s.ID(), st)
		}
	}
}

func TestIdleReclaim(t *testing.T) {
	m, _ := newManager(t, Config{IdleReclaim: 300 * time.Millisecond})
	idle, driven := create(t, m), create(t, m)
	p, err := driven.OpenProducer(dispatch.KindHuman, "t", func(action.StateEvent) {})
	if err != nil {
		t.Fatalf("OpenProducer: %v", err)
	}

	snap := waitState(t, idle, StateClosed, 10*time.Second)
	if snap.TerminalReason != ReasonIdleReclaimed {
		t.Fatalf("idle session reason %q, want %q", snap.TerminalReason, ReasonIdleReclaimed)
	}
	// The driven one outlives several idle periods while it has a producer.
	time.Sleep(time.Second)
	if st := driven.Status().State; st != StateReady {
		t.Fatalf("session with a producer is %s", st)
	}
	p.Close()
	snap = waitState(t, driven, StateClosed, 10*time.Second)
	if snap.TerminalReason != ReasonIdleReclaimed {
		t.Fatalf("released session reason %q", snap.TerminalReason)
	}
}

// groupAlive lists live (non-zombie) processes in process group pgid.
func groupAlive(pgid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		var state string
		var ppid, pg int
		if _, err := fmt.Sscanf(s[i+2:], "%s %d %d", &state, &ppid, &pg); err != nil {
			continue
		}
		if pg == pgid && state != "Z" {
			out = append(out, pid)
		}
	}
	return out
}

// Without a way to relaunch Chromium, a browser crash ends its sessions
// (failed, browser_crashed) at once, and the manager says no browser runs.
func TestBrowserCrashWithoutRelaunchFails(t *testing.T) {
	m, first := newManager(t, Config{})
	a, b := create(t, m), create(t, m)
	if !m.BrowserUp() {
		t.Fatal("BrowserUp false with a running browser")
	}

	oldPID := first.PID()
	if err := syscall.Kill(oldPID, syscall.SIGKILL); err != nil {
		t.Fatalf("kill chromium: %v", err)
	}
	killed := time.Now()
	for _, s := range []*Session{a, b} {
		snap := waitState(t, s, StateFailed, time.Second-time.Since(killed))
		if snap.TerminalReason != ReasonBrowserCrashed {
			t.Fatalf("session %s reason %q, want %q", s.ID(), snap.TerminalReason, ReasonBrowserCrashed)
		}
	}
	t.Logf("sessions failed %v after the kill", time.Since(killed).Round(time.Millisecond))
	if m.BrowserUp() {
		t.Error("BrowserUp true after the crash")
	}
	if _, err := m.Create(context.Background(), CreateOptions{URL: "about:blank"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Create without a browser: %v, want ErrUnavailable", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(groupAlive(oldPID)) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("crashed chromium left processes: %v", groupAlive(oldPID))
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The failed snapshots stay readable.
	if got, err := m.Get(a.ID()); err != nil || got.Status().State != StateFailed {
		t.Fatalf("failed session not readable: %v", err)
	}
}
