package signaling_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/peer/peertest"
	"github.com/tabcast/tabcast/core/signaling"
	"github.com/tabcast/tabcast/core/telemetry"
	"github.com/tabcast/tabcast/core/viewer"
)

// clips are encoded once per package run by ffmpeg (real VP8 and H.264).
var clips = map[string]*peertest.Clip{}

func TestMain(m *testing.M) {
	var err error
	if clips, err = peertest.EncodeAll(2, "vp8", "h264"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// testMedia is a session's media made of looping clips.
type testMedia struct {
	codecs   []string
	sources  map[string]*peertest.Source
	full     atomic.Bool
	subs     atomic.Int32
	releases atomic.Int32
	keyReqs  atomic.Int32
	// transport is the newest viewer.Transport a subscription reported.
	transport atomic.Pointer[viewer.Transport]

	// openProducer, when set, grants the producers instead of testProducer
	// (e.g. one on a real dispatcher).
	openProducer func(r viewer.Request) (viewer.Producer, error)

	inputFull atomic.Bool // the producer is refused with ErrCapacity
	inputOff  atomic.Bool // the producer is refused with ErrNotInteractive
	inputMu   sync.Mutex
	inputs    []*testProducer

	endOnce sync.Once
	done    chan struct{}
}

// grantInput grants producer "prod-N", generation 1, and pushes the first
// page_state at once (before the peer exists), as a session would.
func (m *testMedia) grantInput(owner string, onState func(action.StateEvent)) (*testProducer, error) {
	if owner != "local" {
		return nil, fmt.Errorf("owner %q", owner)
	}
	if m.inputFull.Load() {
		return nil, fmt.Errorf("producers: %w", viewer.ErrCapacity)
	}
	if m.inputOff.Load() {
		return nil, fmt.Errorf("watch only: %w", viewer.ErrNotInteractive)
	}
	m.inputMu.Lock()
	in := &testProducer{id: fmt.Sprintf("prod-%d", len(m.inputs)+1), onState: onState,
		submits: make(chan action.Envelope, 4096)}
	m.inputs = append(m.inputs, in)
	m.inputMu.Unlock()
	in.gen.Store(1)
	in.pageRev.Store(1)
	in.pushPage("https://example.test/", "Example")
	return in, nil
}

// lastProducer returns the newest grant.
func (m *testMedia) lastProducer() *testProducer {
	m.inputMu.Lock()
	defer m.inputMu.Unlock()
	if len(m.inputs) == 0 {
		return nil
	}
	return m.inputs[len(m.inputs)-1]
}

func (m *testMedia) inputCount() int {
	m.inputMu.Lock()
	defer m.inputMu.Unlock()
	return len(m.inputs)
}

// testProducer stands in for the session's dispatcher: it records what is
// submitted and acks like core/dispatch (control: accepted then completed;
// pointer: nothing).
type testProducer struct {
	id      string
	gen     atomic.Uint64
	pageRev atomic.Uint64
	onState func(action.StateEvent)
	submits chan action.Envelope
	revs    atomic.Uint64
	closes  atomic.Int32 // the producer ended (Close is idempotent, as the session's)
	once    sync.Once
}

func (in *testProducer) Grant() (string, uint64) { return in.id, in.gen.Load() }
func (in *testProducer) PageRevision() uint64    { return in.pageRev.Load() }
func (in *testProducer) Close()                  { in.once.Do(func() { in.closes.Add(1) }) }

func (in *testProducer) Submit(e action.Envelope, reply func(action.Ack)) {
	select {
	case in.submits <- e:
	default:
		panic("testProducer: too many submits")
	}
	if e.Action.OnPointerChannel() {
		return
	}
	rev := in.revs.Add(1)
	page := in.pageRev.Load()
	reply(action.Ack{ActionID: e.ActionID, Status: action.StatusAccepted, ActionRevision: rev, PageRevision: page})
	res := &action.Result{PageRevision: page}
	switch e.Action.Kind {
	case action.ClipboardRead:
		res.Text = "copied text"
	case action.Navigate:
		// A top-level navigation: new revision, new page state.
		page = in.pageRev.Add(1)
		res.PageRevision = page
		in.pushPage(e.Action.URL, "Navigated")
	}
	reply(action.Ack{ActionID: e.ActionID, Status: action.StatusCompleted, ActionRevision: rev, PageRevision: page, Result: res})
}

func (in *testProducer) pushPage(url, title string) {
	in.onState(action.StateEvent{Type: "page_state", Payload: map[string]any{
		"url": url, "title": title, "canGoBack": in.pageRev.Load() > 1, "canGoForward": false,
		"loading": false, "pageRevision": in.pageRev.Load(),
	}})
}

// next waits for the next submitted envelope.
func (in *testProducer) next(t *testing.T, d time.Duration) action.Envelope {
	t.Helper()
	select {
	case e := <-in.submits:
		return e
	case <-time.After(d):
		t.Fatalf("nothing submitted within %v", d)
		return action.Envelope{}
	}
}

// none checks that nothing more was submitted.
func (in *testProducer) none(t *testing.T) {
	t.Helper()
	select {
	case e := <-in.submits:
		t.Fatalf("unexpected submit %+v", e)
	default:
	}
}

func (m *testMedia) Codecs() []string { return m.codecs }

// join subscribes a viewer as a session would: the track first, then (if
// asked) the producer, whose refusal leaves the viewer watching.
func (m *testMedia) join(r viewer.Request) (viewer.Subscription, error) {
	if m.full.Load() {
		return nil, fmt.Errorf("session full: %w", viewer.ErrCapacity)
	}
	src, ok := m.sources[r.Codec]
	if !ok {
		return nil, fmt.Errorf("no %s pipeline", r.Codec)
	}
	m.subs.Add(1)
	sub := &testSub{m: m, src: src}
	switch {
	case r.Interactive && m.openProducer != nil:
		sub.in, sub.inErr = m.openProducer(r)
	case r.Interactive:
		in, err := m.grantInput(r.Owner, r.OnState)
		if err == nil {
			sub.in = in
		}
		sub.inErr = err
	}
	return sub, nil
}

// end ends the session, as closing it would.
func (m *testMedia) end() { m.endOnce.Do(func() { close(m.done) }) }

// testSub is one viewer's subscription to a testMedia.
type testSub struct {
	m     *testMedia
	src   *peertest.Source
	in    viewer.Producer // nil: watches only
	inErr error
	once  sync.Once
}

func (s *testSub) Track() webrtc.TrackLocal { return s.src.Track }
func (s *testSub) ProducerErr() error       { return s.inErr }
func (s *testSub) Done() <-chan struct{}    { return s.m.done }

func (s *testSub) Producer() viewer.Producer { return s.in }

func (s *testSub) RequestKeyframe() {
	s.m.keyReqs.Add(1)
	s.src.RequestKeyframe()
}

// ReportTransport keeps the newest report.
func (s *testSub) ReportTransport(t viewer.Transport) { s.m.transport.Store(&t) }

func (s *testSub) Leave() {
	s.once.Do(func() {
		if s.in != nil {
			s.in.Close()
		}
		s.m.releases.Add(1)
	})
}

type testSessions map[string]*testMedia

func (s testSessions) Codecs(id string) ([]string, error) {
	m, ok := s[id]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, viewer.ErrSessionNotFound)
	}
	return m.codecs, nil
}

