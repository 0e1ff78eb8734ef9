// Package viewer is a Go WebRTC viewer of a Tabcast session: it speaks the
// signaling protocol (docs/protocol.md) over the WebSocket, receives the
// video track with Pion and rebuilds frames with a samplebuilder. End-to-end
// tests and the benchmark use it as a browser-free viewer.
package viewer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/ice/v4"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"
)

// Frame is one rebuilt video frame.
type Frame struct {
	Arrived  time.Time
	Size     int
	Keyframe bool
}

// Result of watching a session. The JSON form is what cmd/tcviewer prints.
type Result struct {
	Codec      string        `json:"codec"`
	Frames     int           `json:"frames"`
	Keyframes  int           `json:"keyframes"`
	Bytes      int           `json:"bytes"`
	FirstFrame time.Duration `json:"firstFrameNs"`     // from the signaling dial to the first frame
	Errors     []string      `json:"errors,omitempty"` // error frames the appliance sent

	// The selected ICE candidate pair, read from the peer connection's
	// stats just before the viewer hangs up (empty if none was selected).
	// Candidate types are host, srflx, prflx or relay.
	LocalCandidateType  string `json:"localCandidateType,omitempty"`
	RemoteCandidateType string `json:"remoteCandidateType,omitempty"`
	// RelayProtocol is how the viewer reaches its TURN server (udp, tcp or
	// tls) when LocalCandidateType is relay; else empty.
	RelayProtocol string `json:"relayProtocol,omitempty"`
	// LocalProtocol is the candidate's own transport (udp, or tcp for
	// ICE-TCP); a relay candidate's is udp whatever RelayProtocol is.
	LocalProtocol string `json:"localProtocol,omitempty"`
	// LocalAddress and RemoteAddress are the candidates' ip:port.
	LocalAddress  string `json:"localAddress,omitempty"`
	RemoteAddress string `json:"remoteAddress,omitempty"`
	// WelcomeICEServers is how many ICE servers the welcome message carried.
	WelcomeICEServers int `json:"welcomeIceServers,omitempty"`
	// ICERestarts counts the appliance's ICE restart offers.
	ICERestarts int `json:"iceRestarts,omitempty"`
	// Seconds are the frames and bytes of each second after the first
	// frame; MaxGap the longest time between two frames.
	Seconds []Second      `json:"seconds,omitempty"`
	MaxGap  time.Duration `json:"maxGapNs"`
	// Packets counts the RTP packets read; LastPacket is when the last one
	// arrived (from the dial). With ICEStates (the ICE connection state
	// changes, "1.234s connected") they tell a transport that stopped from
	// media that stopped.
	Packets    int           `json:"packets"`
	LastPacket time.Duration `json:"lastPacketNs"`
	ICEStates  []string      `json:"iceStates,omitempty"`
}

// Second is one second of a watch.
type Second struct {
	Frames    int `json:"frames"`
	Keyframes int `json:"keyframes"`
	Bytes     int `json:"bytes"`
	// MaxGap is the longest wait for a frame that arrived in this second
	// (the time since the frame before it).
	MaxGap time.Duration `json:"maxGapNs,omitempty"`
}

// maxSeconds bounds Result.Seconds.
const maxSeconds = 3600

// Options for Watch.
type Options struct {
	// BaseURL is the appliance, e.g. http://127.0.0.1:8080.
	BaseURL   string
	SessionID string
	// Codec is auto, h264 or vp8.
	Codec string
	// For is how long to count frames after the first one arrived.
	For time.Duration
	// OnFrame, if set, sees every frame (called from the receive goroutine).
	OnFrame func(Frame)
	// PLIAfter, if > 0, sends one PLI after that many frames.
	PLIAfter int
	// PLIEvery, if > 0, sends a PLI at that interval from the first frame
	// on (a misbehaving viewer's storm).
	PLIEvery time.Duration
	Header   http.Header
	// Token, if set, is sent as a Bearer token.
	Token string
	// HTTPClient dials the signaling socket (e.g. trusting a test
	// certificate); nil means the default client.
	HTTPClient *http.Client
	// ICEServers configure the viewer's RTCPeerConnection. ICE servers the
	// appliance sends in its welcome message are added to these before the
	// answer is created.
	ICEServers []webrtc.ICEServer
	// ICETransportPolicy is "" or "all" (any candidate) or "relay" (TURN
	// relay candidates only).
	ICETransportPolicy string
	// Interfaces, if set, restricts host candidates to these network
	// interfaces (list "lo" for loopback candidates, which are otherwise
	// left out) and turns mDNS off. Nil keeps Pion's defaults.
	Interfaces []string
	// IgnoreWelcomeICE leaves out the TURN servers the appliance offers
	// (a viewer that cannot or will not use the relay).
	IgnoreWelcomeICE bool
	// AnswerDelay holds each answer back this long after it is made, so that
	// the viewer's first candidates reach the appliance before its answer
	// (a race real viewers run into; the appliance must keep them).
	AnswerDelay time.Duration
}

