package e2e

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// TestSystemdNotify: under systemd (Type=notify, WatchdogSec) the appliance
// says READY=1 once it serves, feeds the watchdog, brackets a SIGHUP reload
// with RELOADING=1/READY=1 and says STOPPING=1 on SIGTERM. The notify
// socket here is the test's own.
func TestSystemdNotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "notify")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	got := make(chan string, 256)
	go func() {
		b := make([]byte, 512)
		for {
			n, err := sock.Read(b)
			if err != nil {
				close(got)
				return
			}
			got <- string(b[:n])
		}
	}()
	var a *harness.Appliance
	wait := func(want string, within time.Duration) {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case m, ok := <-got:
				if !ok {
					t.Fatalf("notify socket closed before %q", want)
				}
				if m == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %q within %v\n%s", want, within, a.LogTail(3000))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// WatchdogSec=2s: a ping every second (each liveness check may take up
	// to a second: a loaded CI box must not miss them all).
	a, err = harness.StartWith(ctx, t.TempDir(), harness.Options{Env: []string{"NOTIFY_SOCKET=" + path, "WATCHDOG_USEC=2000000"}},
		"sessions.openDefault=false")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	wait("READY=1", 30*time.Second)
	for i := 0; i < 3; i++ {
		wait("WATCHDOG=1", 10*time.Second)
	}
	if err := a.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait("RELOADING=1", 10*time.Second)
	wait("READY=1", 10*time.Second)
	if err := a.Stop(15 * time.Second); err != nil {
		t.Fatalf("stop: %v\n%s", err, a.LogTail(2000))
	}
	wait("STOPPING=1", 5*time.Second)
	if strings.Contains(a.LogTail(20000), "watchdog: liveness check failed") {
		t.Errorf("the liveness check failed on a healthy appliance:\n%s", a.LogTail(3000))
	}
}