func (s testSessions) Join(id string, r viewer.Request) (viewer.Subscription, error) {
	m, ok := s[id]
	if !ok {
		return nil, fmt.Errorf("session %q: %w", id, viewer.ErrSessionNotFound)
	}
	return m.join(r)
}

// env is a running signaling server with one session "s1".
type env struct {
	t       *testing.T
	media   *testMedia
	handler *signaling.Handler
	peers   *peer.Factory
	srv     *httptest.Server
	mux     *http.ServeMux
	opts    signaling.Options
	current atomic.Pointer[signaling.Handler]
	// viewer, when set, is who the HTTP layer says is connecting.
	viewer atomic.Pointer[signaling.Viewer]
}

// restartHandler closes the handler (every socket gets 1001) and serves
// with a new one, as an appliance restart would.
func (e *env) restartHandler() {
	old := e.current.Load()
	old.Close()
	e.current.Store(signaling.NewHandler(e.opts))
}

func newEnv(t *testing.T, codecs ...string) *env {
	t.Helper()
	if len(codecs) == 0 {
		codecs = []string{"h264", "vp8"}
	}
	m := &testMedia{codecs: codecs, sources: map[string]*peertest.Source{}, done: make(chan struct{})}
	for _, c := range codecs {
		src, err := peertest.Start(clips[c])
		if err != nil {
			t.Fatal(err)
		}
		m.sources[c] = src
	}
	log := testLogger(t)
	// Short ICE timeouts: a vanished viewer fails in 2 s.
	f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Logger: log,
		DisconnectedTimeout: time.Second, FailedTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	opts := signaling.Options{Sessions: testSessions{"s1": m}, Peers: f, Logger: log, Telemetry: telemetry.New(prometheus.NewRegistry())}
	h := signaling.NewHandler(opts)
	mux := http.NewServeMux()
	e := &env{t: t, media: m, handler: h, peers: f, mux: mux, opts: opts}
	e.current.Store(h)
	// Through a pointer, so a test can replace the handler (restart).
	mux.Handle("GET /api/v1/sessions/{id}/signal", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := e.viewer.Load(); v != nil {
			r = r.WithContext(signaling.WithViewer(r.Context(), *v))
		}
		e.current.Load().ServeHTTP(w, r)
	}))
	e.srv = httptest.NewServer(mux)
	t.Cleanup(e.close)
	return e
}

