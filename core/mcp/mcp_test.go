package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeBackend records calls and answers from a table.
type fakeBackend struct {
	mu       sync.Mutex
	reqs     []agent.Request
	sessions []string
	human    []humanCall
	created  []string

	results  map[string]*agent.Result // by command
	errs     map[string]error         // by command
	humanErr error
}

type humanCall struct {
	session, reason string
	timeout         time.Duration
}

func newFake() *fakeBackend {
	return &fakeBackend{results: map[string]*agent.Result{}, errs: map[string]error{}}
}

func (f *fakeBackend) ListSessions(context.Context) ([]SessionInfo, error) {
	return []SessionInfo{{ID: "s1", State: "ready", Title: "Example", URL: "https://example.com/"}}, nil
}

func (f *fakeBackend) CreateSession(_ context.Context, url string) (SessionInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, url)
	return SessionInfo{ID: "s2", State: "starting", URL: url}, nil
}

func (f *fakeBackend) Agent(_ context.Context, id string, r agent.Request) (*agent.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, r)
	f.sessions = append(f.sessions, id)
	if err := f.errs[r.Command]; err != nil {
		return nil, err
	}
	if res := f.results[r.Command]; res != nil {
		return res, nil
	}
	return &agent.Result{OK: true, Command: r.Command, PageRevision: 7, ActionRevision: 3, Summary: r.Command + " ok"}, nil
}

func (f *fakeBackend) RequestHuman(_ context.Context, id, reason string, timeout time.Duration) (HumanResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.human = append(f.human, humanCall{id, reason, timeout})
	if f.humanErr != nil {
		return HumanResult{}, f.humanErr
	}
	return HumanResult{Status: "done", By: "alice", Note: "logged in"}, nil
}

func (f *fakeBackend) last(t *testing.T) (string, agent.Request) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("the backend got no request")
	}
	return f.sessions[len(f.sessions)-1], f.reqs[len(f.reqs)-1]
}

func (f *fakeBackend) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

var wantTools = []string{
	"browser_back", "browser_check", "browser_click", "browser_cookies", "browser_dialog", "browser_eval", "browser_fill", "browser_forward",
	"browser_get", "browser_hover", "browser_is", "browser_navigate", "browser_press", "browser_reload",
	"browser_screenshot", "browser_scroll", "browser_select", "browser_snapshot", "browser_storage", "browser_tabs", "browser_type",
	"browser_uncheck", "browser_upload", "browser_wait", "request_human", "session_create", "sessions_list",
}

// connectInMemory runs NewServer(b) and a client over in-memory transports.
func connectInMemory(t *testing.T, b Backend) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := NewServer(b, "test").Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Wait()
	})
	return cs
}

// connectHTTP serves HTTPHandler over httptest with a client of its own;
// newBackend picks the backend.
func connectHTTP(t *testing.T, newBackend func(*http.Request) (Backend, error), header http.Header, opts *mcp.ClientSessionOptions) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(HTTPHandler(newBackend, "test"))
	tr := &http.Transport{}
	hc := &http.Client{Transport: headerRT{tr, header}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(context.Background(),
		&mcp.StreamableClientTransport{Endpoint: srv.URL, HTTPClient: hc, MaxRetries: -1}, opts)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		tr.CloseIdleConnections()
		srv.Close()
	})
	return cs
}

type headerRT struct {
	rt http.RoundTripper
	h  http.Header
}

