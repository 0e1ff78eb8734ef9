package session

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/cdpproxy"
)

// memConn is a CDP client's socket in memory.
type memConn struct {
	in, out chan []byte
	closed  chan struct{}
	once    sync.Once
	mu      sync.Mutex
	code    int
	reason  string
}

func newMemConn() *memConn {
	return &memConn{in: make(chan []byte, 16), out: make(chan []byte, 1024), closed: make(chan struct{})}
}

func (c *memConn) ReadMessage(ctx context.Context) ([]byte, error) {
	select {
	case b := <-c.in:
		return b, nil
	case <-c.closed:
		return nil, io.EOF
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *memConn) WriteMessage(ctx context.Context, b []byte) error {
	select {
	case c.out <- b:
		return nil
	case <-c.closed:
		return io.EOF
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *memConn) Close(code int, reason string) error {
	c.once.Do(func() {
		c.mu.Lock()
		c.code, c.reason = code, reason
		c.mu.Unlock()
		close(c.closed)
	})
	return nil
}

// cdpClient speaks CDP over a memConn, as Playwright would.
type cdpClient struct {
	t      *testing.T
	c      *memConn
	mu     sync.Mutex
	next   int64
	wait   map[int64]chan cdpAnswer
	events []cdpAnswer
	done   chan struct{}
}

type cdpAnswer struct {
	ID        int64           `json:"id"`
	Method    string          `json:"method"`
	Params    json.RawMessage `json:"params"`
	Result    json.RawMessage `json:"result"`
	SessionID string          `json:"sessionId"`
	Error     *struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func newCDPClient(t *testing.T, c *memConn) *cdpClient {
	cl := &cdpClient{t: t, c: c, wait: map[int64]chan cdpAnswer{}, done: make(chan struct{})}
	go func() {
		defer close(cl.done)
		for {
			select {
			case b := <-c.out:
				var a cdpAnswer
				if err := json.Unmarshal(b, &a); err != nil {
					t.Errorf("proxy sent no JSON: %s", b)
					continue
				}
				cl.mu.Lock()
				if a.Method != "" {
					cl.events = append(cl.events, a)
				} else if ch := cl.wait[a.ID]; ch != nil {
					ch <- a
				}
				cl.mu.Unlock()
			case <-c.closed:
				return
			}
		}
	}()
	return cl
}

func (cl *cdpClient) call(session, method string, params any) cdpAnswer {
	cl.t.Helper()
	cl.mu.Lock()
	cl.next++
	id := cl.next
	ch := make(chan cdpAnswer, 1)
	cl.wait[id] = ch
	cl.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	b, _ := json.Marshal(msg)
	cl.c.in <- b
	select {
	case a := <-ch:
		if a.SessionID != session {
			cl.t.Errorf("%s: answer on session %q, want %q", method, a.SessionID, session)
		}
		return a
	case <-time.After(20 * time.Second):
		cl.t.Fatalf("%s: no answer", method)
		return cdpAnswer{}
	}
}

func (cl *cdpClient) ok(session, method string, params any) json.RawMessage {
	cl.t.Helper()
	a := cl.call(session, method, params)
	if a.Error != nil {
		cl.t.Fatalf("%s: %d %s", method, a.Error.Code, a.Error.Message)
	}
	return a.Result
}

func (cl *cdpClient) refused(session, method string, params any, code string) {
	cl.t.Helper()
	a := cl.call(session, method, params)
	if a.Error == nil || !strings.Contains(a.Error.Message, code) || !strings.HasPrefix(a.Error.Message, method+":") {
		cl.t.Errorf("%s: %s, want a %s error naming the method", method, a.Result, code)
	}
}

func (cl *cdpClient) eventsOf(method string) []cdpAnswer {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	var out []cdpAnswer
	for _, e := range cl.events {
		if e.Method == method {
			out = append(out, e)
		}
	}
	return out
}

// eval evaluates expr on session and decodes its value.
func (cl *cdpClient) eval(session, expr string, out any) {
	cl.t.Helper()
	res := cl.ok(session, "Runtime.evaluate", map[string]any{"expression": expr, "returnByValue": true})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
	}
	if err := json.Unmarshal(res, &r); err != nil || json.Unmarshal(r.Result.Value, out) != nil {
		cl.t.Fatalf("evaluate %s: %s", expr, res)
	}
}

// cdpPage logs the mouse and keys it sees.
func cdpPage(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>cdp</title><body style="margin:0"><script>window.log = [];
for (const k of ['mousedown', 'mouseup', 'keydown', 'input']) addEventListener(k, e => log.push(k + ' ' + (e.key || e.button || '')));
</script><input id=i style="width:300px;height:40px">`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestCDPProxyScope drives a session through the CDP proxy as Playwright
// connects (auto-attach with waitForDebuggerOnStart), beside a second
// session that must stay invisible and out of reach, and checks the
// refusals, the policy, input through the dispatcher and the release of
// a held button when the client goes.
func TestCDPProxyScope(t *testing.T) {
	pol := tabPolicy()
	pol.DenyHosts = []string{"169.254.0.0/16"}
	m, _ := newManager(t, Config{Input: pol})
	page := cdpPage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sA, err := m.Create(ctx, CreateOptions{URL: page.URL, Control: ControlExclusive})
	if err != nil {
		t.Fatal(err)
	}
	sB := createAt(t, m, page.URL)
	aTarget, bTarget := sA.Page().TargetID(), sB.Page().TargetID()

	srv := cdpproxy.New(cdpproxy.Config{Limits: cdpproxy.Limits{InputDeadline: 1}}, m, nil, cdpproxy.Deps{})
	release, err := srv.Admit(sA.ID())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	conn := newMemConn()
	served := make(chan error, 1)
	go func() {
		served <- srv.Serve(context.Background(), sA.ID(), conn, cdpproxy.Client{Name: "test", User: "u"})
	}()
	cl := newCDPClient(t, conn)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if a := sA.Status().Agents; len(a) == 1 && a[0] == "cdp:test" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the client is not among the session's agents: %v", sA.Status().Agents)
		}
	}

	cl.ok("", "Browser.getVersion", nil)
	if got := string(cl.ok("", "Target.getBrowserContexts", nil)); got != `{"browserContextIds":[]}` {
		t.Errorf("getBrowserContexts: %s", got)
	}
	var tl struct {
		TargetInfos []struct {
			TargetID string `json:"targetId"`
			Type     string `json:"type"`
		} `json:"targetInfos"`
	}
	if err := json.Unmarshal(cl.ok("", "Target.getTargets", nil), &tl); err != nil {
		t.Fatal(err)
	}
	sawA := false
	for _, ti := range tl.TargetInfos {
		if ti.TargetID == bTarget {
			t.Errorf("getTargets shows the other session's page")
		}
		sawA = sawA || ti.TargetID == aTarget
	}
	if !sawA {
		t.Errorf("getTargets: %+v, want the session's page %s", tl.TargetInfos, aTarget)
	}

	cl.ok("", "Target.setDiscoverTargets", map[string]any{"discover": true})
	cl.ok("", "Target.setAutoAttach", map[string]any{"autoAttach": true, "waitForDebuggerOnStart": true, "flatten": true})
	var session string
	for _, ev := range cl.eventsOf("Target.attachedToTarget") {
		var a struct {
			SessionID  string `json:"sessionId"`
			TargetInfo struct {
				TargetID string `json:"targetId"`
			} `json:"targetInfo"`
			Waiting bool `json:"waitingForDebugger"`
		}
		_ = json.Unmarshal(ev.Params, &a)
		if a.TargetInfo.TargetID == bTarget {
			t.Errorf("auto-attach attached the other session's page")
		}
		if a.TargetInfo.TargetID == aTarget {
			session = a.SessionID
		}
	}
	for _, ev := range cl.eventsOf("Target.targetCreated") {
		if strings.Contains(string(ev.Params), bTarget) {
			t.Errorf("discovery shows the other session's page")
		}
	}
	if session == "" {
		t.Fatalf("no attachedToTarget for the session's page; events %+v", cl.events)
	}
	cl.ok(session, "Runtime.runIfWaitingForDebugger", nil)
	var two int
	cl.eval(session, "1+1", &two)
	if two != 2 {
		t.Errorf("1+1 = %d", two)
	}

	// Out of reach: the other session's target, and the refused methods.
	cl.refused("", "Target.attachToTarget", map[string]any{"targetId": bTarget, "flatten": true}, "not_allowed")
	cl.refused("", "Target.getTargetInfo", map[string]any{"targetId": bTarget}, "not_allowed")
	cl.refused("", "Target.closeTarget", map[string]any{"targetId": bTarget}, "not_allowed")
	cl.refused("", "Storage.getCookies", map[string]any{"browserContextId": sB.Page().BrowserContextID()}, "not_allowed")
	for _, meth := range []string{"Browser.close", "Browser.crash", "Browser.crashGpuProcess", "Target.createBrowserContext",
		"Target.exposeDevToolsProtocol", "Browser.grantPermissions", "SystemInfo.getInfo", "Tethering.bind"} {
		cl.refused("", meth, map[string]any{}, "not_allowed")
	}
	cl.refused("", "Target.disposeBrowserContext", map[string]any{"browserContextId": sA.Page().BrowserContextID()}, "not_allowed")
	cl.refused("NOT-A-SESSION", "Runtime.evaluate", map[string]any{"expression": "1"}, "not_allowed")
	cl.refused(session, "Input.setIgnoreInputEvents", map[string]any{"ignore": true}, "not_allowed")
	cl.refused(session, "Page.navigate", map[string]any{"url": "http://169.254.169.254/latest/meta-data/"}, "navigation_blocked")

	// Input through the dispatcher: a key and a click reach the page.
	cl.ok(session, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": 100, "y": 20})
	cl.ok(session, "Input.dispatchMouseEvent", map[string]any{"type": "mousePressed", "x": 100, "y": 20, "button": "left", "clickCount": 1})
	cl.ok(session, "Input.dispatchMouseEvent", map[string]any{"type": "mouseReleased", "x": 100, "y": 20, "button": "left", "clickCount": 1})
	cl.ok(session, "Input.insertText", map[string]any{"text": "hi"})
	cl.ok(session, "Input.dispatchKeyEvent", map[string]any{"type": "keyDown", "key": "a", "code": "KeyA", "text": "a"})
	cl.ok(session, "Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": "a", "code": "KeyA"})
	var val string
	cl.eval(session, "document.getElementById('i').value", &val)
	if val != "hia" {
		t.Errorf("the field holds %q, want hia", val)
	}

	// A person takes control: the client's input waits, then fails.
	if err := sA.TakeControl("bob"); err != nil {
		t.Fatal(err)
	}
	cl.refused(session, "Input.insertText", map[string]any{"text": "x"}, "human_in_control")
	// A click sent at once (move, press, release, as Playwright does):
	// the move fails at the deadline, the person lets go right then, and
	// the press and release sent with it fail too — the page sees no
	// click the client was told failed.
	cl.ok(session, "Runtime.evaluate", map[string]any{"expression": "log.length = 0"})
	answers := make(chan cdpAnswer, 2)
	for _, typ := range []string{"mousePressed", "mouseReleased"} {
		go func() {
			time.Sleep(50 * time.Millisecond) // after the move
			if typ == "mouseReleased" {
				time.Sleep(50 * time.Millisecond)
			}
			answers <- cl.call(session, "Input.dispatchMouseEvent", map[string]any{"type": typ, "x": 100, "y": 200, "button": "left", "clickCount": 1})
		}()
	}
	cl.refused(session, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": 100, "y": 200}, "human_in_control")
	sA.ReleaseControl("bob", true)
	for range 2 {
		if a := <-answers; a.Error == nil || !strings.Contains(a.Error.Message, "human_in_control") {
			t.Errorf("a press or release sent with a move that failed human_in_control: %s %v, want human_in_control", a.Result, a.Error)
		}
	}
	var clickLog []string
	cl.eval(session, "log", &clickLog)
	if strings.Contains(strings.Join(clickLog, ","), "mousedown") {
		t.Errorf("the page saw %v after the client's click failed human_in_control", clickLog)
	}
	// A new command after the answer is a new intent: it goes through.
	cl.ok(session, "Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": 100, "y": 20})

	// A button held when the client goes is released.
	cl.ok(session, "Runtime.evaluate", map[string]any{"expression": "log.length = 0"})
	cl.ok(session, "Input.dispatchMouseEvent", map[string]any{"type": "mousePressed", "x": 100, "y": 200, "button": "left", "clickCount": 1})
	_ = conn.Close(1000, "bye")
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the client closed")
	}
	if a := sA.Status().Agents; len(a) != 0 {
		t.Errorf("agents after the client left: %v", a)
	}
	deadline := time.Now().Add(time.Second)
	var log []string
	for {
		if err := sA.Page().Evaluate(context.Background(), "log", &log); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.Join(log, ","), "mouseup") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(strings.Join(log, ","), "mousedown") || !strings.Contains(strings.Join(log, ","), "mouseup") {
		t.Errorf("page log %v: want the held button pressed and released within 1 s of the disconnect", log)
	}
	<-cl.done

	// A message over the limit closes the connection with 1009.
	small := cdpproxy.New(cdpproxy.Config{Limits: cdpproxy.Limits{MaxMessageBytes: 1024}}, m, nil, cdpproxy.Deps{})
	conn = newMemConn()
	go func() { served <- small.Serve(context.Background(), sA.ID(), conn, cdpproxy.Client{Name: "test"}) }()
	conn.in <- []byte(`{"id":1,"method":"Runtime.evaluate","params":{"expression":"` + strings.Repeat("x", 2048) + `"}}`)
	select {
	case <-served:
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not end after an oversized message")
	}
	conn.mu.Lock()
	defer conn.mu.Unlock()
	if conn.code != 1009 || !strings.Contains(conn.reason, "limit") {
		t.Errorf("closed with %d %q, want 1009 and a reason naming the limit", conn.code, conn.reason)
	}
}