// close stops everything in order: handler (sockets, peers), server, sources.
func (e *env) close() {
	e.handler.Close()
	e.current.Load().Close()
	e.srv.Close()
	_ = e.peers.Close()
	for _, s := range e.media.sources {
		s.Stop()
	}
}

func (e *env) wsURL(session string) string {
	return "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/api/v1/sessions/" + session + "/signal"
}

// frame is any server frame.
type frame struct {
	Type      string `json:"type"`
	SessionID string `json:"sessionId"`
	PeerID    string `json:"peerId"`
	Codec     string `json:"codec"`

	ConnectionGeneration uint64 `json:"connectionGeneration"`
	Interactive          bool   `json:"interactive"`
	ProducerID           string `json:"producerId"`
	ProducerGeneration   uint64 `json:"producerGeneration"`
	PageRevision         uint64 `json:"pageRevision"`
	InputError           string `json:"inputError"`

	SDP       string                   `json:"sdp"`
	State     string                   `json:"state"`
	Code      string                   `json:"code"`
	Message   string                   `json:"message"`
	Candidate *webrtc.ICECandidateInit `json:"candidate"`
}

// client is a protocol client over coder/websocket; one goroutine reads
// frames into a channel until the socket ends.
type client struct {
	t        *testing.T
	ws       *websocket.Conn
	frames   chan frame
	done     chan struct{}
	closeErr error
}

func dial(t *testing.T, url string) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	ws.SetReadLimit(4 << 20)
	c := &client{t: t, ws: ws, frames: make(chan frame, 256), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() {
		_ = c.ws.CloseNow()
		<-c.done
	})
	return c
}

func (c *client) read() {
	defer close(c.done)
	defer close(c.frames)
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.closeErr = err
			return
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.t.Errorf("server sent bad json: %v", err)
			continue
		}
		c.frames <- f
	}
}

func (c *client) send(v any) {
	c.t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.sendRaw(data)
}

func (c *client) sendRaw(data []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ws.Write(ctx, websocket.MessageText, data); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// next returns the next frame whose type is typ; other frames go to other
// (nil: candidates and states are skipped, anything else fails the test).
func (c *client) next(typ string, d time.Duration, other func(frame)) frame {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case f, ok := <-c.frames:
			if !ok {
				c.t.Fatalf("socket ended waiting for %s: %v", typ, c.closeErr)
			}
			if f.Type == typ {
				return f
			}
			if other != nil {
				other(f)
				continue
			}
			if f.Type != "candidate" && f.Type != "state" {
				c.t.Fatalf("waiting for %s, got %+v", typ, f)
			}
		case <-timeout:
			c.t.Fatalf("no %s frame within %v", typ, d)
		}
	}
}

// expectError waits for an error frame with code.
func (c *client) expectError(code string) frame {
	c.t.Helper()
	f := c.next("error", 5*time.Second, nil)
	if f.Code != code {
		c.t.Fatalf("error code %q (%s), want %q", f.Code, f.Message, code)
	}
	return f
}

