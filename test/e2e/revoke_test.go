package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/pion/webrtc/v4"
	"go.yaml.in/yaml/v3"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/peer/peertest"
	"github.com/tabcast/tabcast/core/wire"
	"github.com/tabcast/tabcast/test/harness"
)

// cutLimit is how soon withdrawn access must stop a live viewer.
const cutLimit = time.Second

// inputEvery paces the viewer's text_insert (under the dispatcher's 8/s).
const inputEvery = 150 * time.Millisecond

// liveViewer is a Go viewer of a session over the real signaling socket,
// peer and DataChannels, that records when things happen: frames, the
// socket's error frames and close, the peer's state, and the fate of
// every text_insert it sends.
type liveViewer struct {
	t    *testing.T
	ws   *websocket.Conn
	recv *peertest.Receiver

	welcome struct {
		SessionID            string `json:"sessionId"`
		PeerID               string `json:"peerId"`
		ConnectionGeneration uint64 `json:"connectionGeneration"`
		ProducerID           string `json:"producerId"`
		ProducerGeneration   uint64 `json:"producerGeneration"`
		PageRevision         uint64 `json:"pageRevision"`
		Interactive          bool   `json:"interactive"`
		InputError           string `json:"inputError"`
	}

	mu         sync.Mutex
	errs       map[string]time.Time // first error frame of each code
	closedAt   time.Time
	closeCode  websocket.StatusCode
	peerDownAt time.Time
	lastFrame  time.Time
	frames     int
	control    *webrtc.DataChannel
	sent       map[string]time.Time  // actionId → when sent
	acks       map[string]action.Ack // actionId → first answer
	sendFailAt time.Time             // the control channel refused a send

	done chan struct{} // the socket reader ended
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// connectLive opens an interactive viewer of session id with hdr's
// credentials and waits until it receives frames (and, when it got a
// producer, its DataChannels are open).
func connectLive(t *testing.T, a *harness.Appliance, id string, hdr http.Header) *liveViewer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(a.URL, "http")+"/api/v1/sessions/"+id+"/signal",
		&websocket.DialOptions{HTTPHeader: hdr, HTTPClient: a.Client})
	if err != nil {
		t.Fatalf("dial signaling: %v", err)
	}
	ws.SetReadLimit(4 << 20)
	v := &liveViewer{t: t, ws: ws, errs: map[string]time.Time{}, sent: map[string]time.Time{}, acks: map[string]action.Ack{}, done: make(chan struct{})}
	t.Cleanup(v.close)
	write := func(m any) {
		b, _ := json.Marshal(m)
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = ws.Write(wctx, websocket.MessageText, b)
	}
	write(map[string]any{"type": "hello", "codec": "vp8", "codecs": []string{"vp8"}, "interactive": true})
	var pending []webrtc.ICECandidateInit
	var answered bool
	var cmu sync.Mutex
	opened := make(chan string, 4)
	var offer string
	for offer == "" {
		_, b, err := ws.Read(ctx)
		if err != nil {
			t.Fatalf("before the offer: %v", err)
		}
		var m struct {
			Type, SDP, Code, Message string
			Candidate                *webrtc.ICECandidateInit
		}
		_ = json.Unmarshal(b, &m)
		switch m.Type {
		case "welcome":
			_ = json.Unmarshal(b, &v.welcome)
		case "offer":
			offer = m.SDP
		case "candidate":
			if m.Candidate != nil {
				pending = append(pending, *m.Candidate)
			}
		case "error":
			t.Fatalf("signaling error %s: %s", m.Code, m.Message)
		}
	}
	recv, err := peertest.NewReceiver(media.Codecs, nil, func(c webrtc.ICECandidateInit) {
		cmu.Lock()
		defer cmu.Unlock()
		if answered {
			write(map[string]any{"type": "candidate", "candidate": c})
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	v.recv = recv
	connected := make(chan struct{})
	var once sync.Once
	recv.PC.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if s == webrtc.PeerConnectionStateConnected {
			once.Do(func() { close(connected) })
			return
		}
		v.mu.Lock()
		if v.peerDownAt.IsZero() && s != webrtc.PeerConnectionStateConnecting && s != webrtc.PeerConnectionStateNew {
			v.peerDownAt = time.Now()
		}
		v.mu.Unlock()
	})
	recv.PC.OnDataChannel(func(dc *webrtc.DataChannel) {
		label := dc.Label()
		dc.OnOpen(func() { opened <- label })
		if label != wire.ChannelControl {
			return
		}
		v.mu.Lock()
		v.control = dc
		v.mu.Unlock()
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			body, err := wire.Unwrap(m.Data)
			var ack action.Ack
			if err != nil || json.Unmarshal(body, &ack) != nil || ack.ActionID == "" {
				return
			}
			v.mu.Lock()
			if _, seen := v.acks[ack.ActionID]; !seen {
				v.acks[ack.ActionID] = ack
			}
			v.mu.Unlock()
		})
	})
	answer, err := recv.Answer(offer)
	if err != nil {
		t.Fatal(err)
	}
	cmu.Lock()
	write(map[string]any{"type": "answer", "sdp": answer})
	answered = true
	cmu.Unlock()
	for _, c := range pending {
		_ = recv.PC.AddICECandidate(c)
	}
	rctx, stop := context.WithCancel(context.Background())
	v.stop = stop
	go v.read(rctx) // owned by close, which waits for done
	v.wg.Add(1)
	go v.countFrames(rctx)
	select {
	case <-connected:
	case <-ctx.Done():
		t.Fatal("the peer did not connect")
	}
	if v.welcome.Interactive {
		for i := 0; i < 3; i++ {
			select {
			case <-opened:
			case <-ctx.Done():
				t.Fatalf("%d of 3 DataChannels open", i)
			}
		}
	}
	if _, err := recv.WaitFrames(5, 20*time.Second); err != nil {
		t.Fatalf("no video: %v", err)
	}
	return v
}