type message struct {
	Type       string                   `json:"type"`
	ICEServers []wireICEServer          `json:"iceServers,omitempty"`
	Restart    bool                     `json:"restart,omitempty"`
	SDP        string                   `json:"sdp,omitempty"`
	Codec      string                   `json:"codec,omitempty"`
	Codecs     []string                 `json:"codecs,omitempty"`
	Candidate  *webrtc.ICECandidateInit `json:"candidate,omitempty"`
	Code       string                   `json:"code,omitempty"`
	Message    string                   `json:"message,omitempty"`
}

// Watch connects, receives video and returns what arrived. It fails when no
// frame arrives before ctx ends.
func Watch(ctx context.Context, o Options) (Result, error) {
	res := Result{}
	var policy webrtc.ICETransportPolicy
	switch o.ICETransportPolicy {
	case "", "all":
		policy = webrtc.ICETransportPolicyAll
	case "relay":
		policy = webrtc.ICETransportPolicyRelay
	default:
		return res, fmt.Errorf("ICETransportPolicy must be all or relay, not %q", o.ICETransportPolicy)
	}
	start := time.Now()
	wsURL := "ws" + strings.TrimPrefix(o.BaseURL, "http") + "/api/v1/sessions/" + o.SessionID + "/signal"
	hdr := o.Header.Clone()
	if o.Token != "" {
		if hdr == nil {
			hdr = http.Header{}
		}
		hdr.Set("Authorization", "Bearer "+o.Token)
	}
	ws, _, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: hdr, HTTPClient: o.HTTPClient})
	if err != nil {
		return res, fmt.Errorf("dial signaling: %w", err)
	}
	defer ws.CloseNow()
	var wmu sync.Mutex
	send := func(m message) error {
		b, _ := json.Marshal(m)
		wmu.Lock()
		defer wmu.Unlock()
		return ws.Write(ctx, websocket.MessageText, b)
	}

	me := &webrtc.MediaEngine{}
	if err := me.RegisterDefaultCodecs(); err != nil {
		return res, err
	}
	se := webrtc.SettingEngine{}
	if len(o.Interfaces) > 0 {
		allow := map[string]bool{}
		for _, n := range o.Interfaces {
			allow[n] = true
		}
		se.SetInterfaceFilter(func(n string) bool { return allow[n] })
		se.SetIncludeLoopbackCandidate(true)
		se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	}
	api := webrtc.NewAPI(webrtc.WithMediaEngine(me), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{ICEServers: o.ICEServers, ICETransportPolicy: policy})
	if err != nil {
		return res, err
	}
	defer pc.Close()
	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c == nil {
			return
		}
		ci := c.ToJSON()
		_ = send(message{Type: "candidate", Candidate: &ci})
	})

	var (
		mu     sync.Mutex
		first  = make(chan struct{})
		once   sync.Once
		doneRx = make(chan struct{})
	)
	pc.OnICEConnectionStateChange(func(st webrtc.ICEConnectionState) {
		mu.Lock()
		defer mu.Unlock()
		if len(res.ICEStates) < 64 {
			res.ICEStates = append(res.ICEStates, fmt.Sprintf("%.3fs %s", time.Since(start).Seconds(), st))
		}
	})
	pc.OnTrack(func(t *webrtc.TrackRemote, _ *webrtc.RTPReceiver) {
		defer close(doneRx)
		var dep rtp.Depacketizer = &codecs.VP8Packet{}
		isKey := func(b []byte) bool { return len(b) > 0 && b[0]&0x01 == 0 }
		codec := "vp8"
		if strings.EqualFold(t.Codec().MimeType, webrtc.MimeTypeH264) {
			dep, codec = &codecs.H264Packet{}, "h264"
			isKey = h264Keyframe
		}
		mu.Lock()
		res.Codec = codec
		mu.Unlock()
		var firstAt, lastAt time.Time
		// Like a browser's jitter buffer: a frame still incomplete after
		// 500 ms is given up (a lost packet the NACKs did not recover must
		// not hold every later frame back).
		sb := samplebuilder.New(256, dep, t.Codec().ClockRate, samplebuilder.WithMaxTimeDelay(500*time.Millisecond))
		for {
			pkt, _, err := t.ReadRTP()
			if err != nil {
				return
			}
			mu.Lock()
			res.Packets++
			res.LastPacket = time.Since(start)
			mu.Unlock()
			sb.Push(pkt)
			for s := sb.Pop(); s != nil; s = sb.Pop() {
				f := Frame{Arrived: time.Now(), Size: len(s.Data), Keyframe: isKey(s.Data)}
				mu.Lock()
				res.Frames++
				res.Bytes += f.Size
				var gap time.Duration
				if res.Frames == 1 {
					firstAt = f.Arrived
				} else {
					gap = f.Arrived.Sub(lastAt)
					res.MaxGap = max(res.MaxGap, gap)
				}
				lastAt = f.Arrived
				if sec := int(f.Arrived.Sub(firstAt) / time.Second); sec < maxSeconds {
					for len(res.Seconds) <= sec {
						res.Seconds = append(res.Seconds, Second{})
					}
					res.Seconds[sec].MaxGap = max(res.Seconds[sec].MaxGap, gap)
					res.Seconds[sec].Frames++
					res.Seconds[sec].Bytes += f.Size
					if f.Keyframe {
						res.Seconds[sec].Keyframes++
					}
				}
				if f.Keyframe {
					res.Keyframes++
				}
				n := res.Frames
				if n == 1 {
					res.FirstFrame = time.Since(start)
				}
				mu.Unlock()
				once.Do(func() {
					close(first)
					if o.PLIEvery > 0 {
						go func(ssrc uint32) {
							tick := time.NewTicker(o.PLIEvery)
							defer tick.Stop()
							for {
								select {
								case <-doneRx:
									return
								case <-tick.C:
									_ = pc.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: ssrc}})
								}
							}
						}(uint32(t.SSRC()))
					}
				})
				if o.OnFrame != nil {
					o.OnFrame(f)
				}
				if o.PLIAfter > 0 && n == o.PLIAfter {
					_ = pc.WriteRTCP([]rtcp.Packet{&rtcp.PictureLossIndication{MediaSSRC: uint32(t.SSRC())}})
				}
			}
		}
	})

	codec := o.Codec
	if codec == "" {
		codec = "auto"
	}
	if err := send(message{Type: "hello", Codec: codec, Codecs: []string{"h264", "vp8"}}); err != nil {
		return res, err
	}
	sigErr := make(chan error, 1)
	go func() {
		for {
			_, b, err := ws.Read(ctx)
			if err != nil {
				sigErr <- err
				return
			}
			var m message
			if err := json.Unmarshal(b, &m); err != nil {
				continue
			}
			switch m.Type {
			case "welcome":
				if len(m.ICEServers) == 0 || o.IgnoreWelcomeICE {
					continue
				}
				cfg := pc.GetConfiguration()
				cfg.ICEServers = append(append([]webrtc.ICEServer(nil), o.ICEServers...), toICEServers(m.ICEServers)...)
				if err := pc.SetConfiguration(cfg); err != nil {
					sigErr <- fmt.Errorf("ice servers from welcome: %w", err)
					return
				}
				mu.Lock()
				res.WelcomeICEServers = len(m.ICEServers)
				mu.Unlock()
			case "offer":
				if len(m.ICEServers) > 0 && !o.IgnoreWelcomeICE {
					// An ICE restart brings fresh relay credentials.
					cfg := pc.GetConfiguration()
					cfg.ICEServers = append(append([]webrtc.ICEServer(nil), o.ICEServers...), toICEServers(m.ICEServers)...)
					if err := pc.SetConfiguration(cfg); err != nil {
						sigErr <- fmt.Errorf("ice servers from a restart offer: %w", err)
						return
					}
				}
				if m.Restart {
					mu.Lock()
					res.ICERestarts++
					mu.Unlock()
				}
				if err := pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeOffer, SDP: m.SDP}); err != nil {
					sigErr <- err
					return
				}
				ans, err := pc.CreateAnswer(nil)
				if err == nil {
					err = pc.SetLocalDescription(ans)
				}
				if err == nil && o.AnswerDelay > 0 {
					select {
					case <-ctx.Done():
					case <-time.After(o.AnswerDelay):
					}
				}
				if err == nil {
					err = send(message{Type: "answer", SDP: ans.SDP})
				}
				if err != nil {
					sigErr <- err
					return
				}
			case "candidate":
				if m.Candidate != nil && m.Candidate.Candidate != "" {
					_ = pc.AddICECandidate(*m.Candidate)
				}
			case "error":
				mu.Lock()
				res.Errors = append(res.Errors, m.Code+": "+m.Message)
				mu.Unlock()
			}
		}
	}()

	snapshot := func() Result {
		mu.Lock()
		defer mu.Unlock()
		r := res
		r.Errors = append([]string(nil), res.Errors...)
		r.ICEStates = append([]string(nil), res.ICEStates...)
		return r
	}
	withPair := func() Result {
		r := snapshot()
		selectedPair(pc, &r)
		return r
	}
	select {
	case <-first:
	case err := <-sigErr:
		r := withPair()
		return r, fmt.Errorf("signaling ended before the first frame: %w (errors: %v)", err, r.Errors)
	case <-ctx.Done():
		r := withPair()
		return r, fmt.Errorf("no frame arrived: %w (errors: %v)", ctx.Err(), r.Errors)
	}
	select {
	case <-time.After(o.For):
	case <-ctx.Done():
	}
	r := withPair()
	_ = send(message{Type: "bye"})
	_ = pc.Close()
	ws.Close(websocket.StatusNormalClosure, "")
	select {
	case <-doneRx:
	case <-time.After(2 * time.Second):
		return r, errors.New("track reader did not stop")
	}
	return r, nil
}

