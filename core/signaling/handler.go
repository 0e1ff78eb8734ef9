package signaling

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/telemetry"
	"github.com/tabcast/tabcast/core/viewer"
	"github.com/tabcast/tabcast/core/wire"
)

// Sessions is what signaling needs of the sessions: *session.Manager
// satisfies it directly (core/viewer holds the types both sides name).
type Sessions interface {
	// Codecs lists the codecs the session can produce, preferred first,
	// e.g. ["h264","vp8"]. The error wraps viewer.ErrSessionNotFound for
	// an unknown id.
	Codecs(sessionID string) ([]string, error)
	// Join subscribes one viewer; it may return an error wrapping
	// viewer.ErrCapacity or viewer.ErrSessionNotFound. The subscription's
	// Leave must be called once when the viewer goes.
	Join(sessionID string, r viewer.Request) (viewer.Subscription, error)
}

// StatusSource is implemented by subscriptions that can describe their
// session (core/session.Status): the viewer then gets a "snapshot" message
// after the welcome and whenever the revision moves (state, page,
// audience), so a panel never polls.
type StatusSource interface {
	Status() (revision uint64, status any)
}

// statusEvery is how often a connection looks for a new revision.
const statusEvery = 500 * time.Millisecond

// WebSocket close codes used besides the standard ones.
const (
	// CloseSessionNotFound closes a socket whose session does not exist.
	CloseSessionNotFound websocket.StatusCode = 4404
	// ClosePermissionDenied closes a socket whose viewer's access was
	// withdrawn (error permission_denied comes before it).
	ClosePermissionDenied websocket.StatusCode = 4403
)

// Timing of a connection.
const (
	defaultPingInterval = 20 * time.Second
	pingTimeout         = 10 * time.Second
	writeTimeout        = 10 * time.Second
	helloTimeout        = 10 * time.Second
	// queueSize bounds frames waiting for the writer; a viewer that lets it
	// fill is too slow and is dropped.
	queueSize = 64
)

// Options configures a Handler.
type Options struct {
	Sessions Sessions
	Peers    *peer.Factory
	Logger   *slog.Logger
	// OriginPatterns lists extra browser origins (host patterns, see
	// websocket.AcceptOptions) allowed to open the socket; same-origin
	// requests and non-browser clients are always allowed.
	OriginPatterns []string
	// ICEServers, if set, is asked for every new peer's TURN servers (with
	// credentials scoped to the viewer, session, peer and its generation);
	// revoke is called once when the peer goes. An error leaves the viewer
	// without TURN (direct paths only), it does not refuse it.
	ICEServers func(ctx context.Context, v Viewer, sessionID, peerID string, generation uint64) (servers []ICEServer, revoke func(), err error)
	// RelayOnly is announced to viewers as iceTransportPolicy "relay".
	RelayOnly bool
	// PingInterval is the WebSocket keepalive period (default 20 s); a
	// ping unanswered for 10 s (or one period, if shorter) drops the socket.
	PingInterval time.Duration
	// Telemetry counts peer connections and ICE restarts; nil = none.
	Telemetry *telemetry.Metrics
}

// Handler serves the signaling WebSocket. Mount it on a pattern with an
// {id} wildcard: /api/v1/sessions/{id}/signal.
type Handler struct {
	o      Options
	log    *slog.Logger
	ctx    context.Context // canceled by Close: every connection shuts down
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup // one per ServeHTTP in flight

	// connGen numbers peers (welcome's connectionGeneration). Seeded from
	// the clock so numbers are not reused across restarts, and below 2^53
	// so JavaScript holds them exactly.
	connGen atomic.Uint64
}

