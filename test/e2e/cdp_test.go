package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// cdpSets turn the endpoint on over HTTPS (the clients verify the
// appliance's certificate, and the discovery answer must say wss), with
// small bounds the refusal tests reach.
var cdpSets = []string{"server.tls=on", "agent.cdp=true", "agent.cdpMaxConnections=2", "agent.cdpMaxMessageBytes=1048576"}

// TestCDPClients: Playwright (connectOverCDP with a header) and Puppeteer
// (a ticket URL) drive the session people watch through the appliance's
// CDP endpoint, see only that session, are refused what the allow list
// leaves out, stay under the navigation policy; a Go viewer sees the
// click; everything not allowed is refused before the upgrade.
func TestCDPClients(t *testing.T) {
	f := cdpPages(t)
	denied, deniedHits := deniedServer(t)
	// The screencast: a still page sends no frames, so the click's frame
	// is the click's.
	a, s := startWithSession(t, f.URL+"/solid?c=224466", append(slices.Clone(cdpSets), "video.capture=cdp")...)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	admin := makeToken(t, a, "playwright", "admin", "admin", "read", "control", "cdp")

	// Another session of the same owner, and one of another owner.
	var other struct{ Session struct{ ID string } }
	if err := a.Do(ctx, "POST", "/api/v1/sessions", `{"url":"`+f.URL+`/solid?c=113311"}`, &other); err != nil {
		t.Fatal(err)
	}
	if err := harness.AddUser(a.UsersFile, "op", "operator", "op password 1"); err != nil {
		t.Fatal(err)
	}
	op := makeToken(t, a, "op-cdp", "op", "operator", "read", "control", "cdp")
	st, body, _ := call{method: "POST", path: "/api/v1/sessions", body: `{"url":"` + f.URL + `/solid?c=331111"}`, token: op}.do(t, a)
	var opSess struct{ Session struct{ ID string } }
	if err := json.Unmarshal([]byte(body), &opSess); err != nil || st != 201 {
		t.Fatalf("op's session: %d %s", st, body)
	}
	others := append(cdpTargets(t, a, other.Session.ID, admin), cdpTargets(t, a, opSess.Session.ID, op)...)

	// Discovery answers as Chromium's, pointing back at the appliance.
	httpURL, wsURL := cdpURL(a, s.ID)
	for _, p := range []string{"/json/version", "/json/version/"} {
		st, body, _ := call{method: "GET", path: "/api/v1/sessions/" + s.ID + "/cdp" + p, token: admin}.do(t, a)
		var v struct {
			Browser  string `json:"Browser"`
			Protocol string `json:"Protocol-Version"`
			WS       string `json:"webSocketDebuggerUrl"`
		}
		if err := json.Unmarshal([]byte(body), &v); err != nil || st != 200 || v.WS != wsURL || !strings.HasPrefix(v.WS, "wss://") || v.Browser == "" || v.Protocol == "" {
			t.Errorf("%s: %d %s (want webSocketDebuggerUrl %s)", p, st, body, wsURL)
		}
	}
	for _, p := range []string{"/json/list", "/json"} {
		st, body, _ := call{method: "GET", path: "/api/v1/sessions/" + s.ID + "/cdp" + p, token: admin}.do(t, a)
		if st != 200 || !strings.Contains(body, `"webSocketDebuggerUrl":"`+wsURL+`"`) || strings.Contains(body, "devtools/page") {
			t.Errorf("%s: %d %s", p, st, body)
		}
	}

	// A Go viewer watches the session throughout.
	var (
		mu     sync.Mutex
		frames []time.Time
	)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		_, _ = viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: s.ID, Codec: "vp8", For: 4 * time.Minute,
			OnFrame: func(fr viewer.Frame) { mu.Lock(); frames = append(frames, fr.Arrived); mu.Unlock() }})
	}()
	framesSince := func(t0 time.Time) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, at := range frames {
			if at.After(t0) {
				n++
			}
		}
		return n
	}
	lastFrame := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if len(frames) == 0 {
			return time.Time{}
		}
		return frames[len(frames)-1]
	}

	t.Run("playwright", func(t *testing.T) {
		pw := runNode(t, ctx, a, "playwright-flow.mjs", "CDP_URL="+httpURL, "TOKEN="+admin, "PAGE="+f.URL, "DENIED="+denied.URL+"/secret")
		pw.expect(t, "connected", time.Minute)
		pw.expect(t, "before-click", time.Minute)
		// A still picture first (the screencast's idle repeats end 3 s
		// after the last change), so that a frame after the click is the
		// click's.
		deadline := time.Now().Add(20 * time.Second)
		for lf := lastFrame(); lf.IsZero() || time.Since(lf) < 1500*time.Millisecond; lf = lastFrame() {
			if time.Now().After(deadline) {
				t.Fatalf("the picture never went still (last frame %v ago, %d frames)", time.Since(lf), framesSince(time.Time{}))
			}
			time.Sleep(100 * time.Millisecond)
		}
		before := time.Now()
		pw.proceed(t)
		pw.expect(t, "clicked", 30*time.Second)
		for framesSince(before) == 0 {
			if time.Since(before) > 10*time.Second {
				t.Fatalf("the viewer saw no new frame within 10 s of the click\n%s", a.LogTail(2000))
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("the viewer's first frame after the click: %v after the go", time.Since(before).Round(time.Millisecond))

		pw.expect(t, "pop-clicked", 30*time.Second)
		pw.expect(t, "popup-event", 30*time.Second)
		pop := pw.expect(t, "popup", 30*time.Second)
		// The session takes the popup in as its page loads: poll its tabs.
		var tabs string
		for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if tabs = string(mustAgent(t, a, s.ID, map[string]any{"command": "tabs"}).Data); strings.Contains(tabs, "/solid?c=aa3300") {
				break
			}
		}
		if !strings.Contains(tabs, "/solid?c=aa3300") {
			t.Errorf("the session's tabs lack the popup %s: %s", pop, tabs)
		}
		pw.proceed(t)
		var res struct {
			Contexts       int      `json:"contexts"`
			PagesAtConnect []string `json:"pagesAtConnect"`
			Filled         string   `json:"filled"`
			ScreenshotPNG  bool     `json:"screenshotPNG"`
			ScreenshotB    int      `json:"screenshotBytes"`
			Page           struct {
				Done    string `json:"done"`
				OK      bool   `json:"ok"`
				Blocked bool   `json:"blocked"`
			} `json:"page"`
			Popup struct {
				URL   string `json:"url"`
				Pages int    `json:"pages"`
			} `json:"popup"`
			DeniedGoto  outcome `json:"deniedGoto"`
			DeniedRoute outcome `json:"deniedRoute"`
			Alive       outcome `json:"alive"`
			PopupLoad   outcome `json:"popupLoad"`
		}
		if err := json.Unmarshal(pw.expect(t, "RESULT", time.Minute), &res); err != nil {
			t.Fatal(err)
		}
		if res.Contexts != 1 || len(res.PagesAtConnect) != 1 || !strings.Contains(res.PagesAtConnect[0], "c=224466") {
			t.Errorf("at connect: %d contexts, pages %v; want the one streamed page", res.Contexts, res.PagesAtConnect)
		}
		if res.Filled != "ada" || res.Page.Done != "clicked ada" {
			t.Errorf("fill/click: filled %q, page says %q", res.Filled, res.Page.Done)
		}
		if !res.ScreenshotPNG || res.ScreenshotB < 1000 {
			t.Errorf("screenshot: PNG %v, %d bytes", res.ScreenshotPNG, res.ScreenshotB)
		}
		if !res.Page.OK || res.Page.Blocked || f.hit("/blocked.js") != 0 || f.hit("/ok.js") == 0 {
			t.Errorf("page.route: ok.js loaded %v (hits %d), blocked.js loaded %v (hits %d)", res.Page.OK, f.hit("/ok.js"), res.Page.Blocked, f.hit("/blocked.js"))
		}
		t.Logf("popup load event seen by Playwright: %+v", res.PopupLoad)
		if res.Popup.Pages != 2 || !strings.Contains(res.Popup.URL, "c=aa3300") {
			t.Errorf("popup: %+v", res.Popup)
		}
		t.Logf("refused address: goto %+v, route continue %+v", res.DeniedGoto, res.DeniedRoute)
		for what, o := range map[string]outcome{"goto": res.DeniedGoto, "route continue": res.DeniedRoute} {
			if o.OK && string(o.Value) != "403" {
				t.Errorf("a refused address through %s: %+v", what, o)
			}
		}
		if *deniedHits != 0 {
			t.Errorf("the refused server was reached %d times", *deniedHits)
		}
		if !res.Alive.OK || string(res.Alive.Value) != "42" {
			t.Errorf("the page at the end: %+v", res.Alive)
		}
	})

	// The client sees one session: the others' pages are neither listed,
	// nor in events, nor attachable; what the allow list leaves out is a
	// CDP error naming not_allowed, and the connection goes on.
	t.Run("scope-and-refusals", func(t *testing.T) {
		c := openRawCDP(ctx, t, a, wsURL, admin)
		if r := c.call(t, "Target.setDiscoverTargets", map[string]any{"discover": true}); r.Error != nil {
			t.Fatalf("setDiscoverTargets: %+v", r.Error)
		}
		r := c.call(t, "Target.getTargets", map[string]any{})
		var got struct {
			TargetInfos []struct {
				TargetID string `json:"targetId"`
				Type     string `json:"type"`
				URL      string `json:"url"`
			} `json:"targetInfos"`
		}
		if err := json.Unmarshal(r.Result, &got); err != nil || r.Error != nil || len(got.TargetInfos) == 0 {
			t.Fatalf("getTargets: %s %+v", r.Result, r.Error)
		}
		for _, ti := range got.TargetInfos {
			if slices.Contains(others, ti.TargetID) {
				t.Errorf("getTargets shows another session's target %s (%s)", ti.TargetID, ti.URL)
			}
		}
		// The other sessions' pages change while the client listens.
		mustAgent(t, a, other.Session.ID, map[string]any{"command": "navigate", "url": f.URL + "/solid?c=335533"})
		if st, body, _ := (call{method: "POST", path: "/api/v1/sessions/" + opSess.Session.ID + "/navigate", body: `{"url":"` + f.URL + `/solid?c=553333"}`, token: op}).do(t, a); st != 200 {
			t.Errorf("navigate op's session: %d %s", st, body)
		}
		time.Sleep(1500 * time.Millisecond)
		for _, id := range c.eventTargets() {
			if slices.Contains(others, id) {
				t.Errorf("an event named another session's target %s", id)
			}
		}
		for _, id := range others {
			if r := c.call(t, "Target.attachToTarget", map[string]any{"targetId": id, "flatten": true}); r.Error == nil {
				t.Errorf("attached to another session's target %s: %s", id, r.Result)
			}
		}
		for _, m := range []struct {
			method string
			params map[string]any
		}{
			{"Browser.close", nil},
			{"Browser.crash", nil},
			{"Browser.crashGpuProcess", nil},
			{"Target.createBrowserContext", nil},
			{"Target.disposeBrowserContext", map[string]any{"browserContextId": "ABCDEF"}},
			{"Target.exposeDevToolsProtocol", map[string]any{"targetId": got.TargetInfos[0].TargetID}},
			{"SystemInfo.getInfo", nil},
			{"Tethering.bind", map[string]any{"port": 9333}},
			{"Nonexistent.method", nil},
		} {
			if m.params == nil {
				m.params = map[string]any{}
			}
			r := c.call(t, m.method, m.params)
			if r.Error == nil || r.Error.Code == 0 || !strings.Contains(r.Error.Message, "not_allowed") || !strings.Contains(r.Error.Message, m.method) {
				t.Errorf("%s: %s %+v, want a CDP error naming the method and not_allowed", m.method, r.Result, r.Error)
			}
		}
		// Still connected, the browser still there.
		if r := c.call(t, "Target.getTargets", map[string]any{}); r.Error != nil {
			t.Errorf("getTargets after the refusals: %+v", r.Error)
		}
	})

	t.Run("puppeteer-ticket", func(t *testing.T) {
		st, body, _ := call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/cdp/ticket", token: admin}.do(t, a)
		var tk struct {
			URL       string    `json:"url"`
			ExpiresAt time.Time `json:"expiresAt"`
		}
		if err := json.Unmarshal([]byte(body), &tk); err != nil || st != 200 || !strings.HasPrefix(tk.URL, wsURL+"?ticket=") {
			t.Fatalf("ticket: %d %s", st, body)
		}
		if d := time.Until(tk.ExpiresAt); d < 30*time.Second || d > 61*time.Second {
			t.Errorf("ticket expires in %v, want 60 s", d)
		}
		pp := runNode(t, ctx, a, "puppeteer-flow.mjs", "WS_URL="+tk.URL, "PAGE="+f.URL)
		var res struct {
			Page struct {
				Done    string `json:"done"`
				OK      bool   `json:"ok"`
				Blocked bool   `json:"blocked"`
			} `json:"page"`
			ScreenshotB int     `json:"screenshotBytes"`
			Alive       outcome `json:"alive"`
			PopupLoad   outcome `json:"popupLoad"`
		}
		if err := json.Unmarshal(pp.expect(t, "RESULT", 2*time.Minute), &res); err != nil {
			t.Fatal(err)
		}
		if res.Page.Done != "clicked grace" || !res.Page.OK || res.Page.Blocked || res.ScreenshotB < 1000 || !res.Alive.OK {
			t.Errorf("puppeteer flow: %+v", res)
		}
		// The ticket worked once.
		if _, st, code, _ := dialCDP(ctx, a, tk.URL, "", nil); st != 401 || code != "permission_denied" {
			t.Errorf("the ticket used again: %d %s, want 401 permission_denied", st, code)
		}
		// A ticket for this session does not open another.
		_, body, _ = call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/cdp/ticket", token: admin}.do(t, a)
		_ = json.Unmarshal([]byte(body), &tk)
		u, _ := url.Parse(tk.URL)
		_, otherWS := cdpURL(a, other.Session.ID)
		if _, st, code, _ := dialCDP(ctx, a, otherWS+"?"+u.RawQuery, "", nil); st != 401 || code != "permission_denied" {
			t.Errorf("a ticket on another session: %d %s", st, code)
		}
	})

	// tabcast browser cdp-url prints a ticket URL that opens the socket once.
	t.Run("cli-cdp-url", func(t *testing.T) {
		bin, err := harness.Binaries()
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		cfgFile, tokFile := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "token")
		if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		run := func(token string) (string, string, error) {
			if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(filepath.Join(bin, "tabcast"), "browser", "cdp-url", s.ID, "--url", a.URL, "--token-file", tokFile,
				"--config", cfgFile, "--set", "server.dataDir="+a.DataDir)
			for _, kv := range os.Environ() {
				if !strings.HasPrefix(kv, "TABCAST_") {
					cmd.Env = append(cmd.Env, kv)
				}
			}
			var out, errb strings.Builder
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			return strings.TrimSpace(out.String()), errb.String(), err
		}
		out, errOut, err := run(admin)
		if err != nil || !strings.HasPrefix(out, wsURL+"?ticket=") {
			t.Fatalf("cdp-url: %q %v\n%s", out, err, errOut)
		}
		ws, st, code, err := dialCDP(ctx, a, out, "", nil)
		if ws == nil {
			t.Fatalf("the CLI's URL: %d %s %v", st, code, err)
		}
		ws.CloseNow()
		if _, st, code, _ := dialCDP(ctx, a, out, "", nil); st != 401 || code != "permission_denied" {
			t.Errorf("the CLI's URL used again: %d %s", st, code)
		}
		// Without the cdp scope: refused, with the hint naming it.
		if out, errOut, err := run(a.Token); err == nil || out != "" || !strings.Contains(errOut, "--scopes read,control,cdp") {
			t.Errorf("cdp-url with the agent token (no cdp scope): %q %v %s", out, err, errOut)
		}
	})

	t.Run("refused-before-upgrade", func(t *testing.T) {
		_, ownWS := cdpURL(a, s.ID)
		for _, c := range []struct {
			what   string
			url    string
			token  string
			hdr    http.Header
			status int
			code   string
		}{
			{"no credential", ownWS, "", nil, 401, "permission_denied"},
			{"a made-up ticket", ownWS + "?ticket=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "", nil, 401, "permission_denied"},
			{"a token without the cdp scope", ownWS, a.Token, nil, 403, "forbidden"},
			{"another owner's token", ownWS, op, nil, 404, "not_found"},
			{"an unknown session", strings.Replace(ownWS, s.ID, "s-nope", 1), admin, nil, 404, "not_found"},
			{"a page on another origin", ownWS, admin, http.Header{"Origin": {"https://evil.example"}}, 403, "origin_denied"},
		} {
			ws, st, code, _ := dialCDP(ctx, a, c.url, c.token, c.hdr)
			if ws != nil {
				ws.CloseNow()
			}
			if st != c.status || code != c.code {
				t.Errorf("%s: %d %s, want %d %s", c.what, st, code, c.status, c.code)
			}
		}
		st, body, _ := call{method: "GET", path: "/api/v1/sessions/" + s.ID + "/cdp/json/version", token: a.Token}.do(t, a)
		if st != 403 || !strings.Contains(body, `"forbidden"`) {
			t.Errorf("json/version without the cdp scope: %d %s", st, body)
		}
		st, _, _ = call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/cdp/ticket", token: a.Token}.do(t, a)
		if st != 403 {
			t.Errorf("a ticket without the cdp scope: %d", st)
		}
	})

	t.Run("bounds", func(t *testing.T) {
		// agent.cdpMaxConnections=2: the third is refused before the upgrade.
		var open []*websocket.Conn
		defer func() {
			for _, ws := range open {
				ws.CloseNow()
			}
		}()
		for i := range 2 {
			ws, st, code, err := dialCDP(ctx, a, wsURL, admin, nil)
			if ws == nil {
				t.Fatalf("connection %d: %d %s %v", i+1, st, code, err)
			}
			open = append(open, ws)
		}
		if ws, st, code, _ := dialCDP(ctx, a, wsURL, admin, nil); ws != nil || st != 429 || code != "too_many_connections" {
			t.Errorf("a third connection: %d %s, want 429 too_many_connections", st, code)
		}
		// agent.cdpMaxMessageBytes=1 MiB: a larger message closes with 1009.
		ws := open[0]
		_ = ws.Write(ctx, websocket.MessageText, []byte(`{"id":1,"method":"Runtime.evaluate","params":{"expression":"`+strings.Repeat("x", 1100000)+`"}}`))
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		defer rcancel()
		var err error
		for err == nil {
			_, _, err = ws.Read(rctx)
		}
		if websocket.CloseStatus(err) != websocket.StatusMessageTooBig {
			t.Errorf("a 1.1 MB message: %v, want close 1009", err)
		}
	})
}

