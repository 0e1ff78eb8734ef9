package session

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/input"
)

// tabPages serves two pages that log their keys, and one that opens a
// popup.
func tabPages(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	for _, name := range []string{"a", "b"} {
		mux.HandleFunc("/"+name, func(w http.ResponseWriter, _ *http.Request) {
			fmt.Fprintf(w, `<!doctype html><title>%s</title><body><script>window.log = [];
addEventListener('keydown', e => log.push('down ' + e.key)); addEventListener('keyup', e => log.push('up ' + e.key));</script>`, name)
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func tabPolicy() input.Policy {
	pol := input.DefaultPolicy()
	pol.DenyPrivate = false // the fixtures are on loopback
	return pol
}

func createAt(t *testing.T, m *Manager, url string) *Session {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := m.Create(ctx, CreateOptions{URL: url})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

// submitWait submits one control action and waits for its final ack.
func submitWait(t *testing.T, p *Producer, seq uint64, a action.Action) action.Ack {
	t.Helper()
	acks := make(chan action.Ack, 4)
	p.Submit(action.Envelope{ControlSeq: seq, ActionID: fmt.Sprint("a", seq), Action: a}, func(k action.Ack) { acks <- k })
	for {
		select {
		case k := <-acks:
			if k.Status != action.StatusAccepted {
				return k
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no final ack for %s", a.Kind)
		}
	}
}

func TestSwitchPage(t *testing.T) {
	m, _ := newManager(t, Config{Input: tabPolicy()})
	srv := tabPages(t) // after newManager: closed before its leak check
	s := createAt(t, m, srv.URL+"/a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var mu sync.Mutex
	var states []PageStatePayload
	p, err := s.OpenProducer(dispatch.KindHuman, "ann", func(ev action.StateEvent) {
		if ps, ok := ev.Payload.(PageStatePayload); ok {
			mu.Lock()
			states = append(states, ps)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	pageA, revA := s.Page(), p.PageRevision()

	// Shift held on page A is lifted there when the session switches.
	if k := submitWait(t, p, 1, action.Action{Kind: action.KeyDown, Key: "Shift", Code: "ShiftLeft", Modifiers: action.ModShift}); k.Status != action.StatusCompleted {
		t.Fatalf("key_down: %+v", k)
	}
	start := time.Now()
	info, err := s.TabNew(ctx, srv.URL+"/b", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("TabNew (create, attach, load, switch): %v", time.Since(start).Round(time.Millisecond))
	var log []string
	if err := pageA.Evaluate(ctx, "window.log", &log); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(log, "up Shift") {
		t.Errorf("page A's keys after the switch: %v (want Shift released)", log)
	}
	if s.Page() == pageA || s.Page().TargetID() != info.ID || !info.Current {
		t.Fatalf("current page after TabNew: %s, info %+v", s.Page().TargetID(), info)
	}
	revB := p.PageRevision()
	if revB <= revA {
		t.Errorf("pageRevision %d after the switch, was %d", revB, revA)
	}
	// The viewers hear of the new page.
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		last := states[len(states)-1]
		mu.Unlock()
		if strings.HasSuffix(last.URL, "/b") && last.Title == "b" && last.PageRevision == revB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("last page_state %+v, want /b, title b, revision %d", last, revB)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if snap := s.Status(); snap.Tabs != 2 || !strings.HasSuffix(snap.URL, "/b") || snap.PageRevision != revB {
		t.Errorf("snapshot: tabs %d url %q revision %d", snap.Tabs, snap.URL, snap.PageRevision)
	}
	// A coordinate action aimed at page A is stale now; keys go to page B.
	if k := submitWait(t, p, 2, action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "left", ClickCount: 1, PageRevision: revA}); k.Code != errcode.StalePage {
		t.Errorf("pointer_down on the old revision: %+v", k)
	}
	if k := submitWait(t, p, 2, action.Action{Kind: action.KeyDown, Key: "x", Code: "KeyX"}); k.Status != action.StatusCompleted {
		t.Fatalf("key_down x: %+v", k)
	}
	if err := s.Page().Evaluate(ctx, "window.log", &log); err != nil || !slices.Contains(log, "down x") {
		t.Errorf("page B's keys: %v %v", log, err)
	}

	// Back to A, then close it: the session shows B again.
	if err := s.SwitchPage(ctx, pageA.TargetID()); err != nil {
		t.Fatal(err)
	}
	if s.Page() != pageA || p.PageRevision() <= revB {
		t.Errorf("after switching back: page %s revision %d", s.Page().TargetID(), p.PageRevision())
	}
	if err := s.SwitchPage(ctx, "nope"); err != ErrNoTab {
		t.Errorf("switch to an unknown tab: %v", err)
	}
	if err := s.CloseTab(ctx, pageA.TargetID()); err != nil {
		t.Fatal(err)
	}
	if s.Page().TargetID() != info.ID || len(s.Tabs()) != 1 {
		t.Errorf("after closing the current tab: %s, tabs %+v", s.Page().TargetID(), s.Tabs())
	}
	if err := s.CloseTab(ctx, info.ID); err != ErrLastTab {
		t.Errorf("closing the last tab: %v", err)
	}
}

func TestPopupsInBackgroundAndLastTabClosed(t *testing.T) {
	m, b := newManager(t, Config{Input: tabPolicy(), PopupsInBackground: true})
	srv := tabPages(t)
	s := createAt(t, m, srv.URL+"/a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := s.Page()
	yes := true
	if _, err := cdp.Call(ctx, first.Target(), runtime.Evaluate, runtime.EvaluateParams{Expression: `window.open('/b', '_blank', 'popup'), 1`, UserGesture: &yes}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Tabs()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("popup not seen: %+v", s.Tabs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if s.Page() != first || s.Tabs()[1].OpenerID != first.TargetID() {
		t.Errorf("a background popup became current: %+v", s.Tabs())
	}
	// The pages close from outside, the current last: the session ends.
	if err := b.CloseTarget(ctx, s.Tabs()[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseTarget(ctx, first.TargetID()); err != nil {
		t.Fatal(err)
	}
	if snap := waitState(t, s, StateClosed, 10*time.Second); snap.TerminalReason != ReasonPageClosed {
		t.Errorf("terminal reason %q, want %s", snap.TerminalReason, ReasonPageClosed)
	}
}

// A popup to a host the policy refuses is closed (its first request may
// leave before the popup's interception is in place); the session stays
// on its opener.
func TestRefusedPopupClosed(t *testing.T) {
	pol := tabPolicy()
	pol.DenyHosts = []string{"localhost"}
	m, _ := newManager(t, Config{Input: pol})
	srv := tabPages(t)
	s := createAt(t, m, srv.URL+"/a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := s.Page()
	refused := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1) + "/b"
	yes := true
	if _, err := cdp.Call(ctx, first.Target(), runtime.Evaluate, runtime.EvaluateParams{Expression: `window.w = window.open(` + fmt.Sprintf("%q", refused) + `), 1`, UserGesture: &yes}); err != nil {
		t.Fatal(err)
	}
	// The opener sees its popup closed (so it did open, and was closed).
	deadline := time.Now().Add(10 * time.Second)
	for {
		var closed bool
		if err := first.Evaluate(ctx, "!!(window.w && window.w.closed)", &closed); err == nil && closed {
			break
		}
		if tabs := s.Tabs(); len(tabs) > 1 && tabs[1].Title == "b" {
			t.Fatalf("the refused page loaded in a tab: %+v", tabs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refused popup is still open: %+v", s.Tabs())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if tabs := s.Tabs(); len(tabs) != 1 || s.Page() != first {
		t.Fatalf("after the refused popup: tabs %+v, current %s", tabs, s.Page().TargetID())
	}
}