// NewHandler returns the signaling handler. It is a *Handler (an
// http.Handler) so the owner can Close it.
func NewHandler(o Options) *Handler {
	log := o.Logger
	if log == nil {
		log = slog.Default()
	}
	if o.PingInterval <= 0 {
		o.PingInterval = defaultPingInterval
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &Handler{o: o, log: log.With("component", "signaling"), ctx: ctx, cancel: cancel}
	h.connGen.Store(uint64(time.Now().UnixMilli()))
	return h
}

// Close closes every open signaling connection (status 1001) and its peer,
// and waits for their goroutines. Later requests get 503.
func (h *Handler) Close() {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// ServeHTTP upgrades to a WebSocket and runs the protocol until the socket
// or the peer ends.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	h.wg.Add(1)
	h.mu.Unlock()
	defer h.wg.Done()

	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: h.o.OriginPatterns})
	if err != nil {
		// Accept has written the HTTP error.
		h.log.Debug("websocket accept failed", "err", err)
		return
	}
	ws.SetReadLimit(ReadLimit)
	c := &conn{
		h:         h,
		ws:        ws,
		sessionID: r.PathValue("id"),
		viewer:    viewerFrom(r.Context()),
		out:       make(chan outFrame, queueSize),
	}
	// Where the viewer is: the ICE filter lets a viewer on the box name
	// loopback candidates, and no one else (core/peer).
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		c.viewerAddr = ap.Addr().Unmap()
	}
	c.log = h.log.With("session", c.sessionID)
	c.run()
}

type phase int

const (
	phaseHello    phase = iota // waiting for hello
	phaseOffered               // offer sent, waiting for the answer
	phaseAnswered              // answer applied; candidates flow
)

// outFrame is one queued frame, or (close set) the request to end the
// socket with a close handshake after the frames before it.
type outFrame struct {
	data   []byte
	close  bool
	code   websocket.StatusCode
	reason string
}

// conn is one signaling socket. The reader runs on the ServeHTTP goroutine,
// one writer goroutine owns every data write; Pion callbacks only enqueue.
type conn struct {
	h         *Handler
	ws        *websocket.Conn
	sessionID string
	viewer    Viewer
	// viewerAddr is the signaling connection's remote address (invalid
	// when it cannot be parsed: the peer then treats the viewer as remote).
	viewerAddr netip.Addr
	revokeICE  func() // ends this peer's TURN credentials
	restarted  bool   // the one ICE restart was tried
	iceGen     uint64 // generation of the relay credentials (connGen, then +1 per restart)
	restarts   atomic.Int32
	log        *slog.Logger
	out        chan outFrame

	ctx    context.Context // canceled when the connection is cleaned up
	cancel context.CancelFunc

	mu        sync.Mutex
	phase     phase
	codec     string
	peer      *peer.Peer
	sub       viewer.Subscription // the viewer's place in the session, from hello on
	offerSent bool
	pending   []webrtc.ICECandidateInit // local candidates gathered before the offer went out
	// early: the viewer's candidates that arrived while an offer (first or
	// ICE restart) waited for its answer. A viewer may trickle its first
	// candidate before its answer is on the wire (its gathering runs beside
	// its signaling); applied once the answer is, not refused.
	early   []webrtc.ICECandidateInit
	closing bool // no more frames are queued

	connGen         uint64
	producer        viewer.Producer // nil: view-only, or not yet granted
	producerClosed  bool            // Producer.Close was called (or is being called)
	inputDenied     bool            // the viewer's right to act was withdrawn
	withdrawn       bool            // the viewer's access was withdrawn: the connection ends
	stateHeld       []heldState     // state events that came before the peer existed
	producerEndOnce sync.Once

	// For telemetry: when the peer was made, whether its outcome (connected
	// or failed) was counted, whether an ICE restart is under way.
	peerStart  time.Time
	outcome    bool
	restarting bool
}

func (c *conn) run() {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writer()
	}()
	accessDone := make(chan struct{})
	if a := c.viewer.Access; a != nil {
		// What the viewer may do when it arrives holds before its hello.
		c.applyAccess(a)
		go func() {
			defer close(accessDone)
			c.watchAccess(a)
		}()
	} else {
		close(accessDone)
	}
	start := time.Now()
	reason := c.serve()
	c.cancel()
	<-writerDone
	<-accessDone

	c.mu.Lock()
	p, sub, codec := c.peer, c.sub, c.codec
	c.closing = true
	c.mu.Unlock()
	var stats peer.Stats
	var in peer.InputStats
	if p != nil {
		stats = p.Stats()
		in = p.InputStats()
		if err := p.Close(); err != nil {
			c.log.Debug("close peer", "err", err)
		}
	}
	// After the peer: no callback submits anything once Close runs.
	c.endProducer("socket closed")
	c.mu.Lock()
	revoke := c.revokeICE
	c.revokeICE = nil
	c.mu.Unlock()
	if revoke != nil {
		revoke() // its TURN credentials stop working now, not at expiry
	}
	if sub != nil {
		sub.Leave()
	}
	_ = c.ws.CloseNow()
	attrs := []any{"reason", reason, "codec", codec, "duration", time.Since(start).Round(time.Millisecond), "ice_restarts", c.restarts.Load()}
	if p != nil {
		attrs = append(attrs, "peer", p.ID(), "bytes_sent", stats.BytesSent, "plis", stats.PLIs)
		if p.Interactive() {
			attrs = append(attrs, "control_in", in.ControlIn, "pointer_in", in.PointerIn,
				"acks_out", in.ControlOut, "state_out", in.StateOut, "state_coalesced", in.StateCoalesced)
		}
	}
	c.log.Info("viewer disconnected", attrs...)
}

