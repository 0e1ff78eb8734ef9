package agent

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
)

// refFor finds the ref of the line of a snapshot's text that contains
// what (e.g. `button "count"`).
func refFor(t *testing.T, res *Result, what string) string {
	t.Helper()
	text := fmt.Sprint(res.Data.(map[string]any)["text"])
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, what) {
			if m := regexp.MustCompile(`\[ref=(e\d+)\]`).FindStringSubmatch(line); m != nil {
				return m[1]
			}
		}
	}
	t.Fatalf("no ref for %s in:\n%s", what, text)
	return ""
}

func (e *env) tabList(t *testing.T) []Tab {
	t.Helper()
	return e.must(t, Request{Command: "tabs"}).Data.(map[string]any)["tabs"].([]Tab)
}

func current(tabs []Tab) Tab {
	for _, x := range tabs {
		if x.Current {
			return x
		}
	}
	return Tab{Index: -1}
}

// waitTabs polls tabs list until ok holds.
func (e *env) waitTabs(t *testing.T, what string, ok func([]Tab) bool) []Tab {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		tabs := e.tabList(t)
		if ok(tabs) {
			return tabs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: tabs %+v", what, tabs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTabsSwitch(t *testing.T) {
	e := setup(t, "/tabs")
	tabs := e.tabList(t)
	if len(tabs) != 1 || !tabs[0].Current || !strings.HasSuffix(tabs[0].URL, "/tabs") {
		t.Fatalf("tabs: %+v", tabs)
	}
	first := e.must(t, Request{Command: "snapshot", Interactive: true})
	oldRef, oldRev := refFor(t, first, `button "count"`), first.PageRevision

	// tabs new: a real second tab, now the current one.
	start := time.Now()
	res := e.must(t, Request{Command: "tabs", Op: "new", URL: e.srv.URL + "/popup"})
	t.Logf("tabs new + switch + load: %v", time.Since(start).Round(time.Millisecond))
	tabs = res.Data.(map[string]any)["tabs"].([]Tab)
	if len(tabs) != 2 || current(tabs).Index != 1 || !strings.HasSuffix(tabs[1].URL, "/popup") || res.PageRevision <= oldRev {
		t.Fatalf("after tabs new: %+v (revision %d, before %d)", tabs, res.PageRevision, oldRev)
	}
	if snap := e.must(t, Request{Command: "snapshot", Interactive: true}); !strings.Contains(fmt.Sprint(snap.Data.(map[string]any)["text"]), "Close me") {
		t.Errorf("snapshot is not of the new tab: %v", snap.Data.(map[string]any)["text"])
	}
	if sn := e.s.Status(); sn.Tabs != 2 || !strings.HasSuffix(sn.URL, "/popup") || sn.PageRevision != res.PageRevision {
		t.Errorf("session snapshot after tabs new: tabs %d url %q revision %d (want %d)", sn.Tabs, sn.URL, sn.PageRevision, res.PageRevision)
	}
	// Refs and coordinates of the first page are stale now.
	e.wantCode(t, Request{Command: "click", Ref: oldRef}, "stale_ref")
	p, err := e.s.OpenProducer(dispatch.KindAgent, "stale", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	acks := make(chan action.Ack, 4)
	p.Submit(action.Envelope{ControlSeq: 1, ActionID: "old", Action: action.Action{Kind: action.PointerDown, X: 0.5, Y: 0.5, Button: "left", ClickCount: 1, PageRevision: oldRev}},
		func(a action.Ack) { acks <- a })
	if a := <-acks; a.Status != action.StatusRejected || a.Code != errcode.StalePage {
		t.Errorf("pointer_down with the first page's revision: %+v", a)
	}

	// Back to the first tab: a fresh ref clicks there.
	res = e.must(t, Request{Command: "tabs", Op: "switch", Index: ptr(0)})
	if cur := current(res.Data.(map[string]any)["tabs"].([]Tab)); cur.Index != 0 {
		t.Fatalf("after switch: current %+v", cur)
	}
	e.wantCode(t, Request{Command: "click", Ref: oldRef}, "stale_ref") // the revision moved on
	snap := e.must(t, Request{Command: "snapshot", Interactive: true})
	e.must(t, Request{Command: "click", Ref: refFor(t, snap, `button "count"`)})
	if got := e.text(t, "#inc"); got != "clicked 1" {
		t.Errorf("first page after the click: %q", got)
	}
	e.must(t, Request{Command: "tabs", Op: "switch", TabID: tabs[0].ID}) // already current
	e.wantCode(t, Request{Command: "tabs", Op: "switch"}, "invalid_argument")
	e.wantCode(t, Request{Command: "tabs", Op: "switch", TabID: "nope"}, "not_found")

	// Policy and bounds.
	e.wantCode(t, Request{Command: "tabs", Op: "new", URL: "file:///etc/passwd"}, errcode.NavigationBlocked)
	for i := len(e.tabList(t)); i < session.MaxTabs; i++ {
		res := e.must(t, Request{Command: "tabs", Op: "new", Background: true})
		if cur := current(res.Data.(map[string]any)["tabs"].([]Tab)); cur.Index != 0 {
			t.Fatalf("background tab became current: %+v", cur)
		}
	}
	e.wantCode(t, Request{Command: "tabs", Op: "new", Background: true}, errcode.TooManyTabs)
	for len(e.tabList(t)) > 2 {
		e.must(t, Request{Command: "tabs", Op: "close", Index: ptr(2)})
	}

	// Closing the current tab shows the one used most recently.
	res = e.must(t, Request{Command: "tabs", Op: "close", Index: ptr(0)})
	tabs = res.Data.(map[string]any)["tabs"].([]Tab)
	if len(tabs) != 1 || !tabs[0].Current || !strings.HasSuffix(tabs[0].URL, "/popup") {
		t.Fatalf("after closing the current tab: %+v", tabs)
	}
	if title := e.must(t, Request{Command: "get", What: "title"}).Data.(map[string]any)["title"]; title != "Popup" {
		t.Errorf("title after close: %v", title)
	}
	e.wantCode(t, Request{Command: "tabs", Op: "close", Index: ptr(0)}, errcode.Unsupported)
	e.wantCode(t, Request{Command: "tabs", Op: "fly"}, "invalid_argument")
}

func ptr[T any](v T) *T { return &v }

func TestTabsFollowPopups(t *testing.T) {
	e := setup(t, "/tabs")
	opener := e.tabList(t)[0]
	before := e.must(t, Request{Command: "get", What: "title"}).PageRevision

	// A target=_blank link clicked with real input: the session follows.
	e.must(t, Request{Command: "click", Selector: "#blank"})
	tabs := e.waitTabs(t, "follow the target=_blank tab", func(tabs []Tab) bool {
		c := current(tabs)
		return len(tabs) == 2 && c.Index == 1 && strings.HasSuffix(c.URL, "/popup")
	})
	if tabs[1].OpenerID != opener.ID {
		t.Errorf("popup's opener: %+v", tabs[1])
	}
	e.must(t, Request{Command: "wait", Text: "Close me"})
	if r := e.must(t, Request{Command: "get", What: "title"}); r.PageRevision <= before || r.Data.(map[string]any)["title"] != "Popup" {
		t.Errorf("on the popup: %+v (revision before %d)", r, before)
	}
	// window.close() in the popup: back to the opener.
	e.must(t, Request{Command: "click", Selector: "#bye"})
	e.waitTabs(t, "back to the opener after window.close()", func(tabs []Tab) bool {
		return len(tabs) == 1 && tabs[0].Current && tabs[0].ID == opener.ID
	})
	if title := e.must(t, Request{Command: "get", What: "title"}).Data.(map[string]any)["title"]; title != "Tabs" {
		t.Errorf("title after the popup closed: %v", title)
	}
	if sn := e.s.Status(); sn.Title != "Tabs" && !strings.HasSuffix(sn.URL, "/tabs") {
		t.Errorf("session snapshot after the popup closed: %q %q", sn.URL, sn.Title)
	}

	// window.open: followed too; tabs close of it goes back to its opener.
	e.must(t, Request{Command: "click", Selector: "#pop"})
	tabs = e.waitTabs(t, "follow window.open", func(tabs []Tab) bool {
		return len(tabs) == 2 && current(tabs).ID != opener.ID
	})
	e.must(t, Request{Command: "tabs", Op: "close", TabID: current(tabs).ID})
	if c := current(e.tabList(t)); c.ID != opener.ID {
		t.Errorf("after closing the popup: current %+v", c)
	}
	e.must(t, Request{Command: "click", Selector: "#inc"})
	if got := e.text(t, "#inc"); got != "clicked 1" {
		t.Errorf("opener after the popup: %q", got)
	}
}
