package tabcapture

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/logging"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"
	"github.com/tabcast/tabcast/plugins/capture"
)

const (
	findTimeout   = 4 * time.Second  // the extension's documents must show up by then
	startTimeout  = 10 * time.Second // capture start + signaling
	firstFrameBy  = 10 * time.Second // after a (re)bind
	controlWait   = 3 * time.Second
	offscreenPath = "/offscreen.html"
)

type stream struct {
	c      *Capturer
	log    *slog.Logger
	target capture.Target
	cfg    Config
	send   func(capture.Frame) error

	key    string
	secret string
	wsURL  string // signaling URL handed to the extension (holds the secret)
	addr   string // host:port of the signaling server

	// slot holds the newest admitted frame for the sender (see offer).
	slot *capture.Slot

	mu     sync.Mutex
	frames uint64 // frames of the current binding
	cur    *peer
	w, h   int
	srcW   int // capture source size from the extension; 0 = not known yet
	srcH   int
	// needKey drops delta frames after a drop until the next keyframe.
	needKey  bool
	askedKey time.Time
	lost     uint64 // frames (VP8) or RTP packets (H.264) lost before the slot
	stale    uint64 // repeated or late VP8 frames skipped

	ended   chan error // cap 1: the current binding's peer ended
	sendErr chan error
	quit    chan struct{}
}

// peer is one binding: the extension's signaling socket and our Pion peer.
type peer struct {
	ws      *websocket.Conn
	wmu     sync.Mutex
	pc      *webrtc.PeerConnection
	mu      sync.Mutex
	ssrc    uint32
	nextID  int
	waiters map[int]chan string
}

func (p *peer) write(ctx context.Context, v any) error {
	b, _ := json.Marshal(v)
	p.wmu.Lock()
	defer p.wmu.Unlock()
	return p.ws.Write(ctx, websocket.MessageText, b)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Stream captures the target's tab and calls send with each encoded frame
// (a slot of one: frames the consumer is too slow for are replaced, never
// queued). It returns nil when ctx ends, and an error when capture cannot
// start (no extension, no tab, no first frame within 10 s) or stops twice.
func (c *Capturer) Stream(ctx context.Context, t capture.Target, send func(capture.Frame) error) error {
	if c.Life().Err() != nil {
		return errors.New("capture-tab: shut down")
	}
	if err := checkTarget(t); err != nil {
		return fmt.Errorf("capture-tab: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.Life(), cancel)()

	s := &stream{
		c: c, log: c.log.With("session", t.SessionID, "target", t.TargetID), target: t, cfg: c.Config(), send: send,
		key: randHex(8), secret: randHex(32),
		slot: capture.NewSlot(), ended: make(chan error, 1), sendErr: make(chan error, 1), quit: make(chan struct{}),
	}
	c.mu.Lock()
	if _, dup := c.streams[t.SessionID]; dup {
		c.mu.Unlock()
		return capture.AlreadyStreaming(t.SessionID)
	}
	c.streams[t.SessionID] = s
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.streams, t.SessionID)
		c.mu.Unlock()
	}()
	return s.run(ctx)
}

func checkTarget(t capture.Target) error {
	if t.TargetID == "" {
		return errors.New("target: empty TargetID")
	}
	u, err := url.Parse(t.BrowserWSURL)
	if err != nil {
		return fmt.Errorf("target: BrowserWSURL: %w", err)
	}
	if u.Scheme != "ws" {
		return fmt.Errorf("target: BrowserWSURL scheme %q, want ws", u.Scheme)
	}
	if ip := net.ParseIP(u.Hostname()); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target: BrowserWSURL host %q is not a loopback address", u.Hostname())
	}
	return nil
}