// serve looks the session up and reads messages until the socket ends. It
// returns why it ended (for the log).
func (c *conn) serve() string {
	// The session must exist when the socket opens; the viewer joins it
	// at its hello.
	if _, err := c.h.o.Sessions.Codecs(c.sessionID); err != nil {
		if errors.Is(err, viewer.ErrSessionNotFound) {
			c.sendError(errcode.SessionNotFound, "no such session")
			c.closeWith(CloseSessionNotFound, "session not found")
		} else {
			c.log.Warn("session lookup failed", "err", err)
			c.sendError(errcode.Internal, "session lookup failed")
			c.closeWith(websocket.StatusInternalError, "session lookup failed")
		}
		c.drain()
		return "session not found"
	}
	// A socket that never says hello holds a slot for nothing.
	helloTimer := time.AfterFunc(helloTimeout, func() {
		c.mu.Lock()
		ph := c.phase
		c.mu.Unlock()
		if ph == phaseHello {
			c.sendError(errcode.BadState, "no hello in time")
			c.closeWith(websocket.StatusPolicyViolation, "no hello")
		}
	})
	defer helloTimer.Stop()
	for {
		typ, data, err := c.ws.Read(c.ctx)
		if err != nil {
			return readEndReason(err)
		}
		if typ != websocket.MessageText {
			c.sendError(errcode.BadJSON, "binary frames are not accepted")
			continue
		}
		m, err := Decode(data)
		if err != nil {
			c.sendError(errorCode(err), messageOf(err))
			continue
		}
		if err := c.handle(m); err != nil {
			c.sendError(errorCode(err), messageOf(err))
		}
	}
}

// drain reads until the close handshake ends the socket (so the writer's
// Close sees the client's reply).
func (c *conn) drain() {
	for {
		if _, _, err := c.ws.Read(c.ctx); err != nil {
			return
		}
	}
}

func readEndReason(err error) string {
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure:
		return "closed by viewer"
	case websocket.StatusGoingAway:
		return "viewer going away"
	case websocket.StatusMessageTooBig:
		return "message over read limit"
	case -1:
		if errors.Is(err, websocket.ErrMessageTooBig) {
			return "message over read limit"
		}
		return "socket ended"
	default:
		return "closed with status " + websocket.CloseStatus(err).String()
	}
}

func messageOf(err error) string {
	if e, ok := errcode.As(err); ok {
		return e.Message
	}
	return "internal error"
}

func (c *conn) handle(m Message) error {
	switch m.Type {
	case TypeHello:
		return c.hello(m)
	case TypeAnswer:
		return c.answer(m)
	case TypeCandidate:
		return c.candidate(m)
	case TypeKeyframe:
		c.mu.Lock()
		sub, ph := c.sub, c.phase
		c.mu.Unlock()
		if ph == phaseHello || sub == nil {
			return errcode.Newf(errcode.BadState, "keyframe before hello")
		}
		sub.RequestKeyframe()
		return nil
	case TypePing:
		c.send(simpleMsg{Type: TypePong})
		return nil
	case TypeBye:
		c.closeWith(websocket.StatusNormalClosure, "bye")
		return nil
	}
	return errcode.Newf(errcode.UnknownType, "unknown message type")
}

