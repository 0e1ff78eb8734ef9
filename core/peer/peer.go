// Package peer holds the appliance side of a viewer's WebRTC connection: one
// Pion PeerConnection per viewer that sends the session's shared video track
// and, for an interactive viewer, carries its input DataChannels (control,
// pointer, state) with their back-pressure rules. The appliance is always
// the offerer (see docs/protocol.md, "Signaling" and "DataChannels").
package peer

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/ice/v4"
	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/rtcp"
	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/telemetry"
)

// Limits on what a viewer may send for one peer.
const (
	// MaxSDPSize is the largest answer SDP accepted, in bytes.
	MaxSDPSize = 64 << 10
	// MaxCandidates is the most remote ICE candidates accepted per peer.
	MaxCandidates = 50
	// maxCandidateSize bounds one candidate line; real ones are ~150 bytes.
	maxCandidateSize = 1024
)

var (
	// ErrSDPTooLarge is returned by SetAnswer for an SDP over MaxSDPSize.
	ErrSDPTooLarge = errors.New("sdp too large")
	// ErrTooManyCandidates is returned by AddCandidate past MaxCandidates.
	ErrTooManyCandidates = errors.New("too many ice candidates")
	// ErrBadSDP is returned by SetAnswer for an SDP that does not parse or
	// does not fit the offer.
	ErrBadSDP = errors.New("bad sdp")
	// ErrBadCandidate is returned by AddCandidate for a candidate that does
	// not parse.
	ErrBadCandidate = errors.New("bad ice candidate")
	// ErrBadState is returned when a call comes out of order (an answer
	// before the offer, a candidate before the answer, a second answer).
	ErrBadState = errors.New("bad peer state")
	// ErrClosed is returned by calls on a closed peer.
	ErrClosed = errors.New("peer closed")
)

// Config configures a Factory.
type Config struct {
	ICEServers []webrtc.ICEServer
	// UDPPort 0 lets every peer use its own ephemeral UDP ports; >0 serves
	// every peer's ICE on this one UDP port (ICE UDP mux), which is what a
	// firewall-friendly appliance wants.
	UDPPort int
	// Interfaces optionally restricts host candidates to these interface
	// names (e.g. "eth0", "lo"); empty means every up interface, loopback
	// included.
	Interfaces []string
	// MDNS lets ICE resolve the viewer's obfuscated "*.local" host
	// candidates with multicast DNS queries. Off by default: viewers reach
	// the appliance's candidates anyway (peer-reflexive pairs), and
	// multicast traffic is not wanted on every network.
	MDNS bool
	// TCP also serves ICE over TCP (RFC 6544 passive candidates) on
	// UDPPort's number, so a firewall rule for one port covers both.
	TCP bool
	// Advertise adds these addresses (IPs or host IPs of a NAT in front)
	// as extra host candidates beside the real ones: LAN and public at
	// once.
	Advertise []string
	// RelayOnly makes the relay (on this box) the only way in: the
	// appliance offers loopback candidates only, which nothing but the
	// local relay reaches, and ignores the viewer's non-relay candidates
	// (iceTransportPolicy relay, enforced here: a client cannot opt out).
	RelayOnly bool
	// DisconnectedTimeout is the ICE silence after which a peer is
	// "disconnected" (default 3 s); FailedTimeout the further silence after
	// which it is "failed" (default 7 s), so a vanished viewer is given up
	// 10 s after its last packet.
	DisconnectedTimeout time.Duration
	FailedTimeout       time.Duration
	// MaxBitrateKbps caps (and starts) each viewer's bandwidth estimate;
	// 0 means 2500.
	MaxBitrateKbps int
	// ViewerNetworks (webrtc.viewerNetworks) are the only networks a
	// viewer's ICE candidates may name; empty means any private or public
	// unicast address. Loopback, link-local, unspecified, multicast and
	// broadcast addresses are refused whatever it says (loopback is let
	// through for a viewer on this box); see candfilter.go.
	ViewerNetworks []netip.Prefix
	// Telemetry counts refused candidates; nil = none.
	Telemetry *telemetry.Metrics
	Logger    *slog.Logger
}

const (
	defaultDisconnectedTimeout = 3 * time.Second
	defaultFailedTimeout       = 7 * time.Second
)