func (h headerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h.h {
		if k == "Host" {
			r.Host = v[0]
			continue
		}
		r.Header[k] = v
	}
	return h.rt.RoundTrip(r)
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func text(t *testing.T, res *mcp.CallToolResult) string {
	t.Helper()
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	if len(parts) == 0 {
		t.Fatalf("no text content in %+v", res.Content)
	}
	return strings.Join(parts, "\n")
}

func checkTools(t *testing.T, cs *mcp.ClientSession) {
	t.Helper()
	lt, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
		if len(tool.Description) < 20 {
			t.Errorf("%s: description %q too short", tool.Name, tool.Description)
		}
		sch, ok := tool.InputSchema.(map[string]any)
		if !ok || sch["type"] != "object" {
			t.Errorf("%s: input schema %#v", tool.Name, tool.InputSchema)
			continue
		}
		props, _ := sch["properties"].(map[string]any)
		if tool.Name == "sessions_list" { // takes nothing
			continue
		}
		if len(props) == 0 {
			t.Errorf("%s: no properties", tool.Name)
		}
		for name, p := range props {
			if d, _ := p.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s.%s: no description", tool.Name, name)
			}
		}
		if strings.HasPrefix(tool.Name, "browser_") || tool.Name == "request_human" {
			req, _ := sch["required"].([]any)
			if !slices.Contains(req, any("session")) {
				t.Errorf("%s: session not required: %v", tool.Name, req)
			}
		}
		if tool.Name == "browser_click" {
			for _, p := range []string{"session", "ref", "selector", "role", "name", "x", "y", "double", "actionId"} {
				if props[p] == nil {
					t.Errorf("browser_click: no %s property", p)
				}
			}
			if d := props["ref"].(map[string]any)["description"].(string); !strings.Contains(d, "browser_snapshot") || !strings.Contains(d, "@e12") {
				t.Errorf("ref description %q", d)
			}
		}
		if tool.Name == "browser_get" {
			if enum, _ := props["what"].(map[string]any)["enum"].([]any); len(enum) != 7 {
				t.Errorf("browser_get what enum %v", enum)
			}
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, wantTools) {
		t.Errorf("tools\n got %v\nwant %v", names, wantTools)
	}
}

// exercise runs the common scenario against a client bound to f.
func exercise(t *testing.T, cs *mcp.ClientSession, f *fakeBackend) {
	checkTools(t, cs)

	// Snapshot: the text, with the page revision.
	f.results["snapshot"] = &agent.Result{OK: true, Command: "snapshot", PageRevision: 42, Summary: "3 nodes, 1 refs",
		Data: map[string]any{"text": "- heading \"Hello\"\n- button \"Go\" [ref=e3]", "snapshot": map[string]any{"nodes": 3}}}
	res := call(t, cs, "browser_snapshot", map[string]any{"session": "s1", "interactive": true, "maxDepth": 4})
	if res.IsError {
		t.Fatalf("snapshot error: %s", text(t, res))
	}
	got := text(t, res)
	if !strings.Contains(got, `button "Go" [ref=e3]`) || !strings.Contains(got, "pageRevision: 42") {
		t.Errorf("snapshot text %q", got)
	}
	if strings.Contains(got, `"nodes"`) {
		t.Errorf("snapshot text carries the raw tree: %q", got)
	}
	if id, r := f.last(t); id != "s1" || r.Command != "snapshot" || !r.Interactive || r.MaxDepth != 4 {
		t.Errorf("snapshot request %q %+v", id, r)
	}

	// Click by ref, with an actionId.
	res = call(t, cs, "browser_click", map[string]any{"session": "s1", "ref": "e3", "actionId": "a-1"})
	if res.IsError {
		t.Fatalf("click error: %s", text(t, res))
	}
	if _, r := f.last(t); !(r.Command == "click" && r.Ref == "e3" && r.ActionID == "a-1" && r.X == nil && r.Selector == "") {
		t.Errorf("click request %+v", r)
	}
	if got := text(t, res); !strings.Contains(got, "click ok") || !strings.Contains(got, "pageRevision: 7") {
		t.Errorf("click text %q", got)
	}
	call(t, cs, "browser_click", map[string]any{"session": "s1", "x": 10.5, "y": 20, "double": true})
	if _, r := f.last(t); r.Command != "dblclick" || r.X == nil || *r.X != 10.5 || r.Y == nil || *r.Y != 20 {
		t.Errorf("dblclick request %+v", r)
	}

	// A refusal is a tool result with the code first.
	f.errs["click"] = errcode.New(errcode.StaleRef, `ref "e3" is stale`).WithHint("take a new snapshot")
	res = call(t, cs, "browser_click", map[string]any{"session": "s1", "ref": "@e3"})
	if !res.IsError {
		t.Fatal("stale_ref came back without IsError")
	}
	if got := text(t, res); !strings.HasPrefix(got, `stale_ref: ref "e3" is stale`) || !strings.Contains(got, "hint: take a new snapshot") {
		t.Errorf("error text %q", got)
	}
	delete(f.errs, "click")
	// An error of an unknown kind does not leak.
	f.errs["press"] = errors.New("dial tcp 10.0.0.1: secret detail")
	res = call(t, cs, "browser_press", map[string]any{"session": "s1", "key": "Control+a"})
	if got := text(t, res); !res.IsError || !strings.HasPrefix(got, "internal:") || strings.Contains(got, "secret") {
		t.Errorf("internal error %v %q", res.IsError, got)
	}
	delete(f.errs, "press")

	// Screenshot: an image of the right MIME type.
	img := []byte("\xff\xd8\xff\xe0fakejpeg")
	f.results["screenshot"] = &agent.Result{OK: true, Command: "screenshot", PageRevision: 1, Summary: "11 bytes",
		Data: map[string]any{"mimeType": "image/jpeg", "base64": base64.StdEncoding.EncodeToString(img)}}
	res = call(t, cs, "browser_screenshot", map[string]any{"session": "s1", "format": "jpeg"})
	if res.IsError {
		t.Fatalf("screenshot error: %s", text(t, res))
	}
	var ic *mcp.ImageContent
	for _, c := range res.Content {
		if c, ok := c.(*mcp.ImageContent); ok {
			ic = c
		}
	}
	if ic == nil || ic.MIMEType != "image/jpeg" || string(ic.Data) != string(img) {
		t.Errorf("screenshot content %+v", res.Content)
	}
	if _, r := f.last(t); r.Command != "screenshot" || r.Format != "jpeg" {
		t.Errorf("screenshot request %+v", r)
	}

	// Schema validation: a bad enum is refused before the backend.
	n := f.count()
	res = call(t, cs, "browser_screenshot", map[string]any{"session": "s1", "format": "gif"})
	if !res.IsError || f.count() != n || !strings.HasPrefix(text(t, res), "invalid_argument: ") {
		t.Errorf("format gif: IsError %v %q, backend calls %d→%d", res.IsError, text(t, res), n, f.count())
	}

	// request_human passes reason and timeout.
	res = call(t, cs, "request_human", map[string]any{"session": "s1", "reason": "Solve the CAPTCHA", "timeoutMs": 60000})
	if res.IsError || !strings.Contains(text(t, res), `"status":"done"`) {
		t.Errorf("request_human %v %q", res.IsError, text(t, res))
	}
	f.mu.Lock()
	h := f.human[len(f.human)-1]
	f.mu.Unlock()
	if h != (humanCall{"s1", "Solve the CAPTCHA", time.Minute}) {
		t.Errorf("request_human call %+v", h)
	}
	f.humanErr = errcode.New(errcode.NotSupported, "not yet")
	res = call(t, cs, "request_human", map[string]any{"session": "s1", "reason": "log in"})
	if !res.IsError || !strings.HasPrefix(text(t, res), "not_supported:") {
		t.Errorf("request_human not supported %v %q", res.IsError, text(t, res))
	}
	f.humanErr = nil

	// sessions_list gives the sessions.
	res = call(t, cs, "sessions_list", nil)
	if got := text(t, res); res.IsError || !strings.Contains(got, `"id":"s1"`) {
		t.Errorf("sessions_list %q", got)
	}
}

