package relay

import (
	"net"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"
)

// TestTCPAllocationRefused: an RFC 6062 Allocate (REQUESTED-TRANSPORT
// TCP), over UDP and over TCP, gets 442 once authenticated (pion/turn would
// hand out a UDP relay instead) and takes no allocation; the same client
// can still allocate a UDP relay.
func TestTCPAllocationRefused(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	cfg["listenTCP"] = "127.0.0.1:0"
	cfg["selfAddresses"] = []string{"127.0.0.1"}
	cfg["selfPorts"] = []int{9}
	p := startPlugin(t, cfg)
	p.mu.Lock()
	tcpAddr := p.inst.tcp.Addr().String()
	p.mu.Unlock()

	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	for _, tc := range []struct {
		name   string
		server string
		conn   net.PacketConn
	}{
		{"udp", p.udpAddr().String(), udp},
		{"tcp", tcpAddr, turn.NewSTUNConn(tcp)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cred := mint(t, p, "alice", "p-"+tc.name)
			client, err := turn.NewClient(&turn.ClientConfig{
				STUNServerAddr: tc.server, TURNServerAddr: tc.server, Conn: tc.conn,
				Username: cred.Username, Password: cred.Password, Realm: "tabcast", LoggerFactory: quietPion,
				RTO: 200 * time.Millisecond,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if err := client.Listen(); err != nil {
				t.Fatal(err)
			}
			before := status(t, p).AllocationsTotal
			alloc, err := client.AllocateTCP()
			if err == nil {
				alloc.Close()
				t.Fatalf("TCP allocation granted (relayed address %v)", alloc.Addr())
			}
			if code := turnCode(err); code != int(stun.CodeUnsupportedTransProto) {
				t.Fatalf("AllocateTCP: %v (code %d), want 442", err, code)
			}
			if st := status(t, p); st.AllocationsTotal != before || st.AllocationsActive != 0 {
				t.Fatalf("a refused TCP allocation took a relay: %+v", st)
			}
			// The connection and the credential still serve UDP relays.
			relay, err := client.Allocate()
			if err != nil {
				t.Fatalf("UDP allocation after the refusal: %v", err)
			}
			relay.Close()
		})
	}
	if n := p.stats.tcpRelayRefusals.Load(); n != 2 {
		t.Errorf("tcpRelayRefusals = %d, want 2", n)
	}
}

// TestConnectRefused: Connect and ConnectionBind (RFC 6062 §5.2, §5.4),
// which pion/turn leaves unanswered, get 437 and 400 at once, over UDP and
// over TCP.
func TestConnectRefused(t *testing.T) {
	leakCheck(t)
	cfg := testConfig(t)
	cfg["listenTCP"] = "127.0.0.1:0"
	p := startPlugin(t, cfg)
	p.mu.Lock()
	tcpAddr := p.inst.tcp.Addr().String()
	p.mu.Unlock()

	udp, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	tcp, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	peerAddr := &stun.XORMappedAddress{IP: net.IPv4(127, 0, 0, 1), Port: 22}
	for _, tr := range []struct {
		name string
		conn net.PacketConn
		to   net.Addr
	}{{"udp", udp, p.udpAddr()}, {"tcp", turn.NewSTUNConn(tcp), nil}} {
		for _, tc := range []struct {
			method stun.Method
			attr   stun.Setter
			code   stun.ErrorCode
		}{
			{stun.MethodConnect, xorPeerAddress{peerAddr}, stun.CodeAllocMismatch},
			{stun.MethodConnectionBind, connectionID(1), stun.CodeBadRequest},
		} {
			req := stun.MustBuild(stun.TransactionID, stun.NewType(tc.method, stun.ClassRequest), tc.attr, stun.Fingerprint)
			if _, err := tr.conn.WriteTo(req.Raw, tr.to); err != nil {
				t.Fatal(err)
			}
			tr.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 1500)
			n, _, err := tr.conn.ReadFrom(buf)
			if err != nil {
				t.Fatalf("%s %s: no answer: %v", tr.name, tc.method, err)
			}
			res := &stun.Message{Raw: buf[:n]}
			if err := res.Decode(); err != nil {
				t.Fatal(err)
			}
			var ec stun.ErrorCodeAttribute
			if res.TransactionID != req.TransactionID || res.Type != stun.NewType(tc.method, stun.ClassErrorResponse) || ec.GetFrom(res) != nil || ec.Code != tc.code {
				t.Errorf("%s %s: answer %v %v, want error %d", tr.name, tc.method, res.Type, ec, tc.code)
			}
		}
	}
	if n := p.stats.tcpRelayRefusals.Load(); n != 4 {
		t.Errorf("tcpRelayRefusals = %d, want 4", n)
	}
}

// xorPeerAddress adds an XOR-PEER-ADDRESS (the same encoding as
// XOR-MAPPED-ADDRESS under another attribute type).
type xorPeerAddress struct{ a *stun.XORMappedAddress }

func (x xorPeerAddress) AddTo(m *stun.Message) error {
	return x.a.AddToAs(m, stun.AttrXORPeerAddress)
}

// connectionID adds a CONNECTION-ID attribute (RFC 6062 §6.2.1).
type connectionID uint32

func (c connectionID) AddTo(m *stun.Message) error {
	v := uint32(c)
	m.Add(stun.AttrConnectionID, []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	return nil
}