// Factory builds peers that share one webrtc.API (codecs, interceptors,
// ICE settings and, with Config.UDPPort, one UDP socket).
type Factory struct {
	// Each peer gets its own webrtc.API made of these (the setting engine
	// copied, with the peer's remote IP filter): the filter depends on the
	// viewer's address, and Pion calls it with nothing but an IP.
	se      webrtc.SettingEngine
	me      *webrtc.MediaEngine
	reg     *interceptor.Registry
	cfg     Config
	log     *slog.Logger
	closers []interface{ Close() error } // shared ICE sockets (UDP and TCP mux)
	closed  atomic.Bool
	bwe     bweTable
}

// NewFactory builds the shared webrtc.API.
func NewFactory(cfg Config) (*Factory, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	nets, err := normalizeNetworks(cfg.ViewerNetworks)
	if err != nil {
		return nil, err
	}
	cfg.ViewerNetworks = nets
	me, err := media.NewMediaEngine()
	if err != nil {
		return nil, err
	}
	reg := &interceptor.Registry{}
	// NACK responder, RTCP sender/receiver reports, TWCC, stats.
	if err := webrtc.RegisterDefaultInterceptors(me, reg); err != nil {
		return nil, fmt.Errorf("register interceptors: %w", err)
	}
	f := &Factory{bwe: bweTable{m: map[string]cc.BandwidthEstimator{}}}
	maxKbps := cfg.MaxBitrateKbps
	if maxKbps <= 0 {
		maxKbps = 2500
	}
	if err := registerBWE(me, reg, maxKbps, &f.bwe); err != nil {
		return nil, err
	}

	se := webrtc.SettingEngine{}
	se.LoggerFactory = &pionLogs{log: log.With("component", "pion")}
	se.SetIncludeLoopbackCandidate(true)
	disc, failed := cfg.DisconnectedTimeout, cfg.FailedTimeout
	if disc <= 0 {
		disc = defaultDisconnectedTimeout
	}
	if failed <= 0 {
		failed = defaultFailedTimeout
	}
	// Keepalives well inside the disconnected timeout, or an idle but
	// healthy pair would look silent.
	se.SetICETimeouts(disc, failed, min(time.Second, disc/3))
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4, webrtc.NetworkTypeUDP6})
	// Pion's default accepts DataChannel messages up to 1 GiB; the input
	// envelopes are at most ~1.1 MiB. A message is reassembled in the SCTP
	// receive buffer (default 1 MiB), so that must hold the largest one
	// with room for the other channels.
	se.SetSCTPMaxMessageSize(MaxMessageSize)
	se.SetSCTPMaxReceiveBufferSize(2 * MaxMessageSize)
	if !cfg.MDNS {
		se.SetICEMulticastDNSMode(iceMDNSDisabled)
	}
	filter := interfaceFilter(cfg.Interfaces)
	if filter != nil {
		se.SetInterfaceFilter(filter)
	}
	var keepIP func(net.IP) bool
	if cfg.RelayOnly {
		keepIP = func(ip net.IP) bool { return ip.IsLoopback() }
		se.SetIPFilter(keepIP)
	}
	f.cfg, f.log = cfg, log
	if cfg.UDPPort > 0 {
		mux, err := newUDPMux(cfg.UDPPort, filter, keepIP, se.LoggerFactory)
		if err != nil {
			return nil, fmt.Errorf("ice udp mux on port %d: %w", cfg.UDPPort, err)
		}
		se.SetICEUDPMux(mux)
		f.closers = append(f.closers, mux)
	}
	if cfg.TCP {
		if cfg.UDPPort <= 0 {
			return nil, errors.New("ice tcp needs a fixed UDP port (its number is shared)")
		}
		host := ""
		if cfg.RelayOnly {
			host = "127.0.0.1" // only the local relay may come in
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(cfg.UDPPort)))
		if err != nil {
			f.closeAll()
			return nil, fmt.Errorf("ice tcp on port %d: %w", cfg.UDPPort, err)
		}
		tcp := ice.NewTCPMuxDefault(ice.TCPMuxParams{Listener: ln, Logger: se.LoggerFactory.NewLogger("tcpmux"), ReadBufferSize: 64, WriteBufferSize: 4 << 20})
		se.SetICETCPMux(tcp)
		se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4, webrtc.NetworkTypeUDP6, webrtc.NetworkTypeTCP4, webrtc.NetworkTypeTCP6})
		f.closers = append(f.closers, tcp)
	}
	if len(cfg.Advertise) > 0 {
		if err := se.SetICEAddressRewriteRules(webrtc.ICEAddressRewriteRule{
			External: cfg.Advertise, AsCandidateType: webrtc.ICECandidateTypeHost, Mode: webrtc.ICEAddressRewriteAppend,
		}); err != nil {
			f.closeAll()
			return nil, fmt.Errorf("advertised addresses: %w", err)
		}
	}
	f.se, f.me, f.reg = se, me, reg
	return f, nil
}