func TestInMemory(t *testing.T) {
	f := newFake()
	exercise(t, connectInMemory(t, f), f)
}

func TestHTTP(t *testing.T) {
	f := newFake()
	cs := connectHTTP(t, func(*http.Request) (Backend, error) { return f, nil }, nil, nil)
	exercise(t, cs, f)
}

// TestHTTPOlderProtocol: clients of the 2025 protocol (with initialize and
// Mcp-Session-Id) work against the stateless handler too.
func TestHTTPOlderProtocol(t *testing.T) {
	for _, v := range []string{"2025-06-18", "2025-11-25"} {
		t.Run(v, func(t *testing.T) {
			f := newFake()
			cs := connectHTTP(t, func(*http.Request) (Backend, error) { return f, nil }, nil, &mcp.ClientSessionOptions{ProtocolVersion: v})
			if got := cs.InitializeResult().ProtocolVersion; got != v {
				t.Errorf("negotiated %q", got)
			}
			exercise(t, cs, f)
		})
	}
}

// TestToolsMapping checks each tool's request to the backend.
func TestToolsMapping(t *testing.T) {
	f := newFake()
	cs := connectInMemory(t, f)
	f64 := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	for _, c := range []struct {
		tool string
		args map[string]any
		want agent.Request
	}{
		{"browser_fill", map[string]any{"session": "s", "ref": "e1", "text": "hi", "actionId": "x"}, agent.Request{Command: "fill", Ref: "e1", Text: "hi", ActionID: "x"}},
		{"browser_type", map[string]any{"session": "s", "text": "abc"}, agent.Request{Command: "type", Text: "abc"}},
		{"browser_press", map[string]any{"session": "s", "key": "Enter"}, agent.Request{Command: "press", Key: "Enter"}},
		{"browser_select", map[string]any{"session": "s", "selector": "#c", "value": "FR"}, agent.Request{Command: "select", Selector: "#c", Value: "FR"}},
		{"browser_check", map[string]any{"session": "s", "role": "checkbox", "name": "Agree"}, agent.Request{Command: "check", Role: "checkbox", Name: "Agree"}},
		{"browser_uncheck", map[string]any{"session": "s", "ref": "e2"}, agent.Request{Command: "uncheck", Ref: "e2"}},
		{"browser_hover", map[string]any{"session": "s", "x": 1, "y": 2}, agent.Request{Command: "hover", X: f64(1), Y: f64(2)}},
		{"browser_scroll", map[string]any{"session": "s", "deltaY": 600}, agent.Request{Command: "scroll", DeltaY: 600}},
		{"browser_navigate", map[string]any{"session": "s", "url": "https://example.com/", "timeoutMs": 30000}, agent.Request{Command: "navigate", URL: "https://example.com/", TimeoutMs: 30000}},
		{"browser_back", map[string]any{"session": "s", "actionId": "b"}, agent.Request{Command: "back", ActionID: "b"}},
		{"browser_forward", map[string]any{"session": "s"}, agent.Request{Command: "forward"}},
		{"browser_reload", map[string]any{"session": "s"}, agent.Request{Command: "reload"}},
		{"browser_wait", map[string]any{"session": "s", "selector": "#d", "state": "hidden", "timeoutMs": 500}, agent.Request{Command: "wait", Selector: "#d", What: "hidden", TimeoutMs: 500}},
		{"browser_wait", map[string]any{"session": "s", "text": "Done", "url": "/ok", "urlPattern": "ok$"}, agent.Request{Command: "wait", Text: "Done", URL: "/ok", Value: "ok$"}},
		{"browser_get", map[string]any{"session": "s", "ref": "e4", "what": "attr", "attr": "href"}, agent.Request{Command: "get", Ref: "e4", What: "attr", Attr: "href"}},
		{"browser_get", map[string]any{"session": "s", "what": "count", "selector": "li"}, agent.Request{Command: "get", What: "count", Selector: "li"}},
		{"browser_is", map[string]any{"session": "s", "ref": "e5", "what": "enabled"}, agent.Request{Command: "is", Ref: "e5", What: "enabled"}},
		{"browser_dialog", map[string]any{"session": "s", "accept": true, "promptText": "yes"}, agent.Request{Command: "dialog", Accept: true, PromptText: "yes"}},
		{"browser_snapshot", map[string]any{"session": "s", "compact": true, "selector": "main", "ref": "@e9", "includeValues": true}, agent.Request{Command: "snapshot", Compact: true, Selector: "main", Ref: "@e9", IncludeValues: true}},
		{"browser_wait", map[string]any{"session": "s", "load": "networkidle", "function": "() => ok"}, agent.Request{Command: "wait", Load: "networkidle", Function: "() => ok"}},
		{"browser_upload", map[string]any{"session": "s", "ref": "e3", "files": []any{"cv.pdf", "a.png"}}, agent.Request{Command: "upload", Ref: "e3", Files: []string{"cv.pdf", "a.png"}}},
		{"browser_tabs", map[string]any{"session": "s"}, agent.Request{Command: "tabs"}},
		{"browser_tabs", map[string]any{"session": "s", "op": "new", "url": "https://example.com/"}, agent.Request{Command: "tabs", URL: "https://example.com/", Op: "new"}},
		{"browser_tabs", map[string]any{"session": "s", "op": "close", "index": 1}, agent.Request{Command: "tabs", Op: "close", Index: i(1)}},
		{"browser_cookies", map[string]any{"session": "s", "reveal": true}, agent.Request{Command: "cookies", Reveal: true}},
		{"browser_cookies", map[string]any{"session": "s", "op": "set", "name": "a", "value": "b", "sameSite": "Lax"}, agent.Request{Command: "cookies", Op: "set", Cookie: &agent.CookieInput{Name: "a", Value: "b", SameSite: "Lax"}}},
		{"browser_storage", map[string]any{"session": "s", "op": "set", "area": "session", "key": "k", "value": "v"}, agent.Request{Command: "storage", Value: "v", Op: "set", Area: "session", Key: "k"}},
		{"browser_eval", map[string]any{"session": "s", "expression": "document.title"}, agent.Request{Command: "eval", Expression: "document.title"}},
	} {
		res := call(t, cs, c.tool, c.args)
		if res.IsError {
			t.Errorf("%s: %s", c.tool, text(t, res))
			continue
		}
		id, got := f.last(t)
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(c.want)
		if id != "s" || string(gj) != string(wj) {
			t.Errorf("%s: session %q request\n got %s\nwant %s", c.tool, id, gj, wj)
		}
	}

	// A missing session is refused before the backend.
	n := f.count()
	res := call(t, cs, "browser_click", map[string]any{"ref": "e1"})
	if !res.IsError || f.count() != n {
		t.Errorf("click without session: IsError %v, calls %d→%d", res.IsError, n, f.count())
	}

	// A wait that ran out is a result, marked not ok.
	f.results["wait"] = &agent.Result{OK: false, Command: "wait", Summary: "timed out", Data: map[string]any{"text": false}}
	res = call(t, cs, "browser_wait", map[string]any{"session": "s", "text": "never"})
	if got := text(t, res); res.IsError || !strings.HasPrefix(got, "not ok: timed out") || !strings.Contains(got, `{"text":false}`) {
		t.Errorf("wait timeout %v %q", res.IsError, got)
	}

	// session_create passes the URL.
	res = call(t, cs, "session_create", map[string]any{"url": "https://example.org/"})
	f.mu.Lock()
	created := slices.Clone(f.created)
	f.mu.Unlock()
	if res.IsError || !strings.Contains(text(t, res), `"id":"s2"`) || !slices.Equal(created, []string{"https://example.org/"}) {
		t.Errorf("session_create %q %v", text(t, res), created)
	}
}