func (s *stream) run(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("capture-tab: signaling listener: %w", err)
	}
	s.addr = ln.Addr().String()
	s.wsURL = "ws://" + s.addr + "/signal/" + s.key + "?secret=" + s.secret
	var hwg sync.WaitGroup
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hwg.Add(1)
		defer hwg.Done()
		s.serveSignal(ctx, w, r)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()

	cdpCtx, cancelCDP := context.WithTimeout(ctx, findTimeout)
	conn, err := dialCDP(cdpCtx, s.target.BrowserWSURL, nil)
	cancelCDP()
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := s.slot.Send(s.quit, s.send); err != nil {
			s.sendErr <- err
		}
	})
	defer func() {
		close(s.quit)
		wg.Wait()
		seq, dropped := s.slot.Counts()
		s.mu.Lock()
		s.log.Info("stream ended", "frames", seq, "dropped", dropped, "lost", s.lost, "stale", s.stale)
		s.mu.Unlock()
		_ = srv.Close()
		s.closePeer()
		hwg.Wait()
		if conn != nil {
			conn.close()
		}
	}()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("capture-tab: connect to the browser: %w", err)
	}

	for attempt := 0; ; attempt++ {
		err := s.bind(ctx, conn)
		if ctx.Err() != nil {
			return nil
		}
		select {
		case serr := <-s.sendErr:
			return serr
		default:
		}
		s.mu.Lock()
		hadFrames := s.frames > 0
		s.mu.Unlock()
		if attempt == 0 && hadFrames {
			s.log.Warn("tab capture stopped; rebinding once", "err", err)
			continue
		}
		if attempt > 0 {
			return fmt.Errorf("capture-tab: capture stopped again after a rebind: %w", err)
		}
		return fmt.Errorf("capture-tab: %w", err)
	}
}

// bind starts one capture of the tab and waits until it ends.
func (s *stream) bind(ctx context.Context, conn *cdpConn) error {
	s.closePeer()
	select {
	case <-s.ended:
	default:
	}
	s.mu.Lock()
	s.frames = 0
	s.mu.Unlock()

	off, err := s.offscreen(ctx, conn)
	if err != nil {
		return err
	}
	if err := s.start(ctx, conn, off); err != nil {
		return err
	}
	first := time.NewTimer(firstFrameBy)
	defer first.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-s.sendErr:
			s.sendErr <- err
			return err
		case err := <-s.ended:
			return err
		case <-first.C:
			s.mu.Lock()
			n := s.frames
			s.mu.Unlock()
			if n == 0 {
				return fmt.Errorf("no frame within %v of starting the capture", firstFrameBy)
			}
		}
	}
}

