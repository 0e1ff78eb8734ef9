package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// waitSession polls GET /api/v1/sessions/{id} until ok says yes or d passed.
func waitSession(ctx context.Context, t *testing.T, a *harness.Appliance, id string, d time.Duration, ok func(lifecycleSnap) bool) lifecycleSnap {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		s, err := getSession(ctx, a, id)
		if err == nil && ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s after %v: %+v %v\n%s", id, d, s, err, a.LogTail(3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// chromiumProcs maps the appliance's Chromium processes to their
// --user-data-dir; browser marks the browser process (no --type=).
func chromiumProcs(a *harness.Appliance) (procs map[int]string, browsers []int) {
	procs = map[int]string{}
	for _, pid := range harness.Descendants(a.Cmd.Process.Pid) {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		// Chromium retitles its child processes: their command line is
		// one string, the arguments joined by spaces (no path here has one).
		args := strings.FieldsFunc(string(raw), func(r rune) bool { return r == 0 || r == ' ' })
		dir, typed := "", false
		for _, arg := range args {
			if v, ok := strings.CutPrefix(arg, "--user-data-dir="); ok {
				dir = v
			}
			if strings.HasPrefix(arg, "--type=") {
				typed = true
			}
		}
		if dir == "" {
			continue
		}
		procs[pid] = dir
		if !typed {
			browsers = append(browsers, pid)
		}
	}
	return procs, browsers
}

// TestLifecycleChromiumCrash SIGKILLs Chromium's browser process: its
// session is brought back (same id) on a relaunched Chromium with a fresh
// profile within 5 s, nothing of the old Chromium survives, and a new
// session streams. (crash_test.go watches the viewers through it.)
func TestLifecycleChromiumCrash(t *testing.T) {
	p := pages(t)
	a, def := startWithSession(t, p.URL+"/anim", "sessions.max=2")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old, browsers := chromiumProcs(a)
	if len(browsers) != 1 {
		t.Fatalf("want one Chromium browser process, found %v (all: %v)", browsers, old)
	}
	oldDir := old[browsers[0]]
	if err := syscall.Kill(browsers[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitSession(ctx, t, a, def.ID, time.Second, func(s lifecycleSnap) bool { return s.State == "recovering" })
	waitSession(ctx, t, a, def.ID, 5*time.Second-time.Since(killed), func(s lifecycleSnap) bool { return s.State == "ready" })
	t.Logf("default session back %v after the kill", time.Since(killed).Round(time.Millisecond))

	deadline := time.Now().Add(5 * time.Second)
	for {
		var alive []int
		for pid := range old {
			if harness.Alive(pid) {
				alive = append(alive, pid)
			}
		}
		if len(alive) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("old Chromium processes alive 5 s after the crash: %v", alive)
		}
		time.Sleep(50 * time.Millisecond)
	}
	watchFrames(ctx, t, a, def.ID)

	n, err := postSession(ctx, a, p.URL+"/anim")
	if err != nil || n.State != "ready" {
		t.Fatalf("session after the crash: %+v %v\n%s", n, err, a.LogTail(3000))
	}
	watchFrames(ctx, t, a, n.ID)
	procs, browsers := chromiumProcs(a)
	if len(browsers) != 1 || procs[browsers[0]] == oldDir {
		t.Fatalf("want one relaunched Chromium with a fresh profile, found %v", procs)
	}
}

// TestLifecycleIdleReclaim: with sessions.idleReclaim=1s a session nobody
// watches is closed with idle_reclaimed; the appliance's default session
// is kept for whoever opens the panel next.
func TestLifecycleIdleReclaim(t *testing.T) {
	p := pages(t)
	a, def := startWithSession(t, p.URL+"/solid?c=336699", "sessions.idleReclaim=1s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	extra, err := postSession(ctx, a, p.URL+"/solid?c=993366")
	if err != nil {
		t.Fatal(err)
	}
	s := waitSession(ctx, t, a, extra.ID, 15*time.Second, func(s lifecycleSnap) bool { return s.State == "closed" || s.State == "failed" })
	if s.State != "closed" || s.TerminalReason != "idle_reclaimed" {
		t.Fatalf("idle session: %+v, want closed/idle_reclaimed", s)
	}
	if d, err := getSession(ctx, a, def.ID); err != nil || d.State != "ready" {
		t.Fatalf("default session after the idle time: %+v %v, want ready", d, err)
	}
}

// TestInputIdleReclaim: a watched session nobody acts on is warned, then
// closed (idle_reclaimed); one an agent keeps acting on stays.
func TestInputIdleReclaim(t *testing.T) {
	p := pages(t)
	a, _ := startWithSession(t, p.URL+"/solid?c=202020", "sessions.idleReclaim=0", "sessions.inputIdleWarn=1s", "sessions.inputIdleReclaim=4s")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	idle, err := postSession(ctx, a, p.URL+"/anim")
	if err != nil {
		t.Fatal(err)
	}
	busy, err := postSession(ctx, a, p.URL+"/anim")
	if err != nil {
		t.Fatal(err)
	}
	snapOf := func(id string) map[string]any {
		var out struct{ Session map[string]any }
		if err := a.Do(ctx, "GET", "/api/v1/sessions/"+id, "", &out); err != nil {
			t.Fatal(err)
		}
		return out.Session
	}
	start := time.Now()
	warned := false
	for time.Since(start) < 15*time.Second {
		mustAgent(t, a, busy.ID, map[string]any{"command": "press", "key": "Shift"})
		s := snapOf(idle.ID)
		if _, ok := s["reclaimAt"]; ok {
			warned = true
		}
		if s["state"] == "closed" {
			if s["terminalReason"] != "idle_reclaimed" {
				t.Errorf("closed with %v, want idle_reclaimed", s["terminalReason"])
			}
			t.Logf("reclaimed %v after creation (warned first: %v)", time.Since(start).Round(100*time.Millisecond), warned)
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if s := snapOf(idle.ID); s["state"] != "closed" {
		t.Fatalf("the idle session is %v after 15 s", s["state"])
	}
	if !warned {
		t.Error("no warning (reclaimAt) before the reclaim")
	}
	if s := snapOf(busy.ID); s["state"] != "ready" {
		t.Errorf("the session an agent acts on is %v, want ready", s["state"])
	}
}