// read handles the socket until it ends: candidates go to the peer, error
// frames and the close are recorded.
func (v *liveViewer) read(ctx context.Context) {
	defer close(v.done)
	for {
		_, b, err := v.ws.Read(ctx)
		if err != nil {
			v.mu.Lock()
			v.closedAt, v.closeCode = time.Now(), websocket.CloseStatus(err)
			v.mu.Unlock()
			return
		}
		var m struct {
			Type, Code string
			Candidate  *webrtc.ICECandidateInit
		}
		_ = json.Unmarshal(b, &m)
		switch m.Type {
		case "candidate":
			if m.Candidate != nil {
				_ = v.recv.PC.AddICECandidate(*m.Candidate)
			}
		case "error":
			v.mu.Lock()
			if _, seen := v.errs[m.Code]; !seen {
				v.errs[m.Code] = time.Now()
			}
			v.mu.Unlock()
		}
	}
}

// countFrames notes when the frame count last moved (10 ms resolution).
func (v *liveViewer) countFrames(ctx context.Context) {
	defer v.wg.Done()
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, _ := v.recv.Counts()
			v.mu.Lock()
			if n != v.frames {
				v.frames, v.lastFrame = n, time.Now()
			}
			v.mu.Unlock()
		}
	}
}

// typeAlong sends a text_insert every inputEvery until ctx ends or the
// control channel refuses a send.
func (v *liveViewer) typeAlong(ctx context.Context) {
	defer v.wg.Done()
	t := time.NewTicker(inputEvery)
	defer t.Stop()
	w := v.welcome
	for seq := uint64(1); ; seq++ {
		id := fmt.Sprintf("t-%d", seq)
		b, err := wire.Encode(action.Envelope{BrowserSessionID: w.SessionID, PeerID: w.PeerID, ConnectionGeneration: w.ConnectionGeneration,
			ProducerID: w.ProducerID, ProducerGeneration: w.ProducerGeneration, PageRevision: w.PageRevision,
			ControlSeq: seq, ActionID: id, Action: action.Action{Kind: action.TextInsert, Text: "x"}})
		if err != nil {
			v.t.Errorf("encode: %v", err)
			return
		}
		v.mu.Lock()
		dc := v.control
		v.sent[id] = time.Now()
		v.mu.Unlock()
		if err := dc.Send(b); err != nil {
			v.mu.Lock()
			v.sendFailAt = time.Now()
			v.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// inputFate is what became of the text_insert sent from t0 on: when the
// last accepted one was sent, and when the first one that was not
// (rejected, or never answered) was, with its code ("" = no answer).
func (v *liveViewer) inputFate(t0 time.Time) (lastAccepted, firstRefused time.Duration, code string, refused bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	lastAccepted = -1
	first := time.Time{}
	for id, at := range v.sent {
		if at.Before(t0) {
			continue
		}
		ack, ok := v.acks[id]
		if ok && ack.Status == action.StatusAccepted {
			if d := at.Sub(t0); d > lastAccepted {
				lastAccepted = d
			}
			continue
		}
		if first.IsZero() || at.Before(first) {
			first, code = at, ack.Code
		}
	}
	if !v.sendFailAt.IsZero() && (first.IsZero() || v.sendFailAt.Before(first)) {
		first, code = v.sendFailAt, "send failed: channel closed"
	}
	if first.IsZero() {
		return lastAccepted, 0, "", false
	}
	return lastAccepted, first.Sub(t0), code, true
}

// timeline lists the fate of every text_insert sent from t0 on, in
// order, for a failure's log.
func (v *liveViewer) timeline(t0 time.Time) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	type ev struct {
		at   time.Duration
		fate string
	}
	var evs []ev
	for id, at := range v.sent {
		if at.Before(t0) {
			continue
		}
		fate := "no answer"
		if ack, ok := v.acks[id]; ok {
			fate = ack.Status + " " + ack.Code
		}
		evs = append(evs, ev{at.Sub(t0), id + " " + fate})
	}
	slices.SortFunc(evs, func(a, b ev) int { return int(a.at - b.at) })
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "\n  %s %s", ms(e.at), e.fate)
	}
	return b.String()
}

