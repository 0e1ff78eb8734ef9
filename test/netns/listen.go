package netns

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// inNS runs f on an OS thread that has entered the namespace; a socket
// made there belongs to the namespace for its whole life, whichever
// goroutine serves it afterwards. This is how the tests' own servers (a
// LAN host, a metadata mock, a DNS server) live inside a namespace while
// the test process stays outside it.
func (n *NS) inNS(f func() error) error {
	target, err := os.Open("/var/run/netns/" + n.Name)
	if err != nil {
		return err
	}
	defer target.Close()
	runtime.LockOSThread()
	self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer self.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns: %w", err)
	}
	ferr := f()
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it dies with its goroutine instead of
		// serving others from the wrong namespace.
		return fmt.Errorf("setns back: %w", err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Listen opens a TCP listener on addr inside the namespace; t.Cleanup
// closes it.
func (n *NS) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := n.inNS(func() (err error) { ln, err = net.Listen("tcp", addr); return }); err != nil {
		t.Fatalf("netns %s: listen %s: %v", n.Name, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// ListenPacket opens a UDP socket on addr inside the namespace; t.Cleanup
// closes it.
func (n *NS) ListenPacket(t testing.TB, addr string) net.PacketConn {
	t.Helper()
	var pc net.PacketConn
	if err := n.inNS(func() (err error) { pc, err = net.ListenPacket("udp", addr); return }); err != nil {
		t.Fatalf("netns %s: listen udp %s: %v", n.Name, addr, err)
	}
	t.Cleanup(func() { pc.Close() })
	return pc
}

// AddLocal adds addrs (CIDR, e.g. "169.254.169.254/32") to the
// namespace's lo: addresses its own processes and servers reach locally,
// and nothing outside it can. (lo rather than a dummy interface: the
// dummy module is not in every kernel CI runs on.)
func (n *NS) AddLocal(t testing.TB, addrs ...string) {
	t.Helper()
	for _, a := range addrs {
		n.Run(t, "ip", "addr", "add", a, "dev", "lo")
	}
}

// SetResolver makes processes started in the namespace (ip netns exec)
// resolve names with the server at addr: /etc/netns/NAME/resolv.conf,
// removed by t.Cleanup.
func (n *NS) SetResolver(t testing.TB, addr string) {
	t.Helper()
	dir := filepath.Join("/etc/netns", n.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.WriteFile(filepath.Join(dir, "resolv.conf"), []byte("nameserver "+addr+"\noptions timeout:1 attempts:2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Dial connects from inside the namespace (a server of the test standing
// for a proxy in the namespace connects on its behalf).
func (n *NS) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := n.inNS(func() (err error) { c, err = net.DialTimeout(network, addr, timeout); return })
	return c, err
}