// expectPong checks the socket still works.
func (c *client) expectPong() {
	c.t.Helper()
	c.send(map[string]string{"type": "ping"})
	c.next("pong", 5*time.Second, nil)
}

// waitClosed waits for the socket to end and returns its close status.
func (c *client) waitClosed(d time.Duration) websocket.StatusCode {
	c.t.Helper()
	timeout := time.After(d)
	for {
		select {
		case _, ok := <-c.frames:
			if !ok {
				return websocket.CloseStatus(c.closeErr)
			}
		case <-timeout:
			c.t.Fatalf("socket still open after %v", d)
		}
	}
}

// rtcViewer is a client plus a Pion receiver speaking the whole protocol.
type rtcViewer struct {
	*client
	recv *peertest.Receiver

	mu      sync.Mutex
	answer  bool
	pending []webrtc.ICECandidateInit
	states  []string
	errors  []frame
}

// connect says hello, answers the offer, trickles candidates both ways and
// waits for the "connected" state frame. It returns the welcome frame.
func connectViewer(t *testing.T, url string, hello map[string]any) (*rtcViewer, frame) {
	t.Helper()
	return connectViewerWith(t, url, hello, nil)
}

// connectViewerWith is connectViewer with a hook that sets the receiver up
// before it answers (e.g. to take the input DataChannels).
func connectViewerWith(t *testing.T, url string, hello map[string]any, setup func(*peertest.Receiver)) (*rtcViewer, frame) {
	t.Helper()
	v := &rtcViewer{client: dial(t, url)}
	v.send(hello)
	welcome := v.next("welcome", 5*time.Second, nil)
	offer := v.next("offer", 5*time.Second, nil)
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, v.localCandidate)
	if err != nil {
		t.Fatal(err)
	}
	v.recv = recv
	t.Cleanup(func() { _ = recv.Close() })
	if setup != nil {
		setup(recv)
	}
	answer, err := recv.Answer(offer.SDP)
	if err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	v.send(map[string]any{"type": "answer", "sdp": answer})
	for _, c := range v.pending {
		v.send(map[string]any{"type": "candidate", "candidate": c})
	}
	v.answer, v.pending = true, nil
	v.mu.Unlock()
	v.waitState("connected", 10*time.Second)
	return v, welcome
}

func (v *rtcViewer) localCandidate(c webrtc.ICECandidateInit) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.answer {
		v.pending = append(v.pending, c)
		return
	}
	// Runs on a Pion goroutine: no t.Fatal here, the socket may be gone.
	data, _ := json.Marshal(map[string]any{"type": "candidate", "candidate": c})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = v.ws.Write(ctx, websocket.MessageText, data)
}

// handle processes frames that arrive while the test waits for another.
func (v *rtcViewer) handle(f frame) {
	switch f.Type {
	case "candidate":
		if f.Candidate == nil {
			v.t.Errorf("candidate frame without candidate")
			return
		}
		if err := v.recv.PC.AddICECandidate(*f.Candidate); err != nil {
			v.t.Errorf("add server candidate: %v", err)
		}
	case "state":
		v.mu.Lock()
		v.states = append(v.states, f.State)
		v.mu.Unlock()
	case "error":
		v.mu.Lock()
		v.errors = append(v.errors, f)
		v.mu.Unlock()
	default:
		v.t.Errorf("unexpected frame %+v", f)
	}
}

// waitState handles frames until a state frame says want.
func (v *rtcViewer) waitState(want string, d time.Duration) {
	v.t.Helper()
	deadline := time.Now().Add(d)
	for {
		f := v.next("state", time.Until(deadline), v.handle)
		v.handle(f)
		if f.State == want {
			return
		}
		if f.State == "failed" || f.State == "closed" {
			v.t.Fatalf("peer %s while waiting for %s", f.State, want)
		}
	}
}

// pump handles frames for d (keeps candidates flowing while a test waits).
func (v *rtcViewer) pump(d time.Duration) {
	timeout := time.After(d)
	for {
		select {
		case f, ok := <-v.frames:
			if !ok {
				return
			}
			v.handle(f)
		case <-timeout:
			return
		}
	}
}

// testLogger logs into the test until it ends (Pion goroutines may still
// log while they wind down).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: testLogLevel}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var testLogLevel = func() slog.Level {
	if os.Getenv("TABCAST_TEST_DEBUG") != "" {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}()