func (v *liveViewer) close() {
	_ = v.ws.CloseNow()
	if v.stop != nil { // the reader and the frame counter run
		v.stop()
		<-v.done
	}
	v.wg.Wait()
	if v.recv != nil {
		_ = v.recv.Close()
	}
}

// since is t - t0 for the log, or "never".
func since(t0, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return "+" + t.Sub(t0).Round(time.Millisecond).String()
}

func ms(d time.Duration) string {
	if d < 0 {
		return "none"
	}
	return "+" + d.Round(time.Millisecond).String()
}

// revokeRig is the appliance and an admin's login to withdraw access with.
type revokeRig struct {
	a          *harness.Appliance
	sessionID  string
	admin      *http.Cookie
	adminCSRF  string
	configFile string
}

func (r *revokeRig) api(t *testing.T, method, path, body string, want int) string {
	t.Helper()
	st, b, _ := call{method: method, path: path, body: body, cookie: r.admin, csrf: r.adminCSRF}.do(t, r.a)
	if st != want {
		t.Fatalf("%s %s: %d %s", method, path, st, b)
	}
	return b
}

func (r *revokeRig) addUser(t *testing.T, name, role string) (*http.Cookie, string) {
	t.Helper()
	if err := harness.AddUser(r.a.UsersFile, name, role, name+" password 1"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, csrf, err := r.a.Login(ctx, name, name+" password 1")
	if err != nil {
		t.Fatal(err)
	}
	return c, csrf
}

func (r *revokeRig) token(t *testing.T, user, role string) (secret, id string) {
	t.Helper()
	var out struct {
		Token string `json:"token"`
		Info  struct {
			ID string `json:"id"`
		} `json:"info"`
	}
	b := r.api(t, "POST", "/api/v1/tokens", `{"name":"revoke test","user":"`+user+`","role":"`+role+`","scopes":["read","control"]}`, 201)
	if err := json.Unmarshal([]byte(b), &out); err != nil {
		t.Fatal(err)
	}
	return out.Token, out.Info.ID
}

// cli runs a command of the appliance's or auth-local's CLI, as an
// administrator on the box would (another process than the appliance).
func cli(t *testing.T, stdin string, name string, args ...string) {
	t.Helper()
	bin, err := harness.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "TABCAST_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// setRole rewrites the users file with user's role changed, by a rename
// as an editor or a config tool would.
func setRole(t *testing.T, file, user, role string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string][]map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, u := range doc["users"] {
		if u["name"] == user {
			u["role"], found = role, true
		}
	}
	if !found {
		t.Fatalf("no user %s in %s", user, file)
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file+".new", out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".new", file); err != nil {
		t.Fatal(err)
	}
}

// cut measures one withdrawal: the viewers type along, withdraw runs, and
// after 2.5 s what happened is checked and logged. keepsViewing: a role
// change, where the video goes on and only input is refused.
func cut(t *testing.T, what string, viewers []*liveViewer, keepsViewing bool, withdraw func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	for _, v := range viewers {
		if v.welcome.Interactive {
			v.wg.Add(1)
			go v.typeAlong(ctx)
		}
	}
	time.Sleep(3 * inputEvery) // some input accepted before
	// Times are from the start of the withdrawal; the limit holds from its
	// end, when the change is made (a CLI's own run, argon2 hashing
	// included, is not the appliance's latency).
	t0 := time.Now()
	withdraw()
	took := time.Since(t0)
	limit := took + cutLimit
	time.Sleep(2500 * time.Millisecond)
	stop()
	for i, v := range viewers {
		v.mu.Lock()
		errAt, closedAt, code, peerDown, lastFrame := v.errs["permission_denied"], v.closedAt, v.closeCode, v.peerDownAt, v.lastFrame
		v.mu.Unlock()
		lastAcc, refused, refusedCode, wasRefused := v.inputFate(t0)
		if refusedCode == "" {
			refusedCode = "no answer"
		}
		name := fmt.Sprintf("%s [viewer %d]", what, i+1)
		input := "no input (view only)"
		if v.welcome.Interactive {
			input = fmt.Sprintf("input refused %s (%s), last accepted %s", ms(refused), refusedCode, ms(lastAcc))
		}
		t.Logf("%s: withdrawal took %v; permission_denied frame %s, socket closed %s (%d), peer down %s, last frame %s; %s",
			name, took.Round(time.Millisecond), since(t0, errAt), since(t0, closedAt), code, since(t0, peerDown), since(t0, lastFrame), input)
		if errAt.IsZero() || errAt.Sub(t0) > limit {
			t.Errorf("%s: no permission_denied on the socket within %v of the change", name, cutLimit)
		}
		if keepsViewing {
			if !closedAt.IsZero() || !peerDown.IsZero() || time.Since(lastFrame) > 500*time.Millisecond {
				t.Errorf("%s: viewing stopped (socket closed %v, peer down %v, last frame %v ago)", name, closedAt, peerDown, time.Since(lastFrame))
			}
		} else {
			if closedAt.IsZero() || closedAt.Sub(t0) > limit || code != 4403 {
				t.Errorf("%s: socket not closed with 4403 within %v of the change (%s, %d)", name, cutLimit, since(t0, closedAt), code)
			}
			if peerDown.IsZero() || peerDown.Sub(t0) > limit {
				t.Errorf("%s: peer still up %v after the change", name, cutLimit)
			}
			if lastFrame.Sub(t0) > limit {
				t.Errorf("%s: frames arrived %s (the change took %v)", name, since(t0, lastFrame), took)
			}
		}
		if v.welcome.Interactive {
			if !wasRefused || refused > limit || lastAcc > limit {
				t.Errorf("%s: input accepted too long (last accepted %s, first refused %s, the change took %v):%s", name, ms(lastAcc), ms(refused), took, v.timeline(t0))
			}
			if keepsViewing && refusedCode != "permission_denied" {
				t.Errorf("%s: input refused with %q, want permission_denied", name, refusedCode)
			}
		}
	}
}

// TestAccessWithdrawnCutsLiveViewers: each way access is withdrawn — a
// token revoked (API and CLI), an invitation withdrawn, a user deleted and
// a password set on the CLI (another process than the appliance), a
// password changed through the API (other logins), a role lowered — stops
// the live viewers of that principal and refuses their input within a
// second; a lowered role keeps viewing and refuses input with
// permission_denied. The measured latencies are logged.
func TestAccessWithdrawnCutsLiveViewers(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/anim", "sessions.maxViewers=8")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	admin, csrf, err := a.Login(ctx, "admin", a.AdminPassword)
	if err != nil {
		t.Fatal(err)
	}
	r := &revokeRig{a: a, sessionID: s.ID, admin: admin, adminCSRF: csrf, configFile: a.ConfigFile}
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	cookie := func(c *http.Cookie) http.Header { return http.Header{"Cookie": {c.String()}} }
	me := func(c *http.Cookie) int {
		st, _, _ := call{method: "GET", path: "/api/v1/auth/me", cookie: c}.do(t, a)
		return st
	}

	t.Run("token revoked through the API", func(t *testing.T) {
		tok, id := r.token(t, "admin", "admin")
		v := connectLive(t, a, s.ID, bearer(tok))
		cut(t, "token revoke (API)", []*liveViewer{v}, false, func() { r.api(t, "DELETE", "/api/v1/tokens/"+id, "", 200) })
	})
	t.Run("token revoked on the CLI", func(t *testing.T) {
		tok, id := r.token(t, "admin", "admin")
		v := connectLive(t, a, s.ID, bearer(tok))
		cut(t, "token revoke (CLI)", []*liveViewer{v}, false, func() {
			cli(t, "", "tabcast", "tokens", "revoke", id, "--config", a.ConfigFile, "--set", "server.dataDir="+a.DataDir)
		})
	})
	t.Run("invitation withdrawn", func(t *testing.T) {
		c, _ := r.addUser(t, "guest", "viewer")
		r.api(t, "POST", "/api/v1/sessions/"+s.ID+"/invites", `{"user":"guest"}`, 200)
		v := connectLive(t, a, s.ID, cookie(c))
		cut(t, "invitation withdrawn", []*liveViewer{v}, false, func() { r.api(t, "DELETE", "/api/v1/sessions/"+s.ID+"/invites/guest", "", 200) })
	})
	t.Run("user deleted on the CLI", func(t *testing.T) {
		c, _ := r.addUser(t, "gone", "admin")
		tok, _ := r.token(t, "gone", "admin")
		v1 := connectLive(t, a, s.ID, cookie(c))
		v2 := connectLive(t, a, s.ID, bearer(tok))
		cut(t, "user deleted (CLI)", []*liveViewer{v1, v2}, false, func() {
			cli(t, "", "auth-local", "users", "--file", a.UsersFile, "del", "gone")
		})
		if st := me(c); st != 401 {
			t.Errorf("the deleted user's cookie answers /auth/me: %d", st)
		}
		if st, b, _ := (call{method: "POST", path: "/api/v1/sessions", body: `{}`, token: tok}).do(t, a); st != 401 {
			t.Errorf("the deleted user's token creates a session: %d %s", st, b)
		}
	})
	t.Run("password set on the CLI", func(t *testing.T) {
		c, _ := r.addUser(t, "pw", "admin")
		v := connectLive(t, a, s.ID, cookie(c))
		cut(t, "password set (CLI)", []*liveViewer{v}, false, func() {
			cli(t, "a new password 2\n", "auth-local", "users", "--file", a.UsersFile, "passwd", "pw", "--password-stdin")
		})
		if st := me(c); st != 401 {
			t.Errorf("the old cookie answers /auth/me after the password was set: %d", st)
		}
	})
	t.Run("password changed through the API", func(t *testing.T) {
		changer, ccsrf := r.addUser(t, "pa", "admin")
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		other, _, err := a.Login(ctx, "pa", "pa password 1")
		if err != nil {
			t.Fatal(err)
		}
		vKeep := connectLive(t, a, s.ID, cookie(changer))
		vCut := connectLive(t, a, s.ID, cookie(other))
		var newCookie *http.Cookie
		cut(t, "password change (API), other login", []*liveViewer{vCut}, false, func() {
			st, b, resp := call{method: "POST", path: "/api/v1/auth/password", body: `{"oldPassword":"pa password 1","newPassword":"pa password 22"}`,
				cookie: changer, csrf: ccsrf}.do(t, a)
			if st != 200 {
				t.Fatalf("password change: %d %s", st, b)
			}
			for _, c := range resp.Cookies() {
				if c.Name == "tabcast_login" {
					newCookie = c
				}
			}
		})
		vKeep.mu.Lock()
		closed, lastFrame := vKeep.closedAt, vKeep.lastFrame
		vKeep.mu.Unlock()
		if !closed.IsZero() || time.Since(lastFrame) > 500*time.Millisecond {
			t.Errorf("the changing login's viewer stopped (closed %v, last frame %v ago)", closed, time.Since(lastFrame))
		}
		if newCookie == nil || me(newCookie) != 200 || me(other) != 401 || me(changer) != 401 {
			t.Errorf("after the change: new cookie %v, other login %d, old cookie value %d", newCookie != nil, me(other), me(changer))
		}
	})
	t.Run("agent calls in flight", func(t *testing.T) {
		agentCallsCut(t, r)
	})
	t.Run("role lowered", func(t *testing.T) {
		c, _ := r.addUser(t, "rc", "admin")
		// Invited: as a viewer it may still watch the admin's session.
		r.api(t, "POST", "/api/v1/sessions/"+s.ID+"/invites", `{"user":"rc"}`, 200)
		v := connectLive(t, a, s.ID, cookie(c))
		if !v.welcome.Interactive {
			t.Fatalf("an admin got no producer: %+v", v.welcome)
		}
		cut(t, "role lowered admin → viewer", []*liveViewer{v}, true, func() { setRole(t, a.UsersFile, "rc", "viewer") })
	})
	if t.Failed() {
		t.Log(a.LogTail(4000))
	}
}

// agentCallsCut: an agent command waiting over REST and one over MCP,
// both with a token that is then revoked, end within a second with
// permission_denied.
func agentCallsCut(t *testing.T, r *revokeRig) {
	a := r.a
	tok, id := r.token(t, "admin", "admin")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type outcome struct {
		at   time.Time
		what string
	}
	restDone, mcpDone := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		req, err := http.NewRequestWithContext(ctx, "POST", a.URL+"/api/v1/sessions/"+r.sessionID+"/agent",
			strings.NewReader(`{"command":"wait","text":"never on this page","timeoutMs":30000}`))
		if err != nil {
			restDone <- outcome{time.Now(), err.Error()}
			return
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := a.Client.Do(req)
		if err != nil {
			restDone <- outcome{time.Now(), err.Error()}
			return
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		restDone <- outcome{time.Now(), fmt.Sprintf("%d %s", resp.StatusCode, b)}
	}()
	hc := &http.Client{Transport: bearer{http.DefaultTransport, tok}}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: a.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	go func() {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "browser_wait",
			Arguments: map[string]any{"session": r.sessionID, "text": "never on this page", "timeoutMs": 30000}})
		if err != nil {
			mcpDone <- outcome{time.Now(), "error " + err.Error()}
			return
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		mcpDone <- outcome{time.Now(), fmt.Sprintf("isError=%v %s", res.IsError, b.String())}
	}()
	time.Sleep(1500 * time.Millisecond) // both are waiting
	select {
	case o := <-restDone:
		t.Fatalf("the REST call ended before the revoke: %s", o.what)
	case o := <-mcpDone:
		t.Fatalf("the MCP call ended before the revoke: %s", o.what)
	default:
	}
	t0 := time.Now()
	r.api(t, "DELETE", "/api/v1/tokens/"+id, "", 200)
	took := time.Since(t0)
	for name, ch := range map[string]chan outcome{"REST agent wait": restDone, "MCP browser_wait": mcpDone} {
		select {
		case o := <-ch:
			d := o.at.Sub(t0)
			t.Logf("%s in flight: ended %s after the revoke began (it took %v): %.160s", name, ms(d), took.Round(time.Millisecond), o.what)
			if d > took+cutLimit {
				t.Errorf("%s ended %v after the revoke", name, d)
			}
			if !strings.Contains(o.what, "permission_denied") {
				t.Errorf("%s: %s, want permission_denied", name, o.what)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("%s still running 5 s after the revoke", name)
		}
	}
}