// TestCDPOffByDefault: without agent.cdp every CDP route answers 403
// cdp_disabled, even to a caller holding the scope.
func TestCDPOffByDefault(t *testing.T) {
	f := cdpPages(t)
	a, s := startWithSession(t, f.URL+"/solid?c=224466", "server.tls=on")
	tok := makeToken(t, a, "cdp", "admin", "admin", "read", "control", "cdp")
	for _, p := range []string{"/cdp/json/version", "/cdp/json/version/", "/cdp/json/list", "/cdp/json"} {
		st, body, _ := call{method: "GET", path: "/api/v1/sessions/" + s.ID + p, token: tok}.do(t, a)
		if st != 403 || !strings.Contains(body, `"cdp_disabled"`) {
			t.Errorf("%s: %d %s", p, st, body)
		}
	}
	if st, body, _ := (call{method: "POST", path: "/api/v1/sessions/" + s.ID + "/cdp/ticket", token: tok}).do(t, a); st != 403 || !strings.Contains(body, `"cdp_disabled"`) {
		t.Errorf("ticket: %d %s", st, body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, wsURL := cdpURL(a, s.ID)
	if ws, st, code, _ := dialCDP(ctx, a, wsURL, tok, nil); ws != nil || st != 403 || code != "cdp_disabled" {
		t.Errorf("upgrade: %d %s", st, code)
	}
}

// TestCDPHumanControl: a CDP client's input is fenced with the people: its
// click waits while a person holds exclusive control and completes after
// the release, fails with human_in_control at agent.cdpInputDeadline, and
// a button it holds is released within 1 s of its disconnecting.
func TestCDPHumanControl(t *testing.T) {
	f := cdpPages(t)
	a, _ := startWithSession(t, f.URL+"/solid?c=224466", "server.tls=on", "agent.cdp=true", "agent.cdpInputDeadline=3s")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var created struct{ Session struct{ ID string } }
	if err := a.Do(ctx, "POST", "/api/v1/sessions", `{"url":"`+f.URL+`/solid?c=101010","control":"exclusive"}`, &created); err != nil {
		t.Fatal(err)
	}
	id := created.Session.ID
	tok := makeToken(t, a, "holder", "admin", "admin", "read", "control", "cdp")
	control := func(action string) {
		t.Helper()
		if err := a.Do(ctx, "POST", "/api/v1/sessions/"+id+"/control", `{"action":"`+action+`"}`, nil); err != nil {
			t.Fatalf("control %s: %v", action, err)
		}
	}
	httpURL, _ := cdpURL(a, id)
	n := runNode(t, ctx, a, "hold.mjs", "CDP_URL="+httpURL, "TOKEN="+tok, "PAGE="+f.URL)

	// 1. The click waits for the release, then completes.
	n.expect(t, "ready-wait", time.Minute)
	control("take")
	n.proceed(t)
	n.expect(t, "clicking", 10*time.Second)
	time.Sleep(1500 * time.Millisecond)
	if d := f.eventsOf("mousedown"); len(d) != 0 {
		t.Fatalf("the click reached the page while a person held control: %v", d)
	}
	released := time.Now()
	control("release")
	var step1 struct {
		Waited   outcome `json:"waited"`
		WaitedMs int     `json:"waitedMs"`
	}
	if err := json.Unmarshal(n.expect(t, "clicked", 30*time.Second), &step1); err != nil {
		t.Fatal(err)
	}
	if !step1.Waited.OK {
		t.Errorf("the waiting click: %+v", step1.Waited)
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(f.eventsOf("mouseup")) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if d := f.eventsOf("mousedown"); len(d) != 1 || d[0].at.Before(released.Add(-time.Second)) {
		t.Errorf("mousedown events %v, want one after the release at %v", d, released)
	}
	t.Logf("the click waited %d ms under a person's control", step1.WaitedMs)

	// 2. Held until the deadline: human_in_control.
	n.expect(t, "ready-deadline", 10*time.Second)
	control("take")
	n.proceed(t)
	var step2 struct {
		Deadline   outcome `json:"deadline"`
		DeadlineMs int     `json:"deadlineMs"`
	}
	if err := json.Unmarshal(n.expect(t, "deadline", 30*time.Second), &step2); err != nil {
		t.Fatal(err)
	}
	if step2.Deadline.OK || !strings.Contains(step2.Deadline.Error, "human_in_control") {
		t.Errorf("the click at the deadline: %+v, want human_in_control", step2.Deadline)
	}
	if step2.DeadlineMs < 2500 {
		t.Errorf("the click failed after %d ms, before the 3 s deadline", step2.DeadlineMs)
	}
	// Playwright sends a click's press and release beside its move: they
	// reach their own deadline while control is still held, and nothing
	// of the failed click reaches the page, then or after the release.
	time.Sleep(4 * time.Second)
	control("release")
	time.Sleep(time.Second)
	if d, u := len(f.eventsOf("mousedown")), len(f.eventsOf("mouseup")); d != 1 || u != 1 {
		t.Errorf("after the click that failed: %d mousedown, %d mouseup on the page, want the first click's 1 and 1", d, u)
	}

	// 3. A held button is released when the client goes.
	n.expect(t, "ready-hold", 10*time.Second)
	ups := len(f.eventsOf("mouseup"))
	n.proceed(t)
	n.expect(t, "down", 20*time.Second)
	deadline = time.Now().Add(5 * time.Second)
	for len(f.eventsOf("mousedown")) < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if len(f.eventsOf("mousedown")) < 2 {
		t.Fatal("the held button never reached the page")
	}
	// Held while the client is connected (the dispatcher's watchdog lets
	// a held button be for 5 s).
	time.Sleep(1500 * time.Millisecond)
	if n := len(f.eventsOf("mouseup")); n != ups {
		f.mu.Lock()
		evs := fmt.Sprint(f.events)
		f.mu.Unlock()
		t.Fatalf("the button was released while the client still held it (%d mouseup, want %d); events %s, now %v", n, ups, evs, time.Now())
	}
	killed := time.Now()
	if err := n.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(f.eventsOf("mouseup")) == ups && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	up := f.eventsOf("mouseup")
	if len(up) == ups {
		t.Fatal("the button the client held was never released")
	}
	// The page's own clock (same machine) says when mouseup fired.
	after := up[len(up)-1].at.Sub(killed)
	t.Logf("mouseup %v after the client was killed", after)
	if after > time.Second {
		t.Errorf("the held button was released %v after the client went, want within 1 s", after)
	}
}