func interfaceFilter(names []string) func(string) bool {
	if len(names) == 0 {
		return nil
	}
	allow := make(map[string]bool, len(names))
	for _, n := range names {
		allow[n] = true
	}
	return func(name string) bool { return allow[name] }
}

// Close releases the shared ICE sockets, if any. Close peers first.
func (f *Factory) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return nil
	}
	return f.closeAll()
}

func (f *Factory) closeAll() error {
	var errs []error
	for _, c := range f.closers {
		if err := c.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	f.closers = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close ice sockets: %w", err)
	}
	return nil
}

// Options describes one viewer peer. Callbacks run on Pion goroutines, must
// not block and must not call Close; none of them runs once Close returns
// (so the "closed" state caused by Close itself is not reported).
type Options struct {
	// Track is the session's shared video track (a
	// media.Pipeline.Track, packetized RTP); the peer sends it sendonly.
	Track webrtc.TrackLocal
	// OnKeyframeRequest is called for every PLI or FIR from the viewer;
	// the caller rate-limits.
	OnKeyframeRequest func()
	// OnICECandidate is called for every local candidate gathered (trickle
	// ICE). It is not called when gathering completes: end-of-candidates is
	// not signaled, viewers do not need it.
	OnICECandidate func(webrtc.ICECandidateInit)
	// OnStateChange reports every PeerConnectionState change.
	OnStateChange func(webrtc.PeerConnectionState)

	// Interactive creates the input DataChannels (control, pointer, state;
	// see channels.go) before the offer.
	Interactive bool
	// OnControl and OnPointer get each message the viewer sends on the
	// control / pointer channel, one at a time per channel (control in
	// order). They must not block for long: they hold up that channel.
	OnControl func([]byte)
	OnPointer func([]byte)
	// OnChannel reports an input channel opening (open) or closing.
	OnChannel func(label string, open bool)
	// OnUnhealthy reports that the viewer does not read its control
	// channel (over ControlMaxBuffered buffered, or ControlQueue messages
	// queued); the peer connection is then closed.
	OnUnhealthy func(reason string)

	// ViewerAddr is where the viewer's signaling connection comes from
	// (the WebSocket's remote address). A loopback one means the viewer
	// runs on this box (or behind a proxy on it), whose loopback
	// candidates are then accepted; any other refuses them. The zero value
	// means unknown: signaled loopback candidates and mDNS names are
	// refused, peer-reflexive loopback ones accepted (see candfilter.go).
	ViewerAddr netip.Addr
}

// Stats is a snapshot of one peer's sending side.
type Stats struct {
	State       webrtc.PeerConnectionState
	BytesSent   uint64 // RTP payload bytes of media (not retransmissions)
	PacketsSent uint64
	PLIs        uint64 // PLIs received from the viewer
	FIRs        uint64 // FIRs received from the viewer
	NACKs       uint64 // NACK packets received from the viewer
	// CandidatesRefused counts the viewer's ICE candidates refused by
	// their address (signaled, peer-reflexive or mDNS-resolved).
	CandidatesRefused uint64
}

