package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// listenNotify is a stand-in for systemd's notify socket.
func listenNotify(t *testing.T) (*net.UnixConn, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, path
}

// next reads the next datagram, "" after wait without one.
func next(t *testing.T, c *net.UnixConn, wait time.Duration) string {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(wait))
	b := make([]byte, 256)
	n, err := c.Read(b)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return ""
		}
		t.Fatal(err)
	}
	return string(b[:n])
}

func TestNotifierOffWithoutSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	n := newNotifier()
	if n != nil || n.send("READY=1") != nil {
		t.Fatalf("without NOTIFY_SOCKET the notifier must be a no-op, got %+v", n)
	}
}

func TestWatchdogEvery(t *testing.T) {
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0}, {"abc", "", 0}, {"-5", "", 0}, {"30000000", "", 15 * time.Second},
		{"30000000", "1", 0}, // another process's watchdog
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		if got := watchdogEvery(); got != c.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}

// TestWatchdogFeedsOnlyWhileAlive: pings while the check passes, none while
// it fails (systemd then restarts the service), pings again after; the
// goroutine ends with its context.
func TestWatchdogFeedsOnlyWhileAlive(t *testing.T) {
	sock, path := listenNotify(t)
	t.Setenv("NOTIFY_SOCKET", path)
	n := newNotifier()
	if err := n.send("READY=1"); err != nil {
		t.Fatal(err)
	}
	if got := next(t, sock, time.Second); got != "READY=1" {
		t.Fatalf("got %q, want READY=1", got)
	}
	var failing atomic.Bool
	check := func(context.Context) error {
		if failing.Load() {
			return errors.New("stuck")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		watchdog(ctx, n, 20*time.Millisecond, check, slog.New(slog.NewTextHandler(io.Discard, nil)))
	}()
	for i := 0; i < 3; i++ {
		if got := next(t, sock, 2*time.Second); got != "WATCHDOG=1" {
			t.Fatalf("ping %d: got %q, want WATCHDOG=1", i, got)
		}
	}
	failing.Store(true)
	// A ping already on its way may still arrive; after that, silence.
	for got := next(t, sock, 200*time.Millisecond); got != ""; got = next(t, sock, 200*time.Millisecond) {
	}
	if got := next(t, sock, 300*time.Millisecond); got != "" {
		t.Fatalf("pinged %q while the check fails", got)
	}
	failing.Store(false)
	if got := next(t, sock, 2*time.Second); got != "WATCHDOG=1" {
		t.Fatalf("after recovery: got %q, want WATCHDOG=1", got)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("watchdog goroutine did not stop with its context")
	}
}

// TestLivenessSeesAStuckHTTPServer: the check fails against a listener that
// accepts connections but never answers.
func TestLivenessSeesAStuckHTTPServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	a := &appliance{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := a.liveness(ln.Addr(), false)(ctx); err == nil {
		t.Fatal("liveness passed against a server that never answers")
	}
}