// offscreen finds the extension's offscreen document and attaches to it,
// asking the service worker to (re)create it when it is missing.
func (s *stream) offscreen(ctx context.Context, conn *cdpConn) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, findTimeout)
	defer cancel()
	prefix := "chrome-extension://" + ExtensionID + "/"
	seen := false // any document of the extension
	for {
		ts, err := conn.targets(ctx)
		if err != nil && ctx.Err() == nil {
			return "", fmt.Errorf("list targets: %w", err)
		}
		sw, off := "", ""
		for _, t := range ts {
			if t.URL == prefix+offscreenPath[1:] {
				off = t.TargetID
			}
			if t.Type == "service_worker" && strings.HasPrefix(t.URL, prefix) {
				sw = t.TargetID
			}
		}
		seen = seen || sw != "" || off != ""
		switch {
		case ctx.Err() != nil:
		case off != "":
			// The target shows up before its script ran.
			sess, err := conn.attach(ctx, off)
			if err == nil {
				var ok bool
				if err = conn.evaluate(ctx, sess, "typeof tabcastStart === 'function'", &ok); err == nil && ok {
					return sess, nil
				}
				_ = conn.call(ctx, "", "Target.detachFromTarget", map[string]any{"sessionId": sess}, nil)
			}
		case sw != "":
			if sess, err := conn.attach(ctx, sw); err == nil {
				err = conn.evaluate(ctx, sess, "self.tabcast && self.tabcast.ensure()", nil)
				_ = conn.call(ctx, "", "Target.detachFromTarget", map[string]any{"sessionId": sess}, nil)
				if err != nil {
					s.log.Debug("ensure offscreen document", "err", err)
				}
			}
		}
		select {
		case <-ctx.Done():
			if !seen {
				return "", fmt.Errorf("the capture extension %s is not running in this browser "+
					"(was Chromium launched with the plugin's ChromiumFlags?)", ExtensionID)
			}
			return "", errors.New("the capture extension's offscreen document did not become ready")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start picks the tab and starts the capture in the offscreen document.
// The tab is chosen by Chromium's --auto-select-tab-capture-source-by-title:
// for the duration of the getDisplayMedia call the page's title is our
// marker, then the old title is restored. Streams pick one at a time.
func (s *stream) start(ctx context.Context, conn *cdpConn, off string) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	s.c.pickMu.Lock()
	defer s.c.pickMu.Unlock()
	page, err := conn.attach(ctx, s.target.TargetID)
	if err != nil {
		return fmt.Errorf("attach to target %s: %w", s.target.TargetID, err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = conn.call(dctx, "", "Target.detachFromTarget", map[string]any{"sessionId": page}, nil)
	}()
	// The page may still be loading: its <title> can be parsed at any
	// moment. The mark therefore reads the title and whether a title
	// element exists in the same call that sets the marker; when none
	// existed, the marker created the first one, and the restore removes
	// it (writing "" into it would hide the page's own title for good: the
	// panel showed "" after a navigation), else it writes the title back.
	// A plain read comes first, as it always did (marking in the very
	// first call after attaching left a crashed tab's reload without a
	// picked capture in 3 of 3 runs).
	var first string
	if err := conn.evaluate(ctx, page, "document.title", &first); err != nil {
		return fmt.Errorf("read title: %w", err)
	}
	mk, _ := json.Marshal(s.c.marker)
	var mark struct {
		Old string `json:"old"`
		Had bool   `json:"had"`
	}
	if err := conn.evaluate(ctx, page, `(() => { const r = {old: document.title, had: document.querySelector("title") !== null}; document.title = `+string(mk)+`; return r; })()`, &mark); err != nil {
		return fmt.Errorf("mark title: %w", err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"key": s.key, "wsURL": s.wsURL, "width": s.target.Width, "height": s.target.Height,
		"maxFps": s.cfg.MaxFPS, "maxBitrateKbps": s.cfg.MaxBitrateKbps, "codec": s.cfg.Codec,
	})
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception *struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	err = conn.call(ctx, off, "Runtime.evaluate", map[string]any{
		"expression": "tabcastStart(" + string(cfg) + ")", "awaitPromise": true, "returnByValue": true, "userGesture": true,
	}, &r)
	ot, _ := json.Marshal(mark.Old)
	restore := `(() => { if (document.title !== ` + string(mk) + `) return; document.title = ` + string(ot) + `; })()`
	if !mark.Had {
		restore = `(() => { const t = document.querySelector("title"); if (t && t.textContent === ` + string(mk) + `) t.remove(); })()`
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer rcancel()
	if rerr := conn.evaluate(rctx, page, restore, nil); rerr != nil {
		s.log.Warn("restore title", "err", rerr)
	}
	if err != nil {
		return fmt.Errorf("start capture: %w", err)
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Text
		if e.Exception != nil {
			msg = e.Exception.Description
		}
		return fmt.Errorf("start capture: %s", msg)
	}
	return nil
}

// serveSignal is the loopback signaling socket of the offscreen document.
// Only the extension's origin with this stream's secret gets in.
func (s *stream) serveSignal(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/signal/"+s.key {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Origin") != "chrome-extension://"+ExtensionID {
		http.Error(w, "forbidden origin", http.StatusForbidden)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("secret")), []byte(s.secret)) != 1 {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true}) // Origin checked above
	if err != nil {
		return
	}
	err = s.runPeer(ctx, ws)
	_ = ws.Close(websocket.StatusNormalClosure, "")
	select {
	case s.ended <- err:
	default:
	}
}

