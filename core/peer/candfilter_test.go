package peer_test

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/webrtc/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/peer/peertest"
	"github.com/tabcast/tabcast/core/telemetry"
)

// stunTrap is a loopback UDP socket that counts the STUN messages it
// receives: a candidate naming it shows whether the peer checks it.
type stunTrap struct {
	conn net.PacketConn
	stun atomic.Int32
	done chan struct{}
}

func newTrap(t *testing.T) *stunTrap {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &stunTrap{conn: c, done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		buf := make([]byte, 2048)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			if stun.IsMessage(buf[:n]) {
				tr.stun.Add(1)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-tr.done })
	return tr
}

func (tr *stunTrap) port() int { return tr.conn.LocalAddr().(*net.UDPAddr).Port }

// hostCandidate is a UDP host candidate line naming ip:port.
func hostCandidate(n int, ip string, port int) string {
	return fmt.Sprintf("candidate:%d 1 udp 2130706431 %s %d typ host", n, ip, port)
}

// withCandidate puts an a=candidate line into the answer's first media
// section (where Pion reads the remote candidates from).
func withCandidate(t *testing.T, answer, cand string) string {
	t.Helper()
	m := strings.Index(answer, "\r\nm=")
	i := strings.Index(answer[m+2:], "\r\na=ice-ufrag:")
	if m < 0 || i < 0 {
		t.Fatalf("answer without a media section's ice-ufrag:\n%s", answer)
	}
	at := m + 2 + i + 2
	return answer[:at] + "a=" + cand + "\r\n" + answer[at:]
}

