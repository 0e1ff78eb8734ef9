package relay

import (
	"net"
	"testing"
	"time"
)

// deniedPeers must never get a permission without being configured as self
// addresses; ::ffff:127.0.0.1 is loopback in IPv4-mapped form.
var deniedPeers = []string{"127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0", "10.0.0.1", "192.168.1.1", "169.254.169.254", "fe80::1", "8.8.8.8"}

// assertDenied writes to each peer through the relay: the CreatePermission
// must fail, the server's deny counter must rise by one per peer and sink
// must receive nothing.
func assertDenied(t *testing.T, p *Plugin, tc *turnClient, peers []string, port int, sink *udpListener) {
	t.Helper()
	before := status(t, p).PermissionDenies
	for _, ip := range peers {
		_, err := tc.relay.WriteTo([]byte("to "+ip), &net.UDPAddr{IP: net.ParseIP(ip), Port: port})
		if err == nil {
			t.Errorf("WriteTo %s: permission granted, want refused", ip)
		}
	}
	if got := status(t, p).PermissionDenies - before; got != uint64(len(peers)) {
		t.Errorf("permission denies rose by %d, want %d (one per peer)", got, len(peers))
	}
	sink.nothingWithin(t, 500*time.Millisecond, "denied peers")
	t.Logf("denied %d peers: %v", len(peers), peers)
}

func TestPolicyUnit(t *testing.T) {
	pol, err := newPeerPolicy([]string{"192.168.1.10", "::ffff:10.0.0.5"}, []int{8443}, []string{"203.1.113.0/24", "198.1.100.7:3000"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr string
		ip   bool
		dgm  bool
	}{
		{"192.168.1.10:8443", true, true},
		{"[::ffff:192.168.1.10]:8443", true, true},
		{"192.168.1.10:8444", true, false},
		{"10.0.0.5:8443", true, true},
		{"192.168.1.11:8443", false, false},
		{"127.0.0.1:8443", false, false},
		{"[::ffff:127.0.0.1]:8443", false, false},
		{"169.254.169.254:80", false, false},
		{"[fe80::1]:8443", false, false},
		{"[fc00::1]:8443", false, false},
		{"100.64.1.1:8443", false, false},
		{"0.0.0.0:8443", false, false},
		{"0.1.2.3:8443", false, false},
		{"224.0.0.1:8443", false, false},
		{"255.255.255.255:8443", false, false},
		{"[64:ff9b::7f00:1]:8443", false, false},
		{"[2002:7f00:1::1]:8443", false, false},
		{"[::127.0.0.1]:8443", false, false},
		{"8.8.8.8:53", false, false},
		{"203.1.113.9:1", true, true},
		{"198.1.100.7:3000", true, true},
		{"198.1.100.7:3001", true, false},
	} {
		a, err := net.ResolveUDPAddr("udp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := pol.permitIP(a.IP); got != c.ip {
			t.Errorf("permitIP(%s) = %v, want %v", c.addr, got, c.ip)
		}
		if got := pol.permitAddr(a); got != c.dgm {
			t.Errorf("permitAddr(%s) = %v, want %v", c.addr, got, c.dgm)
		}
	}
}

// TestPeerPolicy allocates on a real server over loopback and checks that
// with no self addresses nothing is reachable, and with selfAddresses
// 127.0.0.1 + selfPorts P exactly 127.0.0.1:P is.
func TestPeerPolicy(t *testing.T) {
	leakCheck(t)

	echo := listenUDP(t, true) // P
	other := listenUDP(t, false)
	P, Q := echo.port(), other.port()

	// Deny-all: the allow list is empty, so even P is unreachable.
	cfg := testConfig(t)
	p := startPlugin(t, cfg)
	tc := mustAllocate(t, p.udpAddr(), mint(t, p, "alice", "peer1"))
	assertDenied(t, p, tc, deniedPeers, P, echo)
	tc.Close()

	// Self = 127.0.0.1:P.
	cfg["selfAddresses"] = []string{"127.0.0.1"}
	cfg["selfPorts"] = []int{P}
	p = startPlugin(t, cfg)
	tc = mustAllocate(t, p.udpAddr(), mint(t, p, "alice", "peer2"))
	defer tc.Close()
	// Every other class stays denied (127.0.0.1 and its mapped form are now
	// the self address, so they are not in this list).
	assertDenied(t, p, tc, []string{"::1", "0.0.0.0", "10.0.0.1", "192.168.1.1", "169.254.169.254", "fe80::1", "8.8.8.8"}, P, echo)

	pAddr := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: P}
	buf := make([]byte, 1500)
	var echoed bool
	for i := 0; i < 20 && !echoed; i++ { // the first datagrams can race the permission
		if _, err := tc.relay.WriteTo([]byte("ping"), pAddr); err != nil {
			t.Fatalf("WriteTo self P: %v", err)
		}
		tc.relay.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, from, err := tc.relay.ReadFrom(buf)
		if err == nil {
			if string(buf[:n]) != "ping" || from.String() != pAddr.String() {
				t.Fatalf("echo = %q from %v", buf[:n], from)
			}
			echoed = true
		}
	}
	if !echoed {
		t.Fatal("no echo from the allowed self port P through the relay")
	}

	st := status(t, p)
	if _, err := tc.relay.WriteTo([]byte("to Q"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: Q}); err != nil {
		t.Fatalf("WriteTo Q: %v (the permission is per IP, so the client may send; the relay must drop)", err)
	}
	other.nothingWithin(t, 500*time.Millisecond, "self address, port Q")
	if d := status(t, p).PolicyDrops - st.PolicyDrops; d < 1 {
		t.Errorf("policy drops rose by %d, want >= 1", d)
	}

	// Inbound from Q straight to the relay address is dropped as well.
	st = status(t, p)
	relayAddr := tc.relay.LocalAddr()
	if _, err := other.conn.WriteTo([]byte("from Q"), relayAddr); err != nil {
		t.Fatal(err)
	}
	tc.relay.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	if n, from, err := tc.relay.ReadFrom(buf); err == nil {
		t.Errorf("client received %q from %v, want nothing from Q", buf[:n], from)
	}
	if d := status(t, p).PolicyDrops - st.PolicyDrops; d < 1 {
		t.Errorf("policy drops rose by %d for inbound from Q, want >= 1", d)
	}
	t.Logf("stats: %+v", status(t, p))
}