// chooseCodec applies the codec rule of the protocol: auto takes the first
// of the session's codecs (its preference: VP8 when the browser encodes the
// tab itself, else H.264 before VP8) that the viewer has; an explicit codec
// must be on both.
func chooseCodec(want string, viewer, source []string) (string, error) {
	viewerHas := func(c string) bool { return viewer == nil || slices.Contains(viewer, c) }
	both := func(c string) bool { return viewerHas(c) && slices.Contains(source, c) }
	switch want {
	case CodecAuto:
		for _, c := range source {
			if both(c) {
				return c, nil
			}
		}
		return "", errcode.Newf(errcode.CodecUnsupported, "no codec both the viewer and the session support")
	default:
		if !viewerHas(want) {
			return "", errcode.Newf(errcode.CodecUnsupported, "the viewer did not list %s", want)
		}
		if !slices.Contains(source, want) {
			return "", errcode.Newf(errcode.CodecUnsupported, "the session cannot produce %s", want)
		}
		return want, nil
	}
}

func (c *conn) hello(m Message) error {
	c.mu.Lock()
	ph, withdrawn, denied := c.phase, c.withdrawn, c.inputDenied
	c.mu.Unlock()
	if ph != phaseHello {
		return errcode.Newf(errcode.BadState, "second hello")
	}
	if withdrawn {
		return errcode.Newf(errcode.PermissionDenied, "your access to this session was withdrawn")
	}
	codecs, err := c.h.o.Sessions.Codecs(c.sessionID)
	if err != nil {
		if errors.Is(err, viewer.ErrSessionNotFound) {
			return errcode.Newf(errcode.SessionNotFound, "session is gone")
		}
		c.log.Warn("session lookup failed", "err", err)
		return errcode.Newf(errcode.Internal, "session lookup failed")
	}
	codec, err := chooseCodec(m.Codec, m.Codecs, codecs)
	if err != nil {
		return err
	}
	wantInput := m.Interactive && c.viewer.Input && !denied
	sub, err := c.h.o.Sessions.Join(c.sessionID, viewer.Request{Codec: codec, Owner: c.viewer.Name, Interactive: wantInput, OnState: c.onState})
	if err != nil {
		if errors.Is(err, viewer.ErrCapacity) {
			return errcode.Newf(errcode.CapacityExceeded, "no capacity for another viewer")
		}
		if errors.Is(err, viewer.ErrSessionNotFound) {
			return errcode.Newf(errcode.SessionNotFound, "session is gone")
		}
		c.log.Warn("subscribe failed", "codec", codec, "err", err)
		return errcode.Newf(errcode.Internal, "could not start the video")
	}
	in := sub.Producer()
	var inputErr string
	switch {
	case m.Interactive && !wantInput:
		inputErr = errcode.ViewOnly
	case m.Interactive && in == nil:
		// The viewer still watches; welcome says why it cannot act.
		inputErr = inputErrorCode(sub.ProducerErr())
		if inputErr == errcode.Internal {
			c.log.Warn("open input failed", "err", sub.ProducerErr())
		}
	}
	connGen := c.h.connGen.Add(1)
	p, err := c.h.o.Peers.NewPeer(peer.Options{
		Track:             sub.Track(),
		OnKeyframeRequest: sub.RequestKeyframe,
		OnICECandidate:    c.localCandidate,
		OnStateChange:     c.peerState,
		Interactive:       in != nil,
		OnControl:         func(b []byte) { c.onInput(wire.ChannelControl, b) },
		OnPointer:         func(b []byte) { c.onInput(wire.ChannelPointer, b) },
		OnChannel:         c.onChannel,
		OnUnhealthy:       c.onUnhealthy,
		ViewerAddr:        c.viewerAddr,
	})
	if err != nil {
		sub.Leave()
		c.log.Warn("new peer failed", "err", err)
		return errcode.Newf(errcode.Internal, "could not create the peer")
	}
	c.mu.Lock()
	if c.withdrawn {
		// Withdrawn while the peer was being made: it never serves.
		c.mu.Unlock()
		_ = p.Close()
		sub.Leave()
		return errcode.Newf(errcode.PermissionDenied, "your access to this session was withdrawn")
	}
	var late viewer.Producer
	if in != nil && c.producerClosed {
		// The input was withdrawn while it was being opened.
		late, in, inputErr = in, nil, errcode.PermissionDenied
	}
	c.peer, c.sub, c.codec, c.phase = p, sub, codec, phaseOffered
	c.connGen, c.producer = connGen, in
	c.peerStart = time.Now()
	held := c.stateHeld
	c.stateHeld = nil
	for _, ev := range held {
		_ = p.SendState(ev.typ, ev.data)
	}
	// c.log is read by other goroutines without the lock: it is never
	// reassigned, and the peer id goes on this connection's lines here.
	log := c.log.With("peer", p.ID())
	c.mu.Unlock()
	if late != nil {
		late.Close()
	}
	log.Info("viewer connected", "codec", codec, "interactive", in != nil)
	go c.watchSession(sub.Done())
	welcome := welcomeMsg{Type: TypeWelcome, SessionID: c.sessionID, PeerID: p.ID(), Codec: codec,
		ConnectionGeneration: connGen, Interactive: in != nil, InputError: inputErr}
	if c.h.o.RelayOnly {
		welcome.ICETransportPolicy = "relay"
	}
	if c.h.o.ICEServers != nil {
		ictx, cancel := context.WithTimeout(c.ctx, 5*time.Second)
		c.mu.Lock()
		c.iceGen = connGen
		c.mu.Unlock()
		servers, revoke, err := c.h.o.ICEServers(ictx, c.viewer, c.sessionID, p.ID(), connGen)
		cancel()
		if err != nil {
			log.Warn("no TURN credentials for this viewer", "err", err)
		} else {
			welcome.ICEServers = servers
			c.mu.Lock()
			c.revokeICE = revoke
			c.mu.Unlock()
		}
	}
	if in != nil {
		welcome.ProducerID, welcome.ProducerGeneration = in.Grant()
		welcome.PageRevision = in.PageRevision()
	}
	c.send(welcome)
	if src, ok := sub.(StatusSource); ok {
		go c.pushStatus(src)
	}
	go c.reportTransport(sub, p)

	offer, err := p.CreateOffer()
	if err != nil {
		c.log.Warn("create offer failed", "err", err)
		c.sendError(errcode.Internal, "could not create the offer")
		c.closeWith(websocket.StatusInternalError, "offer failed")
		return nil
	}
	// The offer must reach the viewer before any candidate.
	c.mu.Lock()
	c.sendLocked(offerMsg{Type: TypeOffer, SDP: offer})
	for _, cand := range c.pending {
		c.sendLocked(candidateMsg{Type: TypeCandidate, Candidate: cand})
	}
	c.pending, c.offerSent = nil, true
	c.mu.Unlock()
	return nil
}

