package peer

import (
	"io"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/pion/sdp/v3"
	"github.com/pion/webrtc/v4"
)

func TestCandidatePolicyClasses(t *testing.T) {
	remote := candidatePolicy{broadcast: map[netip.Addr]bool{netip.MustParseAddr("192.168.1.255"): true}}
	local := remote
	local.loopback = true
	limited := remote
	limited.networks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	limited.loopback = true
	for _, tc := range []struct {
		addr                   string
		remote, local, limited string
	}{
		{"127.0.0.1", refusedLoopback, "", ""},
		{"127.3.4.5", refusedLoopback, "", ""},
		{"::1", refusedLoopback, "", ""},
		{"::ffff:127.0.0.1", refusedLoopback, "", ""},
		{"169.254.169.254", refusedLinkLocal, refusedLinkLocal, refusedLinkLocal},
		{"::ffff:169.254.169.254", refusedLinkLocal, refusedLinkLocal, refusedLinkLocal},
		{"fe80::1", refusedLinkLocal, refusedLinkLocal, refusedLinkLocal},
		{"fe80::1%eth0", refusedLinkLocal, refusedLinkLocal, refusedLinkLocal},
		{"fd00:ec2::254", refusedMetadata, refusedMetadata, refusedMetadata},
		{"100.100.100.200", refusedMetadata, refusedMetadata, refusedMetadata},
		{"0.0.0.0", refusedUnspecified, refusedUnspecified, refusedUnspecified},
		{"0.1.2.3", refusedUnspecified, refusedUnspecified, refusedUnspecified},
		{"::", refusedUnspecified, refusedUnspecified, refusedUnspecified},
		{"224.0.0.251", refusedMulticast, refusedMulticast, refusedMulticast},
		{"ff02::fb", refusedMulticast, refusedMulticast, refusedMulticast},
		{"255.255.255.255", refusedBroadcast, refusedBroadcast, refusedBroadcast},
		{"192.168.1.255", refusedBroadcast, refusedBroadcast, refusedBroadcast},
		{"240.0.0.1", refusedReserved, refusedReserved, refusedReserved},
		{"192.168.1.20", "", "", refusedNetworks},
		{"10.1.2.3", "", "", ""},
		{"::ffff:10.1.2.3", "", "", ""},
		{"8.8.8.8", "", "", refusedNetworks},
		{"2001:db8::5", "", "", ""},
		{"fd12::5", "", "", refusedNetworks},
	} {
		a := netip.MustParseAddr(tc.addr)
		for _, c := range []struct {
			name string
			p    *candidatePolicy
			want string
		}{{"remote viewer", &remote, tc.remote}, {"viewer on the box", &local, tc.local}, {"viewerNetworks", &limited, tc.limited}} {
			if got := c.p.check(a); got != c.want {
				t.Errorf("%s, %s: %q, want %q", c.name, tc.addr, got, c.want)
			}
		}
		if ip := net.ParseIP(strings.Split(tc.addr, "%")[0]); ip != nil && remote.checkIP(ip) != tc.remote {
			t.Errorf("checkIP(%s) = %q, want %q", tc.addr, remote.checkIP(ip), tc.remote)
		}
	}
	if got := remote.check(netip.Addr{}); got != refusedUnspecified {
		t.Errorf("invalid address: %q", got)
	}
}

