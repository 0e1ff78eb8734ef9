package relay

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pion/stun/v3"
	"github.com/pion/turn/v4"
	turnapi "github.com/tabcast/tabcast/plugins/turn"
	"go.uber.org/goleak"
)

var quietPion = pionLoggerFactory{rl: newRateLog(slog.New(slog.NewTextHandler(io.Discard, nil)), time.Hour)}

// testConfig is a loopback-only config: UDP listener on an ephemeral port,
// relays on 127.0.0.1 in a random port range, secret in a temp dir.
func testConfig(t *testing.T) map[string]any {
	t.Helper()
	// Below the kernel's ephemeral range (32768+), so the echo listeners
	// the tests bind on :0 never fall inside the relay range.
	lo := 20000 + rand.IntN(12000)
	return map[string]any{
		"listenUDP":      "127.0.0.1:0",
		"listenTCP":      "",
		"relayAddress":   "127.0.0.1",
		"relayPortMin":   lo,
		"relayPortMax":   lo + 60,
		"maxAllocations": 50,
		"secretFile":     filepath.Join(t.TempDir(), "turn-secret"),
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// startPlugin runs the plugin in-process with cfg; it is shut down at the
// end of the test.
func startPlugin(t *testing.T, cfg map[string]any) *Plugin {
	t.Helper()
	p := New(slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err := p.SetConfig(context.Background(), mustJSON(t, cfg)); err != nil {
		t.Fatalf("SetConfig: %v", err)
	}
	t.Cleanup(func() { p.Shutdown(context.Background()) })
	return p
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func (p *Plugin) udpAddr() net.Addr {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inst.udp.LocalAddr()
}

func mint(t *testing.T, p *Plugin, user, peer string) turnapi.Credential {
	t.Helper()
	c, err := p.MintCredential(context.Background(), turnapi.Scope{User: user, Session: "s1", Peer: peer, Generation: 1}, 5*time.Minute)
	if err != nil {
		t.Fatalf("MintCredential: %v", err)
	}
	return c
}

// turnClient is a pion TURN client on loopback with its relay allocation.
type turnClient struct {
	client *turn.Client
	conn   net.PacketConn
	relay  net.PacketConn
}

func (c *turnClient) Close() {
	if c.relay != nil {
		c.relay.Close()
	}
	c.client.Close()
	c.conn.Close()
}

// allocate connects to server with username/password and allocates; it
// returns the client even when Allocate fails (with the error).
func allocate(t *testing.T, server net.Addr, username, password string) (*turnClient, error) {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	client, err := turn.NewClient(&turn.ClientConfig{
		STUNServerAddr: server.String(), TURNServerAddr: server.String(), Conn: conn,
		Username: username, Password: password, Realm: "tabcast", LoggerFactory: quietPion,
		RTO: 200 * time.Millisecond,
	})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	tc := &turnClient{client: client, conn: conn}
	if err := client.Listen(); err != nil {
		tc.Close()
		t.Fatal(err)
	}
	tc.relay, err = client.Allocate()
	return tc, err
}

func mustAllocate(t *testing.T, server net.Addr, cred turnapi.Credential) *turnClient {
	t.Helper()
	tc, err := allocate(t, server, cred.Username, cred.Password)
	if err != nil {
		tc.Close()
		t.Fatalf("Allocate: %v", err)
	}
	return tc
}

// turnCode is the TURN error code in err (0 when none).
func turnCode(err error) int {
	var te *stun.TurnError
	if errors.As(err, &te) {
		return int(te.ErrorCodeAttr.Code)
	}
	return 0
}

// udpListener is a loopback UDP socket; echo makes it send every datagram
// back.
type udpListener struct {
	conn net.PacketConn
	got  chan []byte
	done chan struct{}
}

func listenUDP(t *testing.T, echo bool) *udpListener {
	t.Helper()
	conn, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &udpListener{conn: conn, got: make(chan []byte, 4096), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		buf := make([]byte, 2048)
		for {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if echo {
				conn.WriteTo(buf[:n], from)
			}
			select {
			case l.got <- append([]byte(nil), buf[:n]...):
			default:
			}
		}
	}()
	t.Cleanup(l.Close)
	return l
}

func (l *udpListener) Close() {
	l.conn.Close()
	<-l.done
}

func (l *udpListener) port() int { return l.conn.LocalAddr().(*net.UDPAddr).Port }

// nothingWithin fails unless l receives nothing for d.
func (l *udpListener) nothingWithin(t *testing.T, d time.Duration, what string) {
	t.Helper()
	select {
	case b := <-l.got:
		t.Errorf("%s: listener received %q, want nothing", what, b)
	case <-time.After(d):
	}
}

func status(t *testing.T, p *Plugin) turnapi.Stats {
	t.Helper()
	st, err := p.Status(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// eventually polls cond for up to 5 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func readSecret(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// leakCheck verifies at the very end of the test (after every other
// cleanup) that no goroutine started by it is left.
func leakCheck(t *testing.T) {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}