func (c *conn) answer(m Message) error {
	c.mu.Lock()
	p, ph := c.peer, c.phase
	c.mu.Unlock()
	if ph != phaseOffered {
		return errcode.Newf(errcode.BadState, "answer without a pending offer")
	}
	if err := p.SetAnswer(m.SDP); err != nil {
		switch {
		case errors.Is(err, peer.ErrSDPTooLarge):
			return errcode.Newf(errcode.SDPTooLarge, "sdp over %d bytes", MaxSDPSize)
		case errors.Is(err, peer.ErrBadSDP):
			return errcode.Newf(errcode.BadField, "sdp is not a valid answer to the offer")
		case errors.Is(err, peer.ErrBadState):
			return errcode.Newf(errcode.BadState, "answer without a pending offer")
		default:
			return errcode.Newf(errcode.Internal, "could not apply the answer")
		}
	}
	c.mu.Lock()
	c.phase = phaseAnswered
	early := c.early
	c.early = nil
	c.mu.Unlock()
	for _, cand := range early {
		if err := addCandidate(p, cand); err != nil {
			c.log.Debug("early candidate", "code", err.Code)
		}
	}
	return nil
}

func (c *conn) candidate(m Message) error {
	c.mu.Lock()
	p, ph := c.peer, c.phase
	if ph == phaseOffered {
		defer c.mu.Unlock()
		if len(c.early) >= peer.MaxCandidates {
			return errcode.Newf(errcode.TooManyCandidates, "over %d candidates", peer.MaxCandidates)
		}
		c.early = append(c.early, m.Candidate)
		return nil
	}
	c.mu.Unlock()
	if ph != phaseAnswered {
		return errcode.Newf(errcode.BadState, "candidate before offer")
	}
	if err := addCandidate(p, m.Candidate); err != nil {
		return err
	}
	return nil
}