func (s *stream) api() (*webrtc.API, error) {
	m := &webrtc.MediaEngine{}
	fb := []webrtc.RTCPFeedback{{Type: "goog-remb"}, {Type: "ccm", Parameter: "fir"}, {Type: "nack"}, {Type: "nack", Parameter: "pli"}, {Type: "transport-cc"}}
	// The browser reads its encoder's start and floor bitrate from our
	// answer: on loopback its bandwidth estimate would otherwise start at
	// ~300 kbit/s and show a smeared picture for seconds.
	rate := fmt.Sprintf("x-google-start-bitrate=%d;x-google-min-bitrate=%d", s.cfg.MaxBitrateKbps, min(s.cfg.MaxBitrateKbps/2, 1000))
	var c webrtc.RTPCodecParameters
	if s.cfg.Codec == "h264" {
		c = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
			SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f;" + rate, RTCPFeedback: fb}, PayloadType: 102}
	} else {
		c = webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000, SDPFmtpLine: rate, RTCPFeedback: fb}, PayloadType: 96}
	}
	if err := m.RegisterCodec(c, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, err
	}
	// RTX lets the browser retransmit what the NACK interceptor asks for
	// (Pion folds the repair stream back into the track); without it a lost
	// packet costs a frame and a keyframe.
	rtx := webrtc.RTPCodecParameters{RTPCodecCapability: webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeRTX, ClockRate: 90000,
		SDPFmtpLine: fmt.Sprintf("apt=%d", c.PayloadType)}, PayloadType: c.PayloadType + 1}
	if err := m.RegisterCodec(rtx, webrtc.RTPCodecTypeVideo); err != nil {
		return nil, err
	}
	ir := &interceptor.Registry{}
	if err := webrtc.RegisterDefaultInterceptors(m, ir); err != nil {
		return nil, err
	}
	se := webrtc.SettingEngine{}
	lf := logging.NewDefaultLoggerFactory()
	lf.Writer = logWriter{s.log}
	se.LoggerFactory = lf
	se.SetIncludeLoopbackCandidate(true)
	se.SetIPFilter(func(ip net.IP) bool { return ip.IsLoopback() })
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	return webrtc.NewAPI(webrtc.WithMediaEngine(m), webrtc.WithInterceptorRegistry(ir), webrtc.WithSettingEngine(se)), nil
}

type sigMsg struct {
	Type      string                   `json:"type"`
	SDP       string                   `json:"sdp,omitempty"`
	Candidate *webrtc.ICECandidateInit `json:"candidate,omitempty"`
	Reason    string                   `json:"reason,omitempty"`
	Error     string                   `json:"error,omitempty"`
	ID        int                      `json:"id,omitempty"`
	// Width and Height of a "size" message: the capture source's size.
	Width  int `json:"width,omitempty"`
	Height int `json:"height,omitempty"`
}

func (s *stream) runPeer(ctx context.Context, ws *websocket.Conn) error {
	api, err := s.api()
	if err != nil {
		return err
	}
	pc, err := api.NewPeerConnection(webrtc.Configuration{})
	if err != nil {
		return err
	}
	p := &peer{ws: ws, pc: pc, waiters: map[int]chan string{}}
	s.mu.Lock()
	old := s.cur
	s.cur = p
	s.mu.Unlock()
	if old != nil {
		_ = old.pc.Close()
	}
	failed := make(chan error, 1)
	var twg sync.WaitGroup
	defer func() {
		_ = pc.Close()
		twg.Wait()
	}()
	pc.OnConnectionStateChange(func(st webrtc.PeerConnectionState) {
		if st == webrtc.PeerConnectionStateFailed {
			select {
			case failed <- errors.New("peer connection failed"):
			default:
			}
		}
	})
	pc.OnTrack(func(tr *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		p.mu.Lock()
		p.ssrc = uint32(tr.SSRC())
		p.mu.Unlock()
		twg.Add(1)
		go func() {
			defer twg.Done()
			s.readTrack(tr)
		}()
	})
	msgs := make(chan sigMsg, 16)
	readErr := make(chan error, 1)
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				readErr <- err
				close(msgs)
				return
			}
			var m sigMsg
			if json.Unmarshal(b, &m) == nil {
				msgs <- m
			}
		}
	}()
	defer func() {
		_ = ws.CloseNow()
		for range msgs {
		}
	}()
	for {
		select {
		case <-ctx.Done():
			_ = p.write(context.Background(), sigMsg{Type: "stop"})
			return nil
		case err := <-failed:
			return err
		case m, ok := <-msgs:
			if !ok {
				return fmt.Errorf("the offscreen document went away: %v", <-readErr)
			}
			switch m.Type {
			case "offer":
				if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: m.SDP}); err != nil {
					return fmt.Errorf("offer: %w", err)
				}
				ans, err := pc.CreateAnswer(nil)
				if err != nil {
					return fmt.Errorf("answer: %w", err)
				}
				// The answer carries our (loopback, instant) candidates.
				gathered := webrtc.GatheringCompletePromise(pc)
				if err := pc.SetLocalDescription(ans); err != nil {
					return fmt.Errorf("answer: %w", err)
				}
				select {
				case <-gathered:
				case <-ctx.Done():
					return nil
				}
				if err := p.write(ctx, sigMsg{Type: "answer", SDP: pc.LocalDescription().SDP}); err != nil {
					return err
				}
			case "candidate":
				if m.Candidate != nil && !strings.Contains(m.Candidate.Candidate, ".local") {
					if err := pc.AddICECandidate(*m.Candidate); err != nil {
						s.log.Debug("remote candidate", "err", err)
					}
				}
			case "ended":
				return fmt.Errorf("capture ended: %s", m.Reason)
			case "paramsResult":
				p.mu.Lock()
				ch := p.waiters[m.ID]
				delete(p.waiters, m.ID)
				p.mu.Unlock()
				if ch != nil {
					ch <- m.Error
				}
			case "size":
				if m.Width > 0 && m.Height > 0 && m.Width <= 16384 && m.Height <= 16384 {
					s.mu.Lock()
					s.srcW, s.srcH = m.Width, m.Height
					s.mu.Unlock()
				}
			case "error":
				s.log.Warn("extension error", "err", m.Error)
			}
		}
	}
}