// wireICEServer is an ICE server as the welcome message carries it; urls
// may be one string or a list, as in the browser's RTCIceServer.
type wireICEServer struct {
	URLs       stringList `json:"urls"`
	Username   string     `json:"username,omitempty"`
	Credential string     `json:"credential,omitempty"`
}

type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

func toICEServers(in []wireICEServer) []webrtc.ICEServer {
	out := make([]webrtc.ICEServer, 0, len(in))
	for _, s := range in {
		srv := webrtc.ICEServer{URLs: append([]string(nil), s.URLs...), Username: s.Username}
		if s.Credential != "" {
			srv.Credential = s.Credential
		}
		out = append(out, srv)
	}
	return out
}

// selectedPair fills r's candidate pair fields from pc's stats: the ICE
// transport's selected pair, else the last nominated succeeded pair.
func selectedPair(pc *webrtc.PeerConnection, r *Result) {
	var (
		pair webrtc.ICECandidatePairStats
		ok   bool
	)
	for _, rx := range pc.GetReceivers() {
		if dt := rx.Transport(); dt != nil && dt.ICETransport() != nil {
			pair, ok = dt.ICETransport().GetSelectedCandidatePairStats()
			break
		}
	}
	report := pc.GetStats()
	if !ok {
		for _, s := range report {
			if p, is := s.(webrtc.ICECandidatePairStats); is && p.Nominated &&
				p.State == webrtc.StatsICECandidatePairStateSucceeded {
				pair, ok = p, true
			}
		}
	}
	if !ok {
		return
	}
	if l, is := report[pair.LocalCandidateID].(webrtc.ICECandidateStats); is {
		r.LocalCandidateType = l.CandidateType.String()
		r.LocalProtocol = l.Protocol
		r.LocalAddress = net.JoinHostPort(l.IP, strconv.Itoa(int(l.Port)))
		if l.CandidateType == webrtc.ICECandidateTypeRelay {
			r.RelayProtocol = l.RelayProtocol
		}
	}
	if rm, is := report[pair.RemoteCandidateID].(webrtc.ICECandidateStats); is {
		r.RemoteCandidateType = rm.CandidateType.String()
		r.RemoteAddress = net.JoinHostPort(rm.IP, strconv.Itoa(int(rm.Port)))
	}
}

// h264Keyframe reports whether an Annex-B access unit holds an IDR slice.
func h264Keyframe(b []byte) bool {
	for i := 0; i+3 < len(b); i++ {
		if b[i] == 0 && b[i+1] == 0 && b[i+2] == 1 {
			if b[i+3]&0x1f == 5 {
				return true
			}
			i += 2
		}
	}
	return false
}
