package relay

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink safe for pion's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestAddressesAtDebugOnly: refusals name the client and peer only on a
// debug line; pion's own messages are masked at warning level.
func TestAddressesAtDebugOnly(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf syncBuffer
		rl := newRateLog(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level})), time.Hour)
		rl.warnAddrs("permission", "refused", []any{"peer", "169.254.169.254", "client", "10.1.2.3:5000"}, "id", "x")
		pionLogger{rl: rl, scope: "turn"}.Errorf("Failed to send ChannelData from allocation %v %v", "10.9.8.7:4000", "[fd00::1]:3478")
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var warns, debugs []string
		for _, l := range lines {
			switch {
			case strings.Contains(l, "level=WARN"):
				warns = append(warns, l)
			case strings.Contains(l, "level=DEBUG"):
				debugs = append(debugs, l)
			}
		}
		if len(warns) != 2 {
			t.Fatalf("level %v: warnings %q", level, warns)
		}
		for _, w := range warns {
			for _, a := range []string{"169.254.169.254", "10.1.2.3", "10.9.8.7", "fd00::1"} {
				if strings.Contains(w, a) {
					t.Errorf("level %v: warning names %s: %s", level, a, w)
				}
			}
		}
		if !strings.Contains(warns[1], "[addr]") {
			t.Errorf("pion's message not masked: %s", warns[1])
		}
		wantDebug := 0
		if level == slog.LevelDebug {
			wantDebug = 2
		}
		if len(debugs) != wantDebug {
			t.Fatalf("level %v: debug lines %q, want %d", level, debugs, wantDebug)
		}
		if wantDebug > 0 && (!strings.Contains(debugs[0], "client=10.1.2.3:5000") || !strings.Contains(debugs[1], "10.9.8.7:4000")) {
			t.Errorf("debug lines without the addresses: %q", debugs)
		}
	}
}

// TestRefusalLogsWithoutAddresses: a live relay's refusals (wrong password,
// a denied peer) log at info level without the client's or peer's address.
func TestRefusalLogsWithoutAddresses(t *testing.T) {
	leakCheck(t)
	var buf syncBuffer
	p := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	if err := p.SetConfig(context.Background(), mustJSON(t, testConfig(t))); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	cred := mint(t, p, "alice", "p")
	bad, err := allocate(t, p.udpAddr(), cred.Username, "wrong")
	bad.Close()
	if err == nil {
		t.Fatal("allocated with a wrong password")
	}
	tc := mustAllocate(t, p.udpAddr(), cred)
	defer tc.Close()
	if _, err := tc.relay.WriteTo([]byte("x"), &net.UDPAddr{IP: net.IPv4(169, 254, 169, 254), Port: 80}); err == nil {
		t.Error("permission to 169.254.169.254 granted")
	}
	eventually(t, "both refusals logged", func() bool {
		out := buf.String()
		return strings.Contains(out, "wrong password") && strings.Contains(out, "TURN permission refused")
	})
	_, clientPort, _ := net.SplitHostPort(tc.conn.LocalAddr().String())
	for _, l := range strings.Split(buf.String(), "\n") {
		if strings.Contains(l, "169.254.169.254") || strings.Contains(l, "client=") || strings.Contains(l, ":"+clientPort) {
			t.Errorf("log line names an address: %s", l)
		}
	}
}