func (s *stream) closePeer() {
	s.mu.Lock()
	p := s.cur
	s.cur = nil
	s.mu.Unlock()
	if p != nil {
		_ = p.pc.Close()
		_ = p.ws.CloseNow()
	}
}

// readTrack depacketizes the browser's RTP into whole encoded frames.
func (s *stream) readTrack(tr *webrtc.TrackRemote) {
	mime := strings.ToLower(tr.Codec().MimeType)
	var dep rtp.Depacketizer
	format := capture.FormatVP8
	switch mime {
	case strings.ToLower(webrtc.MimeTypeVP8):
		dep = &codecs.VP8Packet{}
	case strings.ToLower(webrtc.MimeTypeH264):
		dep = &codecs.H264Packet{}
		format = capture.FormatH264
	default:
		s.log.Warn("unsupported codec", "codec", mime)
		return
	}
	// VP8 frames carry a PictureID (+1 per frame): a gap is a lost frame,
	// exactly. For H.264 the sample builder's drop count (minus the BWE
	// padding it also counts) is the sign.
	type head struct {
		pid   uint16
		hasID bool
	}
	sb := samplebuilder.New(512, dep, tr.Codec().ClockRate, samplebuilder.WithPacketHeadHandler(func(h any) any {
		if p, ok := h.(*codecs.VP8Packet); ok && p.I == 1 {
			return head{pid: p.PictureID, hasID: true}
		}
		return head{}
	}))
	var padding, dropped, lostSeen int64
	var lastPID uint16
	havePID, staleRun := false, 0
	for {
		pkt, _, err := tr.ReadRTP()
		if err != nil {
			return
		}
		if len(pkt.Payload) == 0 {
			padding++
		}
		sb.Push(pkt)
		if pkt.Marker {
			// The marker ends a frame: hand it out now. Left alone, the
			// sample builder waits for the next frame's first packet, and
			// a still page sends its next frame only a second later (a
			// click's repaint reached the viewer 1 s late).
			sb.Flush()
		}
		for smp := sb.Pop(); smp != nil; smp = sb.Pop() {
			h, _ := smp.Metadata.(head)
			if h.hasID {
				// Chromium sends the 15-bit PictureID. A step of one is
				// the next frame; a step forward of more is a loss. A
				// step of zero or backwards (the upper half of the ring)
				// is a repeat or a late frame (a retransmission that
				// came after the marker's flush): stale, so it is
				// skipped, and it is no loss — counting it as one (a
				// step of 32767) dropped every delta until the next
				// keyframe and stormed Chromium with PLIs.
				// maxStaleRun frames "behind" in a row mean the sender's
				// numbering jumped (never seen; cheap to survive).
				const mask, maxStaleRun = 0x7fff, 30
				if havePID {
					step := (h.pid - lastPID) & mask
					if (step == 0 || step >= mask/2) && staleRun < maxStaleRun {
						staleRun++
						s.noteStale()
						continue
					}
					switch {
					case staleRun == maxStaleRun:
						// Not stale after all: the numbering restarted.
						// Start again from here, from a keyframe.
						s.lostFrames(1)
					case step > 1:
						s.lostFrames(int(step - 1))
					}
					staleRun = 0
				}
				lastPID, havePID = h.pid, true
			} else {
				dropped += int64(smp.PrevDroppedPackets)
				if lost := dropped - padding; lost > lostSeen {
					s.lostFrames(int(lost - lostSeen))
					lostSeen = lost
				}
			}
			if len(smp.Data) == 0 {
				continue
			}
			f := capture.Frame{Format: format, Data: smp.Data, CaptureTime: time.Now()}
			if format == capture.FormatVP8 {
				f.Keyframe = smp.Data[0]&1 == 0
				if f.Keyframe && len(smp.Data) >= 10 {
					w := int(smp.Data[6]) | int(smp.Data[7])<<8
					h := int(smp.Data[8]) | int(smp.Data[9])<<8
					s.mu.Lock()
					s.w, s.h = w&0x3fff, h&0x3fff
					s.mu.Unlock()
				}
			} else {
				f.Keyframe = h264Key(smp.Data)
			}
			s.offer(f)
		}
	}
}

