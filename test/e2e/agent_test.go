package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// agentPages are the agent fixtures: a login form and a page that
// re-renders its button. Each keeps a log of clicks in #log.
func agentPages(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/login", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Sign in</title><body>
<h1>Sign in</h1>
<form id=f><label>Email <input id=email type=email name=email></label>
<label>Password <input id=pw type=password name=pw></label>
<button type=submit>Log in</button></form><p id=log></p>
<script>
document.getElementById('f').addEventListener('submit', (e) => {
  e.preventDefault();
  const email = document.getElementById('email').value, pw = document.getElementById('pw').value;
  document.body.innerHTML = pw === 'hunter2-secret' ? '<h1>Welcome ' + email.replace(/</g,'') + '</h1>' : '<h1>Wrong password</h1>';
  document.title = 'Home';
});
</script>`)
	})
	mux.HandleFunc("/dynamic", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Dynamic</title><body>
<div id=box><button id=go>Go</button></div>
<button id=rerender>Re-render</button>
<p id=log></p>
<script>
const log = (s) => { document.getElementById('log').textContent += s + ';'; };
function bind() { document.getElementById('go').addEventListener('click', () => log('go')); }
bind();
document.getElementById('rerender').addEventListener('click', () => {
  log('rerender');
  document.getElementById('box').innerHTML = '<button id=go>Go</button>';
  bind();
});
</script>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type agentResult struct {
	OK             bool            `json:"ok"`
	Duplicate      bool            `json:"duplicate"`
	ActionRevision uint64          `json:"actionRevision"`
	PageRevision   uint64          `json:"pageRevision"`
	Summary        string          `json:"summary"`
	Data           json.RawMessage `json:"data"`
	Error          *struct {
		Code        string `json:"code"`
		Message     string `json:"message"`
		Hint        string `json:"hint"`
		Recoverable bool   `json:"recoverable"`
	} `json:"error"`
}

// agentDo runs one agent command and returns the HTTP status and result.
func agentDo(t *testing.T, a *harness.Appliance, id string, req map[string]any) (int, agentResult) {
	t.Helper()
	b, _ := json.Marshal(req)
	st, body, _ := call{method: "POST", path: "/api/v1/sessions/" + id + "/agent", body: string(b), token: a.Token}.do(t, a)
	var r agentResult
	if err := json.Unmarshal([]byte(body), &r); err != nil {
		t.Fatalf("agent %v: %d %s", req["command"], st, body)
	}
	return st, r
}

func mustAgent(t *testing.T, a *harness.Appliance, id string, req map[string]any) agentResult {
	t.Helper()
	st, r := agentDo(t, a, id, req)
	if st != 200 || r.Error != nil {
		t.Fatalf("agent %v: HTTP %d %+v", req, st, r.Error)
	}
	return r
}

type snapNode struct {
	Ref      string      `json:"ref"`
	Role     string      `json:"role"`
	Name     string      `json:"name"`
	Value    *string     `json:"value"`
	Children []*snapNode `json:"children"`
}

// refOf finds the ref of the node with role and a name containing name.
func refOf(t *testing.T, r agentResult, role, name string) string {
	t.Helper()
	var d struct {
		Text     string `json:"text"`
		Snapshot struct {
			Nodes []*snapNode `json:"nodes"`
		} `json:"snapshot"`
	}
	if err := json.Unmarshal(r.Data, &d); err != nil {
		t.Fatal(err)
	}
	var walk func([]*snapNode) string
	walk = func(ns []*snapNode) string {
		for _, n := range ns {
			if n.Role == role && strings.Contains(n.Name, name) && n.Ref != "" {
				return n.Ref
			}
			if ref := walk(n.Children); ref != "" {
				return ref
			}
		}
		return ""
	}
	ref := walk(d.Snapshot.Nodes)
	if ref == "" {
		t.Fatalf("no %s %q in the snapshot:\n%s", role, name, d.Text)
	}
	return ref
}

func snapText(t *testing.T, r agentResult) string {
	var d struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(r.Data, &d)
	return d.Text
}

// TestAgentDrivesByRefs: an agent logs in through a form by refs, a stale
// ref never clicks anything, and a repeated actionId does nothing twice.
func TestAgentDrivesByRefs(t *testing.T) {
	p := pages(t)
	ap := agentPages(t)
	a, s := startWithSession(t, p.URL+"/solid?c=224466")

	mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": ap.URL + "/login"})
	snap := mustAgent(t, a, s.ID, map[string]any{"command": "snapshot", "interactive": true})
	text := snapText(t, snap)
	for _, want := range []string{`textbox "Email" [ref=`, `textbox "Password" [ref=`, `button "Log in" [ref=`} {
		if !strings.Contains(text, want) {
			t.Errorf("interactive snapshot lacks %s:\n%s", want, text)
		}
	}
	email, pw, submit := refOf(t, snap, "textbox", "Email"), refOf(t, snap, "textbox", "Password"), refOf(t, snap, "button", "Log in")
	f1 := mustAgent(t, a, s.ID, map[string]any{"command": "fill", "ref": "@" + email, "text": "ann@example.com"})
	f2 := mustAgent(t, a, s.ID, map[string]any{"command": "fill", "ref": pw, "text": "hunter2-secret"})
	if f2.ActionRevision <= f1.ActionRevision {
		t.Errorf("action revisions do not grow: %d then %d", f1.ActionRevision, f2.ActionRevision)
	}
	// The password never shows, even when values are asked for.
	vals := mustAgent(t, a, s.ID, map[string]any{"command": "snapshot", "includeValues": true})
	if raw := string(vals.Data); strings.Contains(raw, "hunter2") || !strings.Contains(raw, "ann@example.com") {
		t.Errorf("snapshot with values: password shown or email missing:\n%s", snapText(t, vals))
	}
	got := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "value", "ref": pw})
	if strings.Contains(string(got.Data), "hunter2") {
		t.Errorf("get value of a password field: %s", got.Data)
	}
	mustAgent(t, a, s.ID, map[string]any{"command": "click", "ref": submit})
	w := mustAgent(t, a, s.ID, map[string]any{"command": "wait", "text": "Welcome", "timeoutMs": 10000})
	if !w.OK {
		t.Fatalf("wait for Welcome: %s", w.Data)
	}
	after := snapText(t, mustAgent(t, a, s.ID, map[string]any{"command": "snapshot"}))
	if !strings.Contains(after, `heading "Welcome ann@example.com"`) {
		t.Errorf("after login:\n%s", after)
	}
	// A wait that runs out is a result saying what held, not a bare error.
	st, w := agentDo(t, a, s.ID, map[string]any{"command": "wait", "text": "never there", "timeoutMs": 500})
	if st != 200 || w.OK || !strings.Contains(string(w.Data), `"met":false`) {
		t.Errorf("timed-out wait: %d %+v %s", st, w.Error, w.Data)
	}

	// Stale refs.
	mustAgent(t, a, s.ID, map[string]any{"command": "navigate", "url": ap.URL + "/dynamic"})
	snap = mustAgent(t, a, s.ID, map[string]any{"command": "snapshot", "interactive": true})
	goRef, rr := refOf(t, snap, "button", "Go"), refOf(t, snap, "button", "Re-render")
	mustAgent(t, a, s.ID, map[string]any{"command": "click", "ref": rr})
	st, r := agentDo(t, a, s.ID, map[string]any{"command": "click", "ref": goRef})
	if st != 409 || r.Error == nil || r.Error.Code != "stale_ref" || !r.Error.Recoverable || r.Error.Hint == "" {
		t.Errorf("click on a re-rendered element: %d %+v", st, r.Error)
	}
	log := mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "#log"})
	if !strings.Contains(string(log.Data), `"rerender;"`) {
		t.Errorf("click log after a stale ref: %s (want exactly rerender;)", log.Data)
	}
	// A ref of an older page revision is stale too.
	mustAgent(t, a, s.ID, map[string]any{"command": "reload"})
	if st, r := agentDo(t, a, s.ID, map[string]any{"command": "click", "ref": rr}); st != 409 || r.Error == nil || r.Error.Code != "stale_ref" {
		t.Errorf("ref after a reload: %d %+v", st, r.Error)
	}

	// Idempotency: the same actionId runs once.
	snap = mustAgent(t, a, s.ID, map[string]any{"command": "snapshot", "interactive": true})
	goRef = refOf(t, snap, "button", "Go")
	c1 := mustAgent(t, a, s.ID, map[string]any{"command": "click", "ref": goRef, "actionId": "once-1"})
	c2 := mustAgent(t, a, s.ID, map[string]any{"command": "click", "ref": goRef, "actionId": "once-1"})
	if c1.Duplicate || !c2.Duplicate || c2.ActionRevision != c1.ActionRevision {
		t.Errorf("repeated actionId: first %+v, second %+v", c1, c2)
	}
	log = mustAgent(t, a, s.ID, map[string]any{"command": "get", "what": "text", "selector": "#log"})
	if !strings.Contains(string(log.Data), `"go;"`) {
		t.Errorf("click log after a repeated actionId: %s (want one go)", log.Data)
	}

	// Error codes of the agent API.
	for _, c := range []struct {
		req    map[string]any
		status int
		code   string
	}{
		{map[string]any{"command": "fly"}, 422, "unknown_command"},
		{map[string]any{"command": "click"}, 422, "invalid_argument"},
		{map[string]any{"command": "click", "ref": "e99999"}, 409, "stale_ref"},
		{map[string]any{"command": "click", "selector": "#nothing-here"}, 404, "not_found"},
		{map[string]any{"command": "click", "selector": "button"}, 409, "ambiguous"},
		{map[string]any{"command": "navigate", "url": "http://169.254.169.254/"}, 403, "navigation_blocked"},
		{map[string]any{"command": "press", "key": "Hyper+x"}, 422, "invalid_argument"},
		{map[string]any{"command": "dialog", "accept": true}, 409, "no_dialog"},
	} {
		st, r := agentDo(t, a, s.ID, c.req)
		if st != c.status || r.Error == nil || r.Error.Code != c.code {
			t.Errorf("%v: %d %+v; want %d %s", c.req, st, r.Error, c.status, c.code)
		}
	}
	if st, _ := agentDo(t, a, "s-nope", map[string]any{"command": "snapshot"}); st != 404 {
		t.Errorf("unknown session: %d", st)
	}
	st, body, _ := call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/agent", body: `{"command":"snapshot"}`}.do(t, a)
	if st != 401 || !strings.Contains(body, `"recoverable":false`) {
		t.Errorf("unauthenticated agent call: %d %s", st, body)
	}
	// Screenshots come back as images.
	shot := mustAgent(t, a, s.ID, map[string]any{"command": "screenshot", "format": "jpeg"})
	if !strings.Contains(string(shot.Data), `"mimeType":"image/jpeg"`) {
		t.Errorf("screenshot: %.200s", shot.Data)
	}

	_ = a.Stop(10 * time.Second)
	logs, _ := os.ReadFile(a.LogPath)
	if strings.Contains(string(logs), "hunter2") {
		t.Error("the typed password is in the appliance log")
	}
}
