package netns_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/test/netns"
)

// The test binary doubles as a tiny client run inside the namespace:
// TC_NETNS_HELPER=udp|tcp and TC_NETNS_ADDR=host:port send "ping" and wait
// for the echo; exit 0 on the echo, 3 otherwise.
func TestMain(m *testing.M) {
	if mode := os.Getenv("TC_NETNS_HELPER"); mode != "" {
		os.Exit(helper(mode, os.Getenv("TC_NETNS_ADDR")))
	}
	os.Exit(m.Run())
}

func helper(mode, addr string) int {
	c, err := net.DialTimeout(mode, addr, 2*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		return 3
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		fmt.Fprintln(os.Stderr, "write:", err)
		return 3
	}
	b := make([]byte, 16)
	n, err := c.Read(b)
	if err != nil || string(b[:n]) != "ping" {
		fmt.Fprintf(os.Stderr, "read: %q %v\n", b[:n], err)
		return 3
	}
	fmt.Println("echo ok")
	return 0
}

// reach runs the helper inside ns against addr and reports whether the
// echo came back.
func reach(t *testing.T, ns *netns.NS, mode, addr string) bool {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := ns.Exec(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), "TC_NETNS_HELPER="+mode, "TC_NETNS_ADDR="+addr)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true
	case errors.As(err, &ee) && ee.ExitCode() == 3:
		t.Logf("%s %s from %s: no echo: %s", mode, addr, ns.Name, strings.TrimSpace(string(out)))
		return false
	default:
		t.Fatalf("helper in %s: %v: %s", ns.Name, err, out)
		return false
	}
}

type udpEcho struct {
	addr string
	got  atomic.Int64
}

func startUDPEcho(t *testing.T, ip string) *udpEcho {
	t.Helper()
	pc, err := net.ListenPacket("udp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	e := &udpEcho{addr: pc.LocalAddr().String()}
	go func() {
		b := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			e.got.Add(1)
			_, _ = pc.WriteTo(b[:n], from)
		}
	}()
	return e
}

func startTCPEcho(t *testing.T, ip string) string {
	t.Helper()
	ln, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.CopyN(c, c, 4)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestNamespaceRoundTrip(t *testing.T) {
	testenv.NeedsNetNS(t) // the subtest's skip would not reach this test
	var name, hostIf, nsIf string
	t.Run("ns", func(t *testing.T) {
		ns := netns.Create(t, "roundtrip")
		name, hostIf, nsIf = ns.Name, ns.HostIf, ns.NSIf
		if !strings.HasPrefix(ns.Name, netns.Prefix) || !netns.Exists(ns.Name) || !netns.LinkExists(ns.HostIf) {
			t.Fatalf("namespace %s / link %s not there", ns.Name, ns.HostIf)
		}
		if out := ns.Run(t, "ip", "-o", "addr", "show", "dev", ns.NSIf); !strings.Contains(out, ns.NSIP+"/24") {
			t.Fatalf("ns address: %s", out)
		}
		if out := ns.Run(t, "ip", "link", "show", "lo"); !strings.Contains(out, "UP") {
			t.Fatalf("lo not up in ns: %s", out)
		}

		udp := startUDPEcho(t, ns.HostIP)
		tcp := startTCPEcho(t, ns.HostIP)
		tcp2 := startTCPEcho(t, ns.HostIP)
		if !reach(t, ns, "udp", udp.addr) || udp.got.Load() == 0 {
			t.Fatalf("UDP from %s to %s did not arrive", ns.Name, udp.addr)
		}
		if !reach(t, ns, "tcp", tcp) {
			t.Fatalf("TCP from %s to %s failed", ns.Name, tcp)
		}

		ns.BlockUDP(t)
		before := udp.got.Load()
		if reach(t, ns, "udp", udp.addr) {
			t.Fatal("UDP still echoed after BlockUDP")
		}
		if udp.got.Load() != before {
			t.Fatal("UDP datagram reached the host after BlockUDP")
		}
		if !reach(t, ns, "tcp", tcp) {
			t.Fatal("TCP broken by BlockUDP")
		}

		_, port, _ := net.SplitHostPort(tcp)
		var p int
		fmt.Sscan(port, &p)
		ns.BlockTCPPort(t, p)
		if reach(t, ns, "tcp", tcp) {
			t.Fatalf("TCP to blocked port %d still works", p)
		}
		if !reach(t, ns, "tcp", tcp2) {
			t.Fatal("TCP to another port broken by BlockTCPPort")
		}
	})
	if name == "" {
		if os.Geteuid() != 0 {
			t.Skip("netns: needs root")
		}
		t.Fatal("no namespace was created")
	}
	// The subtest's Cleanup has run: everything must be gone.
	if netns.Exists(name) {
		t.Errorf("namespace %s still listed by ip netns list", name)
	}
	for _, l := range []string{hostIf, nsIf} {
		if netns.LinkExists(l) {
			t.Errorf("link %s still present", l)
		}
	}
}

func TestShapeRate(t *testing.T) {
	ns := netns.Create(t, "shape")
	ns.Shape(t, 2000, 0)
	if out := ns.Run(t, "tc", "qdisc", "show", "dev", ns.NSIf); !strings.Contains(out, "tbf") || !strings.Contains(out, "2Mbit") {
		t.Fatalf("ns side qdisc: %s", out)
	}
	ns.ShapeDir(t, netns.Down, 500, 0)
	tcp := startTCPEcho(t, ns.HostIP)
	if !reach(t, ns, "tcp", tcp) {
		t.Fatal("TCP broken by shaping")
	}
	ns.Shape(t, 0, 0) // removes it
	if out := ns.Run(t, "tc", "qdisc", "show", "dev", ns.NSIf); strings.Contains(out, "tbf") {
		t.Fatalf("tbf left after Shape(0, 0): %s", out)
	}
}

func TestParallelNamespaces(t *testing.T) {
	a := netns.Create(t, "a")
	b := netns.Create(t, "b")
	if a.Name == b.Name || a.HostIP == b.HostIP {
		t.Fatalf("collision: %+v %+v", a, b)
	}
	udp := startUDPEcho(t, b.HostIP)
	if !reach(t, b, "udp", udp.addr) {
		t.Fatal("second namespace cannot reach its host end")
	}
}