// h264Key reports an IDR or SPS NAL unit in Annex-B data.
func h264Key(b []byte) bool {
	for i := 0; i+3 < len(b); i++ {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			if t := b[i+3] & 0x1f; t == 5 || t == 7 {
				return true
			}
		}
	}
	return false
}

// offer puts f in the slot of one. Encoded video cannot lose a frame and
// stay decodable, so when the consumer is behind, the unsent frame stays,
// the new delta frame is dropped (counted), later deltas are dropped until
// a keyframe, and a keyframe is asked for. A keyframe always replaces.
func (s *stream) offer(f capture.Frame) {
	s.mu.Lock()
	s.frames++
	f.Width, f.Height = s.w, s.h
	if s.srcW > 0 {
		// The source's size, not the encoder's (which scales down under
		// load): the core sizes the tab's window by it.
		f.Width, f.Height = s.srcW, s.srcH
	}
	ask := false
	// Lock order: s.mu, then the slot's (admit runs under both).
	s.slot.Offer(f, func(waiting bool) bool {
		if f.Keyframe {
			s.needKey = false
			return true
		}
		if !s.needKey && !waiting {
			return true
		}
		ask = !s.needKey || time.Since(s.askedKey) > 500*time.Millisecond
		s.needKey = true
		if ask {
			s.askedKey = time.Now()
		}
		return false
	})
	p := s.cur
	s.mu.Unlock()
	if ask && p != nil {
		go p.pli()
	}
}

// noteStale counts a repeated or late frame that was skipped.
func (s *stream) noteStale() {
	s.mu.Lock()
	s.stale++
	s.mu.Unlock()
}

// lostFrames drops deltas until the next keyframe and asks for one.
func (s *stream) lostFrames(n int) {
	s.mu.Lock()
	s.lost += uint64(n)
	ask := !s.needKey || time.Since(s.askedKey) > 500*time.Millisecond
	s.needKey = true
	if ask {
		s.askedKey = time.Now()
	}
	p := s.cur
	s.mu.Unlock()
	s.log.Debug("frames lost; waiting for a keyframe", "n", n)
	if ask && p != nil {
		go p.pli()
	}
}

func (p *peer) pli() error {
	p.mu.Lock()
	ssrc := p.ssrc
	p.mu.Unlock()
	return p.pc.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: ssrc}})
}

func (s *stream) control(ctx context.Context, sc capture.StreamControl) error {
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil {
		return errors.New("capture-tab: stream is not connected")
	}
	if sc.Keyframe {
		if err := p.pli(); err != nil {
			return fmt.Errorf("capture-tab: keyframe request: %w", err)
		}
	}
	if sc.MaxBitrateKbps > 0 || sc.MaxFPS > 0 {
		ch := make(chan string, 1)
		p.mu.Lock()
		p.nextID++
		id := p.nextID
		p.waiters[id] = ch
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(ctx, controlWait)
		defer cancel()
		if err := p.write(ctx, map[string]any{"type": "params", "id": id, "maxBitrateKbps": sc.MaxBitrateKbps, "maxFps": sc.MaxFPS}); err != nil {
			return fmt.Errorf("capture-tab: set parameters: %w", err)
		}
		select {
		case e := <-ch:
			if e != "" {
				return fmt.Errorf("capture-tab: set parameters: %s", e)
			}
		case <-ctx.Done():
			return fmt.Errorf("capture-tab: set parameters: %w", ctx.Err())
		}
	}
	return nil
}

// logWriter routes Pion's log lines to the plugin's logger at debug level
// (plugin stderr carries JSON lines only).
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(b []byte) (int, error) {
	w.log.Debug("pion: " + strings.TrimSpace(string(b)))
	return len(b), nil
}
