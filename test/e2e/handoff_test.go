package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestAgentAndPersonShareTheSession: in the shared policy an agent types
// while a person clicks through the panel; both complete, in one order.
func TestAgentAndPersonShareTheSession(t *testing.T) {
	in := startInteractive(t)
	const text = "agent-typed-text-42"
	var wg sync.WaitGroup
	var typed agentResult
	var typedStatus int
	wg.Go(func() {
		typedStatus, typed = agentDo(t, in.a, in.id, map[string]any{"command": "type", "selector": "#txt", "text": text})
	})
	for range 5 {
		in.click(t, 200, 150)
		time.Sleep(50 * time.Millisecond)
	}
	wg.Wait()
	if typedStatus != 200 || typed.Error != nil {
		t.Fatalf("agent type while a person clicks: %d %+v", typedStatus, typed.Error)
	}
	in.title(t, is("clicked:5"), 10*time.Second)
	got := mustAgent(t, in.a, in.id, map[string]any{"command": "get", "what": "value", "selector": "#txt"})
	if !strings.Contains(string(got.Data), text) {
		t.Errorf("typed text: %s, want %q", got.Data, text)
	}
	// The agent's next action comes after everything before it, people's too.
	next := mustAgent(t, in.a, in.id, map[string]any{"command": "press", "key": "End"})
	if next.ActionRevision <= typed.ActionRevision {
		t.Errorf("actionRevision did not grow: typed %d, next %d", typed.ActionRevision, next.ActionRevision)
	}
}

// TestHandoff: an agent asks for a person, the panel shows the reason, a
// person marks it done and the agent's wait returns; in the exclusive
// policy a person who takes control holds agents off until released.
func TestHandoff(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, fixturePage) }))
	t.Cleanup(srv.Close)
	p := pages(t)
	a, _ := startWithSession(t, p.URL+"/solid?c=102030")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var created struct{ Session struct{ ID string } }
	if err := a.Do(ctx, "POST", "/api/v1/sessions", `{"url":"`+srv.URL+`/","control":"exclusive"}`, &created); err != nil {
		t.Fatal(err)
	}
	id := created.Session.ID
	bctx := viewerBrowser(t)
	if err := a.OpenPanel(bctx, "admin", a.AdminPassword, "/?codec=vp8&session="+id); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEval(bctx, connState, func(s string) bool { return s == "connected" }, 20*time.Second); err != nil {
		t.Fatal(err)
	}

	// request_human → banner → Done → the agent's wait returns.
	type outcome struct {
		status int
		r      agentResult
	}
	done := make(chan outcome, 1)
	go func() {
		st, r := agentDo(t, a, id, map[string]any{"command": "request_human", "reason": "Solve the <b>captcha</b>", "timeoutMs": 60000})
		done <- outcome{st, r}
	}()
	reason, err := waitEval(bctx, `(() => { const b = document.querySelector('[data-testid="human-banner"]');
		return b && !b.hidden ? document.querySelector('[data-testid="human-reason"]').innerHTML : "" })()`,
		func(s string) bool { return s != "" }, 15*time.Second)
	if err != nil {
		t.Fatalf("no banner: %v", err)
	}
	if reason != "Solve the &lt;b&gt;captcha&lt;/b&gt;" {
		t.Errorf("banner reason rendered as %q (must be text, not HTML)", reason)
	}
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.querySelector('[data-testid="human-done"]').click(), true)`)); err != nil {
		t.Fatal(err)
	}
	select {
	case o := <-done:
		var d struct {
			Done bool
			By   string
		}
		_ = json.Unmarshal(o.r.Data, &d)
		if o.status != 200 || !o.r.OK || !d.Done || d.By != "admin" {
			t.Errorf("request_human: %d %+v %s", o.status, o.r.Error, o.r.Data)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the agent's wait did not return after Done")
	}
	if _, err := waitEval(bctx, `document.querySelector('[data-testid="human-banner"]').hidden`, func(b bool) bool { return b }, 10*time.Second); err != nil {
		t.Errorf("banner still shown: %v", err)
	}
	// A request nobody answers ends as a result, not an error.
	st, r := agentDo(t, a, id, map[string]any{"command": "request_human", "reason": "anyone?", "timeoutMs": 500})
	if st != 200 || r.OK || !strings.Contains(string(r.Data), `"done":false`) {
		t.Errorf("unanswered request_human: %d %+v %s", st, r.Error, r.Data)
	}

	// Take control in the panel: agents get human_in_control, reads still work.
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(document.querySelector('[data-testid="take-control"]').click(), true)`)); err != nil {
		t.Fatal(err)
	}
	if _, err := waitEval(bctx, `document.querySelector('[data-testid="take-control"]').dataset.holder`, func(s string) bool { return s == "admin" }, 10*time.Second); err != nil {
		t.Fatalf("control not taken: %v", err)
	}
	st, r = agentDo(t, a, id, map[string]any{"command": "click", "selector": "#cf"})
	if st != 409 || r.Error == nil || r.Error.Code != "human_in_control" || !r.Error.Recoverable {
		t.Errorf("agent click while a person holds control: %d %+v", st, r.Error)
	}
	mustAgent(t, a, id, map[string]any{"command": "snapshot", "interactive": true})
	// The lease survives the panel going away for a moment.
	if err := chromedp.Do(bctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if st, r := agentDo(t, a, id, map[string]any{"command": "press", "key": "End"}); st != 409 || r.Error == nil || r.Error.Code != "human_in_control" {
		t.Errorf("agent right after the panel left: %d %+v (the lease should hold 30 s)", st, r.Error)
	}
	// Release through the API: agents act again.
	if err := a.Do(ctx, "POST", "/api/v1/sessions/"+id+"/control", `{"action":"release"}`, nil); err != nil {
		t.Fatal(err)
	}
	mustAgent(t, a, id, map[string]any{"command": "press", "key": "End"})
	// A shared session has no control to take.
	if err := a.Do(ctx, "POST", "/api/v1/sessions/"+created.Session.ID+"/control", `{"action":"grab"}`, nil); err == nil || !strings.Contains(err.Error(), "invalid_argument") {
		t.Errorf("bad control action: %v", err)
	}
}
