package relay

import (
	"net"
	"testing"
	"time"

	"github.com/pion/turn/v4"
)

// TestTCPTransport: TURN over TCP gets the same policy: the self port
// echoes, a denied class is refused.
func TestTCPTransport(t *testing.T) {
	leakCheck(t)
	echo := listenUDP(t, true)
	cfg := testConfig(t)
	cfg["listenTCP"] = "127.0.0.1:0"
	cfg["selfAddresses"] = []string{"127.0.0.1"}
	cfg["selfPorts"] = []int{echo.port()}
	p := startPlugin(t, cfg)
	p.mu.Lock()
	addr := p.inst.tcp.Addr().String()
	p.mu.Unlock()
	cred := mint(t, p, "alice", "p")
	if len(cred.URLs) != 2 || cred.URLs[1] != "turn:"+addr+"?transport=tcp" {
		t.Errorf("URLs = %v", cred.URLs)
	}

	tcp, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	client, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: addr, TURNServerAddr: addr, Conn: turn.NewSTUNConn(tcp),
		Username: cred.Username, Password: cred.Password, Realm: "tabcast", LoggerFactory: quietPion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if err := client.Listen(); err != nil {
		t.Fatal(err)
	}
	relay, err := client.Allocate()
	if err != nil {
		t.Fatalf("Allocate over TCP: %v", err)
	}
	defer relay.Close()
	if _, err := relay.WriteTo([]byte("x"), &net.UDPAddr{IP: net.ParseIP("169.254.169.254"), Port: 80}); err == nil {
		t.Error("permission to 169.254.169.254 granted over TCP")
	}
	buf := make([]byte, 1500)
	var echoed bool
	for i := 0; i < 20 && !echoed; i++ {
		relay.WriteTo([]byte("ping"), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: echo.port()})
		relay.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
		n, _, err := relay.ReadFrom(buf)
		echoed = err == nil && string(buf[:n]) == "ping"
	}
	if !echoed {
		t.Fatal("no echo over TURN/TCP")
	}
}