// Peer is one viewer's PeerConnection.
type Peer struct {
	id     string
	pc     *webrtc.PeerConnection
	sender *webrtc.RTPSender
	opts   Options
	log    *slog.Logger

	mu         sync.Mutex
	offered    bool
	answered   bool
	candidates int
	closed     bool
	relayOnly  bool // drop the viewer's non-relay candidates

	// Remote candidate screening (candfilter.go), fixed at creation.
	policy      candidatePolicy // signaled candidates
	agentPolicy candidatePolicy // Pion's remote IP filter
	viewerKnown bool            // Options.ViewerAddr was set
	mdns        bool            // Config.MDNS
	metrics     *telemetry.Metrics

	refused          atomic.Uint64 // candidates refused by address
	iceRefusalLogged atomic.Bool   // the agent filter logged its first refusal

	// cbMu/cbClosed/cbWG fence callbacks: none starts after Close began
	// and Close waits for the running ones.
	cbMu     sync.Mutex
	cbClosed bool
	cbWG     sync.WaitGroup

	plis, firs, nacks atomic.Uint64
	badRTCP           atomic.Uint64 // RTCP packets the interceptors refused
	sent              sendCounters

	ch *channels // input channels; nil unless Options.Interactive

	bwe cc.BandwidthEstimator // nil if none was made
	rr  receiverReport        // the viewer's last RTCP receiver report

	rtcpDone  chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// NewPeer creates a peer that sends o.Track and starts its RTCP reader.
func (f *Factory) NewPeer(o Options) (*Peer, error) {
	if f.closed.Load() {
		return nil, ErrClosed
	}
	if o.Track == nil {
		return nil, errors.New("new peer: no track")
	}
	id, err := randomID()
	if err != nil {
		return nil, err
	}
	p := &Peer{id: id, opts: o, log: f.log.With("peer", id), rtcpDone: make(chan struct{}), relayOnly: f.cfg.RelayOnly,
		mdns: f.cfg.MDNS, metrics: f.cfg.Telemetry}
	viewer := o.ViewerAddr.Unmap()
	p.viewerKnown = viewer.IsValid()
	bcast := subnetBroadcasts()
	p.policy = candidatePolicy{networks: f.cfg.ViewerNetworks, loopback: viewer.IsLoopback(), broadcast: bcast}
	p.agentPolicy = p.policy
	// Unknown viewer: a loopback peer-reflexive source is this host's own
	// socket (see candfilter.go); signaled loopback is refused by p.policy.
	p.agentPolicy.loopback = p.policy.loopback || !p.viewerKnown
	se := f.se
	se.SetRemoteIPFilter(p.agentFilter)
	api := webrtc.NewAPI(webrtc.WithMediaEngine(f.me), webrtc.WithInterceptorRegistry(f.reg), webrtc.WithSettingEngine(se))
	pc, err := api.NewPeerConnection(webrtc.Configuration{ICEServers: f.cfg.ICEServers})
	if err != nil {
		return nil, fmt.Errorf("new peer connection: %w", err)
	}
	p.pc, p.bwe = pc, f.bwe.take(pc.ID())

	tr, err := pc.AddTransceiverFromTrack(countingTrack{o.Track, &p.sent},
		webrtc.RTPTransceiverInit{Direction: webrtc.RTPTransceiverDirectionSendonly})
	if err != nil {
		_ = pc.Close()
		return nil, fmt.Errorf("add track: %w", err)
	}
	// Offer only the track's codec family: the session encodes one codec
	// per track, and a viewer must not pick another one from the offer.
	if prefs := codecsFor(o.Track); len(prefs) > 0 {
		if err := tr.SetCodecPreferences(prefs); err != nil {
			_ = pc.Close()
			return nil, fmt.Errorf("codec preferences: %w", err)
		}
	}
	p.sender = tr.Sender()
	if o.Interactive {
		// On error no writer has started yet.
		if err := p.createChannels(); err != nil {
			_ = pc.Close()
			return nil, err
		}
	}

	pc.OnICECandidate(func(c *webrtc.ICECandidate) {
		if c == nil || o.OnICECandidate == nil || !p.enter() {
			return
		}
		defer p.cbWG.Done()
		o.OnICECandidate(c.ToJSON())
	})
	pc.OnConnectionStateChange(func(s webrtc.PeerConnectionState) {
		if !p.enter() {
			return
		}
		defer p.cbWG.Done()
		p.log.Debug("peer state", "state", s.String())
		if o.OnStateChange != nil {
			o.OnStateChange(s)
		}
	})
	go p.readRTCP()
	return p, nil
}

// codecsFor returns the factory codecs with the track's MIME type, the
// track's exact fmtp first.
func codecsFor(t webrtc.TrackLocal) []webrtc.RTPCodecParameters {
	ct, ok := t.(interface {
		Codec() webrtc.RTPCodecCapability
	})
	if !ok {
		return nil
	}
	want := ct.Codec()
	var exact, same []webrtc.RTPCodecParameters
	for _, c := range media.Codecs {
		if !strings.EqualFold(c.MimeType, want.MimeType) {
			continue
		}
		// Preferences intersect with the engine's feedback, where the
		// default interceptors added transport-cc: keep it offered.
		c.RTCPFeedback = append(slices.Clone(c.RTCPFeedback), webrtc.RTCPFeedback{Type: webrtc.TypeRTCPFBTransportCC})
		if c.SDPFmtpLine == want.SDPFmtpLine {
			exact = append(exact, c)
		} else {
			same = append(same, c)
		}
	}
	return append(exact, same...)
}

// readRTCP drains the sender's RTCP (the interceptors need it read) and
// turns PLI/FIR into keyframe requests. It ends when the peer closes.
func (p *Peer) readRTCP() {
	defer close(p.rtcpDone)
	var bad int
	for {
		pkts, _, err := p.sender.ReadRTCP()
		if err != nil {
			// A packet the interceptors refused (the congestion controller
			// rejects feedback it cannot match) must not end RTCP for the
			// peer: keyframe requests and bandwidth feedback go on. The
			// sender's end is io.EOF or a closed pipe; a run of errors
			// without a good packet in between is treated as the end too.
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe) || p.isClosed() || bad >= 100 {
				return
			}
			if bad == 0 {
				p.log.Debug("RTCP refused by an interceptor", "err", err)
			}
			bad++
			p.badRTCP.Add(1)
			continue
		}
		bad = 0
		for _, pkt := range pkts {
			switch pkt.(type) {
			case *rtcp.PictureLossIndication:
				p.plis.Add(1)
				p.keyframe()
			case *rtcp.FullIntraRequest:
				p.firs.Add(1)
				p.keyframe()
			case *rtcp.TransportLayerNack:
				p.nacks.Add(1)
			case *rtcp.ReceiverReport:
				p.noteReceiverReport(pkt.(*rtcp.ReceiverReport))
			}
		}
	}
}

