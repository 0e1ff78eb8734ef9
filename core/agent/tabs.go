package agent

// Tabs: list, new, switch, close.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/snapshot"
)

// Tab is a page of the session's browser context: the current one (the
// one streamed and driven), tabs opened with tabs new and popups the pages
// opened. Indices follow the order the session saw the tabs, so they stay
// put across switches.
type Tab struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	URL      string `json:"url"`
	Title    string `json:"title"`
	Current  bool   `json:"current"`
	OpenerID string `json:"openerId,omitempty"`
}

// listTabs lists the session's tabs.
func (d *driver) listTabs() []Tab {
	out := []Tab{}
	for i, t := range d.s.Tabs() {
		out = append(out, Tab{Index: i, ID: t.ID, URL: snapshot.RedactTokens(t.URL), Title: snapshot.RedactTokens(t.Title),
			Current: t.Current, OpenerID: t.OpenerID})
	}
	return out
}

// findTab resolves the request's index or tabId.
func findTab(tabs []Tab, r Request) (Tab, error) {
	if (r.Index == nil) == (r.TabID == "") {
		return Tab{}, errorf(errcode.InvalidArgument, false, "give index or tabId from tabs list", "which tab?")
	}
	for _, t := range tabs {
		if (r.Index != nil && t.Index == *r.Index) || (r.TabID != "" && t.ID == r.TabID) {
			return t, nil
		}
	}
	return Tab{}, errorf(errcode.NotFound, true, "list them with tabs list", "no such tab")
}

// tabErr maps the session's tab errors to the API's codes.
func tabErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNoTab):
		return errorf(errcode.NotFound, true, "list them with tabs list", "no such tab (it closed)")
	case errors.Is(err, session.ErrTooManyTabs):
		return errorf(errcode.TooManyTabs, true, "close a tab first (tabs close)", "the session holds at most %d tabs", session.MaxTabs)
	case errors.Is(err, session.ErrLastTab):
		return errorf(errcode.Unsupported, false, "close the session instead: DELETE /api/v1/sessions/{id}", "the session's last tab cannot be closed")
	case errors.Is(err, session.ErrNotReady):
		return errorf(errcode.NotReady, true, "", "the session is not ready")
	}
	return err
}

// tabs: list, new, switch, close. The current tab is the one streamed to
// viewers and driven by people and agents; new opens a tab and switches to
// it (unless background), switch changes the current tab (pageRevision
// rises: refs and coordinates of the old page are stale), close closes a
// tab (the current one is left first for its opener or the tab used most
// recently).
func (d *driver) tabs(ctx context.Context, r Request) (*Result, error) {
	op := strings.ToLower(r.Op)
	if op == "" {
		op = "list"
	}
	switch op {
	case "list":
		tabs := d.listTabs()
		return &Result{OK: true, Summary: fmt.Sprintf("%d tab(s)", len(tabs)), Data: map[string]any{"tabs": tabs}}, nil
	case "new":
		t, err := d.s.TabNew(ctx, r.URL, r.Background)
		if err != nil {
			return nil, tabErr(err)
		}
		sum := "opened a new tab"
		if t.Current {
			sum += " and switched to it: " + d.loaded(ctx)
		} else {
			sum += " in the background"
		}
		return &Result{OK: true, Summary: sum, Data: map[string]any{"tabId": t.ID, "tabs": d.listTabs()}}, nil
	case "switch", "close":
		tabs := d.listTabs()
		t, err := findTab(tabs, r)
		if err != nil {
			return nil, err
		}
		if op == "switch" {
			if t.Current {
				return &Result{OK: true, Summary: "already the current tab", Data: map[string]any{"tabs": tabs}}, nil
			}
			if err := d.s.SwitchPage(ctx, t.ID); err != nil {
				return nil, tabErr(err)
			}
			return &Result{OK: true, Summary: fmt.Sprintf("switched to tab %d: %s", t.Index, d.loaded(ctx)), Data: map[string]any{"tabs": d.listTabs()}}, nil
		}
		if err := d.s.CloseTab(ctx, t.ID); err != nil {
			return nil, tabErr(err)
		}
		d.sv.snap.Forget(tabKey(t.ID)) // its refs go with it
		return &Result{OK: true, Summary: fmt.Sprintf("closed tab %d", t.Index), Data: map[string]any{"tabs": d.listTabs()}}, nil
	}
	return nil, errorf(errcode.InvalidArgument, false, "op: list, new, switch, close", "tabs %q", r.Op)
}

// tabKey names a tab for the Snapshotter, which keys pages by target id.
type tabKey string

func (k tabKey) Target() *chromedp.Target { return &chromedp.Target{TargetID: target.ID(k)} }

// loaded waits until the current page's document has loaded, so the
// agent's next snapshot sees it.
func (d *driver) loaded(ctx context.Context) string {
	for ctx.Err() == nil {
		var state string
		if pg := d.s.Page(); pg != nil && pg.Evaluate(ctx, "document.readyState", &state) == nil && state == "complete" {
			return "loaded"
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "still loading"
}