// TestScreen: a signaled candidate's fate by its type and address.
func TestScreen(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	remote := &Peer{log: quiet, viewerKnown: true}
	unknown := &Peer{log: quiet}
	mdns := &Peer{log: quiet, mdns: true}
	mdnsKnown := &Peer{log: quiet, mdns: true, viewerKnown: true}
	relayOnly := &Peer{log: quiet, viewerKnown: true, relayOnly: true}
	for i, tc := range []struct {
		p      *Peer
		cand   string
		want   candidateVerdict
		reason string
	}{
		{remote, "candidate:1 1 udp 2130706431 127.0.0.1 9 typ host", candidateRefuse, refusedLoopback},
		{remote, "1 1 udp 2130706431 127.0.0.1 9 typ host", candidateRefuse, refusedLoopback},
		{remote, "candidate:1 1 udp 1 169.254.169.254 80 typ srflx raddr 0.0.0.0 rport 0", candidateRefuse, refusedLinkLocal},
		{remote, "candidate:1 1 udp 1 127.0.0.1 3478 typ relay raddr 0.0.0.0 rport 0", candidateRefuse, refusedLoopback},
		{remote, "candidate:1 1 tcp 1 127.0.0.1 22 typ host tcptype passive", candidateRefuse, refusedLoopback},
		{remote, "candidate:1 1 udp 2130706431 192.168.1.7 5000 typ host", candidateKeep, ""},
		{remote, "candidate:garbage", candidateKeep, ""}, // Pion refuses it
		{unknown, "candidate:1 1 udp 2130706431 127.0.0.1 9 typ host", candidateRefuse, refusedLoopback},
		{unknown, "candidate:1 1 udp 2130706431 0d5e-4b1a.local 5000 typ host", candidateDiscard, ""},
		{mdns, "candidate:1 1 udp 2130706431 0d5e-4b1a.local 5000 typ host", candidateRefuse, refusedMDNS},
		{mdnsKnown, "candidate:1 1 udp 2130706431 0d5e-4b1a.local 5000 typ host", candidateKeep, ""},
		{relayOnly, "candidate:1 1 udp 2130706431 192.168.1.7 5000 typ host", candidateDiscard, ""},
		{relayOnly, "candidate:1 1 udp 1 192.168.1.7 5000 typ relay raddr 0.0.0.0 rport 0", candidateKeep, ""},
		{relayOnly, "candidate:1 1 udp 1 169.254.169.254 5000 typ relay raddr 0.0.0.0 rport 0", candidateRefuse, refusedLinkLocal},
	} {
		v, r := tc.p.screen(tc.cand)
		if v != tc.want || r != tc.reason {
			t.Errorf("case %d: screen(%q) = %v %q, want %v %q", i, tc.cand, v, r, tc.want, tc.reason)
		}
	}
}

// TestScreenSDP: refused a=candidate lines leave the description, at
// session and media level; the rest stays as it was.
func TestScreenSDP(t *testing.T) {
	p := &Peer{log: slog.New(slog.NewTextHandler(io.Discard, nil)), viewerKnown: true}
	in := "v=0\r\no=- 1 2 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n" +
		"a=candidate:9 1 udp 1 169.254.169.254 80 typ host\r\n" +
		"m=video 9 UDP/TLS/RTP/SAVPF 96\r\nc=IN IP4 0.0.0.0\r\na=mid:0\r\na=ice-ufrag:u\r\na=ice-pwd:pppppppppppppppppppppp\r\n" +
		"a=candidate:1 1 udp 2130706431 127.0.0.1 5000 typ host\r\n" +
		"a=candidate:2 1 udp 2130706431 10.0.0.9 5000 typ host\r\n" +
		"a=candidate:3 1 udp 2130706431 224.0.0.1 5000 typ host\r\n" +
		"a=end-of-candidates\r\n"
	var d sdp.SessionDescription
	if err := d.UnmarshalString(in); err != nil {
		t.Fatal(err)
	}
	if !p.screenSDP(&d) {
		t.Fatal("nothing removed")
	}
	b, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, gone := range []string{"169.254.169.254", "127.0.0.1", "224.0.0.1"} {
		if strings.Contains(out, gone) {
			t.Errorf("%s still in:\n%s", gone, out)
		}
	}
	for _, kept := range []string{"a=candidate:2 1 udp 2130706431 10.0.0.9 5000 typ host\r\n", "a=end-of-candidates\r\n", "a=ice-pwd:pppppppppppppppppppppp\r\n"} {
		if !strings.Contains(out, kept) {
			t.Errorf("%q missing from:\n%s", kept, out)
		}
	}
	if p.refused.Load() != 3 {
		t.Errorf("refused %d, want 3", p.refused.Load())
	}
	var again sdp.SessionDescription
	if err := again.Unmarshal(b); err != nil || p.screenSDP(&again) {
		t.Errorf("screened twice: err %v", err)
	}
}

func TestSubnetBroadcasts(t *testing.T) {
	// Every Linux has lo as 127.0.0.1/8.
	b := subnetBroadcasts()
	if !b[netip.MustParseAddr("127.255.255.255")] {
		t.Errorf("no broadcast of lo's 127.0.0.0/8 in %v", b)
	}
	for a := range b {
		if !a.Is4() {
			t.Errorf("%s is not IPv4", a)
		}
	}
}

// BenchmarkPeerPolicySetup is what NewPeer spends on the candidate filter:
// the box's subnet broadcasts and a webrtc.API of the peer's own.
func BenchmarkPeerPolicySetup(b *testing.B) {
	f, err := NewFactory(Config{Interfaces: []string{"lo"}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	p := &Peer{}
	for b.Loop() {
		p.policy = candidatePolicy{broadcast: subnetBroadcasts()}
		se := f.se
		se.SetRemoteIPFilter(p.agentFilter)
		_ = webrtc.NewAPI(webrtc.WithMediaEngine(f.me), webrtc.WithInterceptorRegistry(f.reg), webrtc.WithSettingEngine(se))
	}
}