// addCandidate adds one of the viewer's candidates to p; the error carries
// the protocol code.
func addCandidate(p *peer.Peer, cand webrtc.ICECandidateInit) *errcode.Error {
	if err := p.AddCandidate(cand); err != nil {
		switch {
		case errors.Is(err, peer.ErrTooManyCandidates):
			return errcode.Newf(errcode.TooManyCandidates, "over %d candidates", peer.MaxCandidates)
		case errors.Is(err, peer.ErrBadCandidate):
			return errcode.Newf(errcode.BadField, "candidate does not parse")
		case errors.Is(err, peer.ErrBadState):
			return errcode.Newf(errcode.BadState, "candidate before answer")
		default:
			return errcode.Newf(errcode.Internal, "could not add the candidate")
		}
	}
	return nil
}

// localCandidate is the peer's trickle callback.
func (c *conn) localCandidate(cand webrtc.ICECandidateInit) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.offerSent {
		c.pending = append(c.pending, cand)
		return
	}
	c.sendLocked(candidateMsg{Type: TypeCandidate, Candidate: cand})
}

func (c *conn) sendError(code, msg string) {
	c.send(errorMsg{Type: TypeError, Code: code, Message: msg})
}

func (c *conn) send(v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sendLocked(v)
}

// sendLocked queues one frame; a full queue means the viewer does not read
// fast enough, and it is dropped.
func (c *conn) sendLocked(v any) {
	if c.closing {
		return
	}
	data, err := json.Marshal(v)
	if err != nil {
		c.log.Error("marshal frame", "err", err)
		return
	}
	select {
	case c.out <- outFrame{data: data}:
	default:
		c.closing = true
		c.log.Warn("viewer too slow, dropping it")
		_ = c.ws.CloseNow()
	}
}

// closeWith queues a close handshake after the frames already queued.
func (c *conn) closeWith(code websocket.StatusCode, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closing {
		return
	}
	c.closing = true
	select {
	case c.out <- outFrame{close: true, code: code, reason: reason}:
	default:
		_ = c.ws.CloseNow()
	}
}

// writer owns all writes: frames in order, keepalive pings, the close
// handshake. It ends after a close, on a write error, or when the
// connection is cleaned up; Handler.Close makes it close with 1001.
func (c *conn) writer() {
	ping := time.NewTicker(c.h.o.PingInterval)
	defer ping.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.h.ctx.Done():
			c.mu.Lock()
			c.closing = true
			c.mu.Unlock()
			_ = c.ws.Close(websocket.StatusGoingAway, "server shutting down")
			return
		case <-ping.C:
			ctx, cancel := context.WithTimeout(c.ctx, min(pingTimeout, c.h.o.PingInterval))
			err := c.ws.Ping(ctx)
			cancel()
			if err != nil {
				c.log.Info("keepalive failed", "err", err)
				_ = c.ws.CloseNow()
				return
			}
		case f := <-c.out:
			if f.close {
				_ = c.ws.Close(f.code, f.reason)
				return
			}
			ctx, cancel := context.WithTimeout(c.ctx, writeTimeout)
			err := c.ws.Write(ctx, websocket.MessageText, f.data)
			cancel()
			if err != nil {
				_ = c.ws.CloseNow()
				return
			}
		}
	}
}

// watchSession ends the connection when its session ends, so a viewer never
// watches a frozen picture of a closed session. It stops with the
// connection.
func (c *conn) watchSession(done <-chan struct{}) {
	select {
	case <-done:
		c.sendError(errcode.SessionEnded, "the session ended")
		c.closeWith(websocket.StatusNormalClosure, "session ended")
	case <-c.ctx.Done():
	}
}

// noteFailed counts the peer as failed to connect, if it never connected.
func (c *conn) noteFailed() {
	c.mu.Lock()
	count := c.peer != nil && !c.outcome
	c.outcome = true
	c.mu.Unlock()
	if count {
		c.h.o.Telemetry.PeerFailed()
	}
}