// refused reads tabcast_ice_candidates_refused_total{reason, source}.
func refused(t *testing.T, reg *prometheus.Registry, reason, source string) float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != "tabcast_ice_candidates_refused_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["reason"] == reason && labels["source"] == source {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// answered creates a peer for a viewer at viewer (zero: unknown), offers,
// and applies a real receiver's answer with extra a=candidate lines; the
// receiver is not told the peer's candidates, so nothing it does creates
// traffic. Every check the peer makes goes to the candidates given here.
func answered(t *testing.T, f *peer.Factory, src *peertest.Source, viewer netip.Addr, sdpCands ...string) *peer.Peer {
	t.Helper()
	p, err := f.NewPeer(peer.Options{Track: src.Track, ViewerAddr: viewer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { recv.Close() })
	offer, err := p.CreateOffer()
	if err != nil {
		t.Fatal(err)
	}
	answer, err := recv.Answer(offer)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range sdpCands {
		answer = withCandidate(t, answer, c)
	}
	if err := p.SetAnswer(answer); err != nil {
		t.Fatal(err)
	}
	return p
}

func addCandidates(t *testing.T, p *peer.Peer, cands ...string) {
	t.Helper()
	for _, c := range cands {
		if err := p.AddCandidate(webrtc.ICECandidateInit{Candidate: c}); err != nil {
			t.Fatalf("AddCandidate(%q): %v", c, err)
		}
	}
}

// TestRemoteCandidatesRefused: a viewer's candidates naming loopback (from
// a viewer not on the box), link-local/metadata, multicast, broadcast,
// unspecified or an address outside viewerNetworks never reach the ICE
// agent — neither from the answer nor trickled — and are counted; the same
// loopback candidates are checked when the viewer is on the box.
func TestRemoteCandidatesRefused(t *testing.T) {
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	reg := prometheus.NewRegistry()
	tm := telemetry.New(reg)
	f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Telemetry: tm, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lan := netip.MustParseAddr("192.168.50.7")

	// The viewer on the LAN names the box's loopback (in its answer and
	// trickled) and other classes; an allowed address goes with them, so
	// that the peer is seen to keep what it should.
	sdpTrap, trickleTrap := newTrap(t), newTrap(t)
	p := answered(t, f, src, lan, hostCandidate(1, "127.0.0.1", sdpTrap.port()))
	addCandidates(t, p,
		hostCandidate(2, "127.0.0.1", trickleTrap.port()),
		hostCandidate(3, "169.254.169.254", 80),
		hostCandidate(4, "fe80::1", 5000),
		hostCandidate(5, "224.0.0.251", 5353),
		hostCandidate(6, "255.255.255.255", 5000),
		hostCandidate(7, "0.0.0.0", 5000),
		"candidate:8 1 udp 1 169.254.169.254 3478 typ relay raddr 0.0.0.0 rport 0",
		hostCandidate(9, "192.0.2.44", 5000), // allowed: any unicast by default
	)
	waitFor(t, 5*time.Second, "the allowed candidate in the agent", func() bool {
		return slices.Contains(peer.RemoteCandidateAddrs(p), "192.0.2.44:5000")
	})
	// The peer checks its pairs every few tens of ms: three seconds of
	// silence on both traps means the candidates were never used.
	time.Sleep(3 * time.Second)
	if n := sdpTrap.stun.Load() + trickleTrap.stun.Load(); n != 0 {
		t.Errorf("the traps got %d STUN messages from a LAN viewer's loopback candidates", n)
	}
	if got := peer.RemoteCandidateAddrs(p); len(got) != 1 {
		t.Errorf("remote candidates in the agent: %v, want only 192.0.2.44:5000", got)
	}
	for _, c := range []struct {
		reason, source string
		want           float64
	}{
		{"loopback", "sdp", 1}, {"loopback", "trickle", 1}, {"link_local", "trickle", 3},
		{"multicast", "trickle", 1}, {"broadcast", "trickle", 1}, {"unspecified", "trickle", 1},
	} {
		if got := refused(t, reg, c.reason, c.source); got != c.want {
			t.Errorf("refused{%s,%s} = %v, want %v", c.reason, c.source, got, c.want)
		}
	}
	if st := p.Stats(); st.CandidatesRefused != 8 {
		t.Errorf("Stats.CandidatesRefused = %d, want 8", st.CandidatesRefused)
	}

	// The same candidates from a viewer on the box are checked: the traps
	// hear STUN (so the silence above is the filter's doing).
	sdpTrap2, trickleTrap2 := newTrap(t), newTrap(t)
	p2 := answered(t, f, src, netip.MustParseAddr("127.0.0.1"), hostCandidate(1, "127.0.0.1", sdpTrap2.port()))
	addCandidates(t, p2, hostCandidate(2, "127.0.0.1", trickleTrap2.port()))
	waitFor(t, 5*time.Second, "STUN checks to a loopback viewer's candidates", func() bool {
		return sdpTrap2.stun.Load() > 0 && trickleTrap2.stun.Load() > 0
	})
	if got := refused(t, reg, "loopback", "sdp") + refused(t, reg, "loopback", "trickle"); got != 2 {
		t.Errorf("loopback refusals %v after the loopback viewer, want still 2", got)
	}
}

// TestViewerNetworks: with webrtc.viewerNetworks set, candidates outside
// it are refused (answer and trickle), inside it kept.
func TestViewerNetworks(t *testing.T) {
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	reg := prometheus.NewRegistry()
	f, err := peer.NewFactory(peer.Config{
		Interfaces: []string{"lo"}, Telemetry: telemetry.New(reg), Logger: testLogger(t),
		ViewerNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::ffff:172.16.0.0/108")},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := answered(t, f, src, netip.MustParseAddr("10.1.2.3"),
		hostCandidate(1, "192.168.77.1", 5000), hostCandidate(2, "10.9.9.9", 5000))
	addCandidates(t, p,
		hostCandidate(3, "8.8.8.8", 5000), hostCandidate(4, "10.8.8.8", 5000),
		hostCandidate(5, "172.16.4.4", 5000), hostCandidate(6, "172.32.4.4", 5000))
	want := []string{"10.8.8.8:5000", "10.9.9.9:5000", "172.16.4.4:5000"}
	waitFor(t, 5*time.Second, "the candidates inside viewerNetworks", func() bool {
		got := peer.RemoteCandidateAddrs(p)
		slices.Sort(got)
		return slices.Equal(got, want)
	})
	time.Sleep(200 * time.Millisecond) // anything else would have arrived by now
	if got := peer.RemoteCandidateAddrs(p); len(got) != len(want) {
		t.Errorf("remote candidates %v, want %v", got, want)
	}
	if a, b := refused(t, reg, "viewer_networks", "sdp"), refused(t, reg, "viewer_networks", "trickle"); a != 1 || b != 2 {
		t.Errorf("viewer_networks refusals sdp %v trickle %v, want 1 and 2", a, b)
	}
}

// TestPeerReflexiveFiltered: the viewer's STUN checks from a loopback
// source make no peer-reflexive candidate for a viewer known to be
// elsewhere (so the peer never connects), and do for a viewer whose
// address is unknown (it connects, though its trickled loopback
// candidates were refused).
func TestPeerReflexiveFiltered(t *testing.T) {
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	reg := prometheus.NewRegistry()
	f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Telemetry: telemetry.New(reg), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	var connected atomic.Bool
	local := make(chan webrtc.ICECandidateInit, 64)
	p, err := f.NewPeer(peer.Options{Track: src.Track, ViewerAddr: netip.MustParseAddr("192.168.50.7"),
		OnICECandidate: func(c webrtc.ICECandidateInit) { local <- c },
		OnStateChange: func(s webrtc.PeerConnectionState) {
			if s == webrtc.PeerConnectionStateConnected {
				connected.Store(true)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	offer, err := p.CreateOffer()
	if err != nil {
		t.Fatal(err)
	}
	answer, err := recv.Answer(offer)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetAnswer(answer); err != nil {
		t.Fatal(err)
	}
	// The peer's candidates go to the receiver, which checks them from its
	// loopback socket: peer-reflexive candidates for the peer's agent.
	select {
	case c := <-local:
		if err := recv.PC.AddICECandidate(c); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no local candidate")
	}
	waitFor(t, 5*time.Second, "a peer-reflexive refusal", func() bool { return refused(t, reg, "loopback", "ice") > 0 })
	time.Sleep(2 * time.Second)
	if connected.Load() || len(peer.RemoteCandidateAddrs(p)) != 0 {
		t.Errorf("a LAN viewer's loopback STUN made a pair: connected %v, remote %v", connected.Load(), peer.RemoteCandidateAddrs(p))
	}

	// The viewer's address unknown: its trickled loopback candidates are
	// refused, but its STUN from loopback is this host's own socket.
	var keyframes atomic.Int32
	p2, recv2 := connect(t, f, src, &keyframes)
	defer recv2.Close()
	defer p2.Close()
	if p2.Stats().CandidatesRefused == 0 || refused(t, reg, "loopback", "trickle") == 0 {
		t.Errorf("an unknown viewer's loopback candidates were not refused: %+v", p2.Stats())
	}
	if ct := p2.CandidateType(); ct != "prflx" {
		t.Errorf("candidate type %q, want prflx", ct)
	}
}