// isClosed reports whether Close has begun.
func (p *Peer) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

func (p *Peer) keyframe() {
	if p.opts.OnKeyframeRequest == nil || !p.enter() {
		return
	}
	defer p.cbWG.Done()
	p.opts.OnKeyframeRequest()
}

// enter admits one callback unless the peer is closing; the caller must
// call p.cbWG.Done when it returns true.
func (p *Peer) enter() bool {
	p.cbMu.Lock()
	defer p.cbMu.Unlock()
	if p.cbClosed {
		return false
	}
	p.cbWG.Add(1)
	return true
}

// ID returns the peer's random id.
func (p *Peer) ID() string { return p.id }

// CreateOffer creates the offer and sets it as the local description;
// candidates then trickle through Options.OnICECandidate.
func (p *Peer) CreateOffer() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", ErrClosed
	}
	if p.offered {
		return "", fmt.Errorf("create offer: already offered: %w", ErrBadState)
	}
	offer, err := p.pc.CreateOffer(nil)
	if err != nil {
		return "", fmt.Errorf("create offer: %w", err)
	}
	if err := p.pc.SetLocalDescription(offer); err != nil {
		return "", fmt.Errorf("set local description: %w", err)
	}
	p.offered = true
	return offer.SDP, nil
}

// State is the peer connection's state.
func (p *Peer) State() webrtc.PeerConnectionState { return p.pc.ConnectionState() }

// RestartICE makes a new offer with fresh ICE credentials for a peer
// whose connection failed; the viewer answers it like the first one.
func (p *Peer) RestartICE() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return "", ErrClosed
	}
	if !p.answered {
		return "", fmt.Errorf("restart ice: no answer yet: %w", ErrBadState)
	}
	offer, err := p.pc.CreateOffer(&webrtc.OfferOptions{ICERestart: true})
	if err != nil {
		return "", fmt.Errorf("restart ice: %w", err)
	}
	if err := p.pc.SetLocalDescription(offer); err != nil {
		return "", fmt.Errorf("restart ice: set local description: %w", err)
	}
	p.answered = false
	return offer.SDP, nil
}