// TestHTTPBindsEachRequest: every request is bound to its own user's
// backend, and an unauthenticated one gets 401 JSON.
func TestHTTPBindsEachRequest(t *testing.T) {
	alice, bob := newFake(), newFake()
	newBackend := func(r *http.Request) (Backend, error) {
		switch r.Header.Get("X-User") {
		case "alice":
			return alice, nil
		case "bob":
			return bob, nil
		}
		return nil, errors.New("who are you")
	}
	ca := connectHTTP(t, newBackend, http.Header{"X-User": {"alice"}, "Host": {"tabcast.example.com"}}, nil) // as behind a proxy
	cb := connectHTTP(t, newBackend, http.Header{"X-User": {"bob"}}, nil)
	call(t, ca, "browser_click", map[string]any{"session": "s1", "ref": "e1"})
	call(t, cb, "browser_click", map[string]any{"session": "s1", "ref": "e2"})
	call(t, ca, "browser_press", map[string]any{"session": "s1", "key": "Tab"})
	if alice.count() != 2 || bob.count() != 1 {
		t.Fatalf("alice %d, bob %d calls", alice.count(), bob.count())
	}
	if _, r := bob.last(t); r.Ref != "e2" {
		t.Errorf("bob got %+v", r)
	}

	srv := httptest.NewServer(HTTPHandler(newBackend, "test"))
	defer srv.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("POST", srv.URL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		OK    bool `json:"ok"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusUnauthorized || body.OK || body.Error.Code != "permission_denied" ||
		!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		t.Errorf("unauthenticated: %d %+v %q", resp.StatusCode, body, resp.Header.Get("Content-Type"))
	}
}

// TestStdio runs StdioMain over pipes; it ends cleanly when the client
// leaves.
func TestStdio(t *testing.T) {
	f := newFake()
	cr, sw := io.Pipe() // server → client
	sr, cw := io.Pipe() // client → server
	done := make(chan error, 1)
	go func() {
		done <- StdioMain(context.Background(), f, "test", sr, sw)
		_ = sw.Close()
	}()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil).Connect(context.Background(),
		&mcp.IOTransport{Reader: cr, Writer: cw}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkTools(t, cs)
	res := call(t, cs, "browser_click", map[string]any{"session": "s1", "ref": "e3"})
	if res.IsError {
		t.Fatal(text(t, res))
	}
	if _, r := f.last(t); r.Command != "click" || r.Ref != "e3" {
		t.Errorf("click request %+v", r)
	}
	_ = cs.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("StdioMain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("StdioMain did not end when the client left")
	}
}

// TestStdioContext: StdioMain ends when its context does.
func TestStdioContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	sr, cw := io.Pipe()
	defer cw.Close()
	done := make(chan error, 1)
	go func() { done <- StdioMain(ctx, newFake(), "test", sr, io.Discard) }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("StdioMain: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("StdioMain did not end with its context")
	}
}
