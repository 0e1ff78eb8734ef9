package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tabcast/tabcast/test/harness"
)

// cdpFixtures are the pages the CDP clients drive, with the hits and
// events the tests check.
type cdpFixtures struct {
	*httptest.Server
	mu     sync.Mutex
	hits   map[string]int
	events []pageEvent
}

// pageEvent is a mouse event a /hold page reported: its kind and the
// page's clock (the same machine's) when it fired.
type pageEvent struct {
	kind string
	at   time.Time
}

func (f *cdpFixtures) hit(path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hits[path]
}

func (f *cdpFixtures) eventsOf(kind string) []pageEvent {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []pageEvent
	for _, e := range f.events {
		if e.kind == kind {
			out = append(out, e)
		}
	}
	return out
}

func cdpPages(t *testing.T) *cdpFixtures {
	f := &cdpFixtures{hits: map[string]int{}}
	mux := http.NewServeMux()
	count := func(r *http.Request) {
		f.mu.Lock()
		f.hits[r.URL.Path]++
		f.mu.Unlock()
	}
	mux.HandleFunc("/cdp-form", func(w http.ResponseWriter, r *http.Request) {
		count(r)
		// No caret (it blinks: the picture would never be still) and a
		// big button; the click turns the page orange and adds #done.
		fmt.Fprint(w, `<!doctype html><title>cdp form</title>
<style>html,body{margin:0;height:100%;background:#246}input{caret-color:transparent;font:20px sans-serif}
#go{position:absolute;left:100px;top:100px;width:300px;height:200px}#pop{position:absolute;left:500px;top:100px}</style>
<input id=name><button id=go>Go</button><button id=pop>Popup</button><p id=out></p>
<script>window.okLoaded=false;window.blockedLoaded=false;</script>
<script src="/ok.js"></script><script src="/blocked.js"></script>
<script>
document.getElementById('go').addEventListener('click', () => {
  document.body.style.background = '#c84';
  const d = document.createElement('div'); d.id = 'done';
  d.textContent = 'clicked ' + document.getElementById('name').value;
  document.body.appendChild(d);
});
document.getElementById('pop').addEventListener('click', () => { window.open('/solid?c=aa3300'); });
</script>`)
	})
	mux.HandleFunc("/ok.js", func(w http.ResponseWriter, r *http.Request) {
		count(r)
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, "window.okLoaded = true;")
	})
	mux.HandleFunc("/blocked.js", func(w http.ResponseWriter, r *http.Request) {
		count(r)
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, "window.blockedLoaded = true;")
	})
	mux.HandleFunc("/via-route", func(w http.ResponseWriter, r *http.Request) {
		count(r)
		fmt.Fprint(w, `<!doctype html><title>via route</title>`)
	})
	mux.HandleFunc("/solid", func(w http.ResponseWriter, r *http.Request) {
		c := r.URL.Query().Get("c")
		if strings.Trim(c, "0123456789abcdef") != "" {
			http.Error(w, "bad colour", 400)
			return
		}
		fmt.Fprintf(w, `<!doctype html><title>%s</title><style>html,body{margin:0;height:100%%;background:#%s}</style>`, c, c)
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>hold</title><style>html,body{margin:0;height:100%;background:#363}</style>
<script>for (const e of ['mousedown', 'mouseup']) addEventListener(e, () => fetch('/evt?e=' + e + '&t=' + Date.now(), {keepalive: true}));</script>`)
	})
	mux.HandleFunc("/evt", func(w http.ResponseWriter, r *http.Request) {
		var ms int64
		_, _ = fmt.Sscan(r.URL.Query().Get("t"), &ms)
		f.mu.Lock()
		f.events = append(f.events, pageEvent{kind: r.URL.Query().Get("e"), at: time.UnixMilli(ms)})
		f.mu.Unlock()
	})
	f.Server = httptest.NewServer(mux)
	t.Cleanup(f.Close)
	return f
}

// deniedServer is on 127.0.0.2, an address the policy refuses (only
// 127.0.0.1 is let through in these tests): its hits must stay 0.
func deniedServer(t *testing.T) (*httptest.Server, *int64) {
	var n int64
	var mu sync.Mutex
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		fmt.Fprint(w, "you should not see this")
	}))
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &n
}

// npmDir is test/npm with its node_modules (make npm-deps).
func npmDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "npm"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"playwright-core", "puppeteer-core"} {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", m, "package.json")); err != nil {
			t.Fatalf("%s is not installed in %s: run `make npm-deps`", m, dir)
		}
	}
	return dir
}

// nodeRun is one CDP client script under test: its steps as they come,
// and its stdin to let it go on at a sync point.
type nodeRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan [2]string // {kind or step name, json}
	exited chan struct{}
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 64<<10 {
		return len(p), nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// runNode starts node on script in test/npm. The appliance's own
// certificate is the one extra CA the client trusts (NODE_EXTRA_CA_CERTS):
// TLS is verified as a real client on the LAN would.
func runNode(t *testing.T, ctx context.Context, a *harness.Appliance, script string, env ...string) *nodeRun {
	t.Helper()
	dir := npmDir(t)
	cmd := exec.CommandContext(ctx, "node", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NODE_EXTRA_CA_CERTS="+filepath.Join(a.DataDir, "tls-cert.pem"))
	cmd.Env = append(cmd.Env, env...)
	n := &nodeRun{cmd: cmd, lines: make(chan [2]string, 64), exited: make(chan struct{}), stderr: &syncBuffer{}}
	cmd.Stderr = n.stderr
	var err error
	if n.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			kind, rest, _ := strings.Cut(sc.Text(), " ")
			switch kind {
			case "STEP":
				name, data, _ := strings.Cut(rest, " ")
				n.lines <- [2]string{name, data}
			case "RESULT":
				n.lines <- [2]string{"RESULT", rest}
			}
		}
		_ = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		<-n.exited
	})
	return n
}

// expect waits for the step (or "RESULT") and returns its data.
func (n *nodeRun) expect(t *testing.T, name string, timeout time.Duration) json.RawMessage {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l := <-n.lines:
			if l[0] == name {
				return json.RawMessage(l[1])
			}
		case <-n.exited:
			// Lines already read come first.
			select {
			case l := <-n.lines:
				if l[0] == name {
					return json.RawMessage(l[1])
				}
				continue
			default:
			}
			t.Fatalf("%s exited (%v) before %s:\n%s", n.cmd.Args[1], n.cmd.ProcessState, name, n.stderr.String())
		case <-deadline:
			t.Fatalf("%s: no %s within %v:\n%s", n.cmd.Args[1], name, timeout, n.stderr.String())
		}
	}
}

// proceed lets the script go on from a sync point.
func (n *nodeRun) proceed(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(n.stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
}

// outcome is attempt()'s report in the scripts.
type outcome struct {
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value"`
	Error string          `json:"error"`
}

// adminLogin returns the admin's login cookie and CSRF token.
func adminLogin(t *testing.T, a *harness.Appliance) (*http.Cookie, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for {
		c, csrf, err := a.Login(ctx, "admin", a.AdminPassword)
		if err == nil {
			return c, csrf
		}
		// The auth plugin may still be starting on a loaded box (503
		// auth_unavailable): try again until the deadline.
		if ctx.Err() != nil || !strings.Contains(err.Error(), "HTTP 503") {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// makeToken creates an API token through the admin's login.
func makeToken(t *testing.T, a *harness.Appliance, name, user, role string, scopes ...string) string {
	t.Helper()
	c, csrf := adminLogin(t, a)
	b, _ := json.Marshal(map[string]any{"name": name, "user": user, "role": role, "scopes": scopes})
	st, body, _ := call{method: "POST", path: "/api/v1/tokens", body: string(b), cookie: c, csrf: csrf}.do(t, a)
	var out struct{ Token string }
	if err := json.Unmarshal([]byte(body), &out); err != nil || st != 201 || out.Token == "" {
		t.Fatalf("create token %s: %d %s", name, st, body)
	}
	return out.Token
}

// cdpURL is the session's CDP endpoint over HTTP(S) (what connectOverCDP
// takes) and over WebSocket.
func cdpURL(a *harness.Appliance, id string) (httpURL, wsURL string) {
	httpURL = a.URL + "/api/v1/sessions/" + id + "/cdp"
	return httpURL, "ws" + strings.TrimPrefix(httpURL, "http")
}

// dialCDP opens the CDP socket with a token (or none) and extra headers;
// on a refusal it returns the HTTP status and the error code.
func dialCDP(ctx context.Context, a *harness.Appliance, wsURL, token string, hdr http.Header) (*websocket.Conn, int, string, error) {
	if hdr == nil {
		hdr = http.Header{}
	}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPClient: a.Client, HTTPHeader: hdr})
	if err == nil {
		return ws, http.StatusSwitchingProtocols, "", nil
	}
	if resp == nil {
		return nil, 0, "", err
	}
	var body struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if resp.Body != nil {
		_ = json.NewDecoder(resp.Body).Decode(&body)
	}
	return nil, resp.StatusCode, body.Error.Code, err
}

// cdpTargets lists a session's pages through its discovery endpoint.
func cdpTargets(t *testing.T, a *harness.Appliance, id, token string) []string {
	t.Helper()
	st, body, _ := call{method: "GET", path: "/api/v1/sessions/" + id + "/cdp/json/list", token: token}.do(t, a)
	var list []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		WS   string `json:"webSocketDebuggerUrl"`
	}
	if err := json.Unmarshal([]byte(body), &list); err != nil || st != 200 || len(list) == 0 {
		t.Fatalf("json/list of %s: %d %s", id, st, body)
	}
	var ids []string
	for _, l := range list {
		ids = append(ids, l.ID)
	}
	return ids
}

// rawCDP is a bare CDP client on the endpoint's socket: commands by id,
// events kept (bounded) for the test to read.
type rawCDP struct {
	ws     *websocket.Conn
	mu     sync.Mutex
	nextID int
	wait   map[int]chan cdpReply
	events []cdpReply
	done   chan struct{}
}

type cdpReply struct {
	ID     int             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func openRawCDP(ctx context.Context, t *testing.T, a *harness.Appliance, wsURL, token string) *rawCDP {
	t.Helper()
	ws, st, code, err := dialCDP(ctx, a, wsURL, token, nil)
	if ws == nil {
		t.Fatalf("dial %s: %d %s %v", wsURL, st, code, err)
	}
	ws.SetReadLimit(64 << 20)
	c := &rawCDP{ws: ws, wait: map[int]chan cdpReply{}, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				return
			}
			var r cdpReply
			if json.Unmarshal(b, &r) != nil {
				continue
			}
			c.mu.Lock()
			if r.Method != "" {
				if len(c.events) < 10000 {
					c.events = append(c.events, r)
				}
			} else if ch, ok := c.wait[r.ID]; ok {
				ch <- r
				delete(c.wait, r.ID)
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { ws.CloseNow(); <-c.done })
	return c
}

// call sends one command and waits for its answer.
func (c *rawCDP) call(t *testing.T, method string, params any) cdpReply {
	t.Helper()
	c.mu.Lock()
	c.nextID++
	id := c.nextID
	ch := make(chan cdpReply, 1)
	c.wait[id] = ch
	c.mu.Unlock()
	b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	select {
	case r := <-ch:
		return r
	case <-c.done:
		t.Fatalf("%s: the connection ended", method)
	case <-ctx.Done():
		t.Fatalf("%s: no answer in 20 s", method)
	}
	return cdpReply{}
}

// targetIDs are the target ids named in the events so far.
func (c *rawCDP) eventTargets() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ids []string
	for _, e := range c.events {
		var p struct {
			TargetInfo struct {
				TargetID string `json:"targetId"`
			} `json:"targetInfo"`
			TargetID string `json:"targetId"`
		}
		_ = json.Unmarshal(e.Params, &p)
		for _, id := range []string{p.TargetInfo.TargetID, p.TargetID} {
			if id != "" {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