// SetAnswer applies the viewer's answer.
func (p *Peer) SetAnswer(sdpText string) error {
	if len(sdpText) > MaxSDPSize {
		return ErrSDPTooLarge
	}
	var parsed sdp.SessionDescription
	if err := parsed.UnmarshalString(sdpText); err != nil {
		// The parse error may quote the SDP; do not wrap it.
		return ErrBadSDP
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if !p.offered || p.answered {
		return fmt.Errorf("set answer: %w", ErrBadState)
	}
	// The answer's own candidates are screened like trickled ones: the
	// lines refused are removed before Pion reads them.
	if p.screenSDP(&parsed) {
		b, err := parsed.Marshal()
		if err != nil {
			return ErrBadSDP
		}
		sdpText = string(b)
	}
	if err := p.pc.SetRemoteDescription(webrtc.SessionDescription{Type: webrtc.SDPTypeAnswer, SDP: sdpText}); err != nil {
		return fmt.Errorf("%w: answer does not fit the offer", ErrBadSDP)
	}
	p.answered = true
	return nil
}

// AddCandidate adds a remote ICE candidate; an empty candidate string
// means end-of-candidates.
func (p *Peer) AddCandidate(c webrtc.ICECandidateInit) error {
	if len(c.Candidate) > maxCandidateSize {
		return fmt.Errorf("%w: too long", ErrBadCandidate)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if !p.answered {
		return fmt.Errorf("add candidate before answer: %w", ErrBadState)
	}
	if p.candidates >= MaxCandidates {
		return ErrTooManyCandidates
	}
	p.candidates++
	if c.Candidate != "" {
		switch v, reason := p.screen(c.Candidate); v {
		case candidateDiscard:
			return nil // not a path the appliance accepts; dropped, not an error
		case candidateRefuse:
			// Dropped, not an error: the viewer's other candidates go on.
			p.refusedOne(reason, fromTrickle)
			p.log.Debug("remote ICE candidate refused", "reason", reason, "source", fromTrickle)
			return nil
		}
	}
	if err := p.pc.AddICECandidate(c); err != nil {
		// Pion's error may quote the candidate (an address): do not wrap it.
		return ErrBadCandidate
	}
	return nil
}

// CandidateType is the selected candidate pair's path in one word: relay
// when either side is a relay candidate, else the viewer's side's type
// (host, srflx, prflx); "" before a pair is selected.
func (p *Peer) CandidateType() string {
	if p.sender == nil || p.sender.Transport() == nil || p.sender.Transport().ICETransport() == nil {
		return ""
	}
	pair, err := p.sender.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || pair == nil || pair.Local == nil || pair.Remote == nil {
		return ""
	}
	if pair.Local.Typ == webrtc.ICECandidateTypeRelay || pair.Remote.Typ == webrtc.ICECandidateTypeRelay {
		return "relay"
	}
	return pair.Remote.Typ.String()
}

// Stats returns counters of the sending side.
func (p *Peer) Stats() Stats {
	return Stats{
		State:     p.pc.ConnectionState(),
		BytesSent: p.sent.bytes.Load(), PacketsSent: p.sent.packets.Load(),
		PLIs: p.plis.Load(), FIRs: p.firs.Load(), NACKs: p.nacks.Load(),
		CandidatesRefused: p.refused.Load(),
	}
}

// Close closes the PeerConnection and waits for the RTCP reader. It is
// idempotent and safe to call from any goroutine except a peer callback.
func (p *Peer) Close() error {
	p.closeOnce.Do(func() {
		p.cbMu.Lock()
		p.cbClosed = true
		p.cbMu.Unlock()
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		if p.ch != nil {
			p.ch.stop()
		}
		if err := p.pc.Close(); err != nil {
			p.closeErr = fmt.Errorf("close peer connection: %w", err)
		}
		<-p.rtcpDone
		if p.ch != nil {
			p.ch.wg.Wait()
		}
		p.cbWG.Wait()
	})
	return p.closeErr
}

func randomID() (string, error) {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("peer id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
