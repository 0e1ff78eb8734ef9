// Package netns gives tests a network namespace joined to the host by a
// veth pair, so a viewer can run "elsewhere" (ip netns exec) and see the
// appliance on the host side of the veth — and so its network can be broken
// on purpose (UDP blocked, a TCP port blocked, a shaped link) without
// touching any other address of the machine.
//
// Everything is created with iproute2 (ip, tc) and nftables (nft) or
// iptables, and removed by t.Cleanup even when the test fails. Names are
// "tc-" plus 6 random hex digits, so leftovers of a killed run never
// collide with a new one. Tests skip only when not run as root; any failing
// command fails the test.
package netns

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/internal/testenv"
)

// Prefix starts every namespace and interface name this package creates.
const Prefix = "tc-"

// NS is a network namespace joined to the host by a veth pair on a /24:
// HostIP on the host end (HostIf), NSIP on the namespace end (NSIf). The
// namespace's default route goes via HostIP, and its lo is up.
type NS struct {
	Name   string // namespace name, e.g. tc-3f9a1c
	HostIf string // veth end in the host namespace, e.g. tc-3f9a1c-h
	NSIf   string // veth end in the namespace, e.g. tc-3f9a1c-n
	HostIP string // e.g. 10.77.0.1
	NSIP   string // e.g. 10.77.0.2
	Prefix int    // 24

	t testing.TB
}

// subnetLock serializes the choice of a free 10.77.X.0/24 within this
// process; lockFile does so across processes (go test runs packages in
// parallel).
var subnetLock sync.Mutex

const lockFile = "/run/tabcast-test-netns.lock"

// Create makes a namespace, a veth pair with HostIP/24 and NSIP/24 on a
// 10.77.X.0/24 no host interface uses yet, brings the links and the
// namespace's lo up and adds a default route in the namespace. t.Cleanup
// removes it all (and kills processes left in the namespace). name is a
// label for logs only; the namespace gets a unique name.
//
// Create skips the test when not run as root, and fails it when a command
// is missing or fails.
func Create(t testing.TB, name string) *NS {
	t.Helper()
	testenv.NeedsNetNS(t) // every namespace test comes through here
	if os.Geteuid() != 0 {
		t.Skipf("netns: %s needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces", t.Name())
	}
	requireTool(t, "ip", "iproute2")
	id := randomID(t)
	n := &NS{Name: Prefix + id, HostIf: Prefix + id + "-h", NSIf: Prefix + id + "-n", Prefix: 24, t: t}
	t.Cleanup(n.destroy) // first, so a half-built namespace is removed too

	unlock := lockSubnets(t)
	defer unlock()
	x := freeSubnet(t)
	n.HostIP = fmt.Sprintf("10.77.%d.1", x)
	n.NSIP = fmt.Sprintf("10.77.%d.2", x)
	cidr := "/" + strconv.Itoa(n.Prefix)

	run(t, "ip", "netns", "add", n.Name)
	run(t, "ip", "link", "add", n.HostIf, "type", "veth", "peer", "name", n.NSIf, "netns", n.Name)
	run(t, "ip", "addr", "add", n.HostIP+cidr, "dev", n.HostIf)
	run(t, "ip", "link", "set", n.HostIf, "up")
	run(t, "ip", "-n", n.Name, "link", "set", "lo", "up")
	run(t, "ip", "-n", n.Name, "addr", "add", n.NSIP+cidr, "dev", n.NSIf)
	run(t, "ip", "-n", n.Name, "link", "set", n.NSIf, "up")
	run(t, "ip", "-n", n.Name, "route", "add", "default", "via", n.HostIP)
	t.Logf("netns %s (%s): host %s on %s, ns %s on %s", n.Name, name, n.HostIP, n.HostIf, n.NSIP, n.NSIf)
	return n
}

// Exec returns a command running name inside the namespace (ip netns exec).
// ip execs the command, so cancelling ctx kills the command itself.
func (n *NS) Exec(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// Run runs name inside the namespace and returns its combined output; a
// failure fails the test.
func (n *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return run(t, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
}

// BlockUDP drops every UDP datagram the namespace sends (its output chain),
// so only TCP gets out: ICE over UDP fails, TURN over TCP/TLS still works.
// The rule lives in the namespace and goes with it.
func (n *NS) BlockUDP(t testing.TB) {
	t.Helper()
	n.filterOutput(t, "udp", 0)
}

// BlockTCPPort drops TCP segments the namespace sends to port (any
// address). The rule lives in the namespace and goes with it.
func (n *NS) BlockTCPPort(t testing.TB, port int) {
	t.Helper()
	if port <= 0 || port > 65535 {
		t.Fatalf("netns: BlockTCPPort: bad port %d", port)
	}
	n.filterOutput(t, "tcp", port)
}

// filterOutput adds a drop rule to the namespace's output path, with nft
// when installed, else iptables.
func (n *NS) filterOutput(t testing.TB, proto string, dport int) {
	t.Helper()
	if _, err := exec.LookPath("nft"); err == nil {
		// Idempotent: "add" of an existing table/chain is a no-op.
		n.Run(t, "nft", "add", "table", "inet", "tcfilter")
		n.Run(t, "nft", "add", "chain", "inet", "tcfilter", "output",
			"{ type filter hook output priority 0 ; policy accept ; }")
		rule := []string{"add", "rule", "inet", "tcfilter", "output", "meta", "l4proto", proto}
		if dport > 0 {
			rule = append(rule, proto, "dport", strconv.Itoa(dport))
		}
		n.Run(t, "nft", append(rule, "drop")...)
		return
	}
	requireTool(t, "iptables", "nftables or iptables")
	for _, ipt := range []string{"iptables", "ip6tables"} {
		args := []string{"-w", "-A", "OUTPUT", "-p", proto}
		if dport > 0 {
			args = append(args, "--dport", strconv.Itoa(dport))
		}
		if _, err := exec.LookPath(ipt); err != nil && ipt == "ip6tables" {
			continue
		}
		n.Run(t, ipt, append(args, "-j", "DROP")...)
	}
}

// Direction of a shaped link.
type Direction int

const (
	// Down is host → namespace (egress of the host end): what a viewer in
	// the namespace receives, i.e. the video.
	Down Direction = iota + 1
	// Up is namespace → host (egress of the namespace end).
	Up
)

// Shape limits the link in both directions to rateKbit (0: no rate limit)
// with lossPct random loss (0: none). See ShapeDir.
func (n *NS) Shape(t testing.TB, rateKbit int, lossPct float64) {
	t.Helper()
	n.ShapeDir(t, Down, rateKbit, lossPct)
	n.ShapeDir(t, Up, rateKbit, lossPct)
}

// ShapeDir replaces the root qdisc of one veth end: tbf for the rate, and
// netem (as root, tbf under it) when lossPct > 0. Calling it again changes
// the shaping; rateKbit 0 and lossPct 0 remove it. Loss needs the kernel's
// sch_netem; without it the test fails with that reason. The qdiscs go
// with the veth.
func (n *NS) ShapeDir(t testing.TB, dir Direction, rateKbit int, lossPct float64) {
	t.Helper()
	requireTool(t, "tc", "iproute2")
	if rateKbit < 0 || lossPct < 0 || lossPct > 100 {
		t.Fatalf("netns: Shape: bad rate %d kbit/s or loss %v%%", rateKbit, lossPct)
	}
	var tc []string
	switch dir {
	case Down:
		tc = []string{"tc"}
	case Up:
		tc = []string{"ip", "netns", "exec", n.Name, "tc"}
	default:
		t.Fatalf("netns: Shape: bad direction %d", dir)
	}
	dev := n.HostIf
	if dir == Up {
		dev = n.NSIf
	}
	// tcq runs "tc qdisc VERB dev DEV REST..." on the chosen end.
	tcq := func(verb string, rest ...string) (string, error) {
		args := append(append(append([]string(nil), tc[1:]...), "qdisc", verb, "dev", dev), rest...)
		return output(tc[0], args...)
	}
	mustTcq := func(verb string, rest ...string) {
		t.Helper()
		if out, err := tcq(verb, rest...); err != nil {
			t.Fatalf("netns: tc qdisc %s dev %s %s: %v: %s", verb, dev, strings.Join(rest, " "), err, out)
		}
	}
	// Back to the default qdisc; deleting a missing root is an error we
	// ignore.
	_, _ = tcq("del", "root")
	if rateKbit == 0 && lossPct == 0 {
		return
	}
	// burst: at least two MTUs, ~10 ms of data; latency bounds the queue.
	burst := strconv.Itoa(max(rateKbit*1000/8/100, 3200))
	tbf := []string{"tbf", "rate", strconv.Itoa(rateKbit) + "kbit", "burst", burst, "latency", "200ms"}
	if lossPct == 0 {
		mustTcq("add", append([]string{"root", "handle", "1:"}, tbf...)...)
		return
	}
	netem := []string{"root", "handle", "1:", "netem", "loss", strconv.FormatFloat(lossPct, 'f', -1, 64) + "%"}
	if out, err := tcq("add", netem...); err != nil {
		if strings.Contains(out, "unknown") {
			t.Fatalf("netns: Shape: loss needs the netem qdisc, which this kernel lacks (CONFIG_NET_SCH_NETEM / sch_netem): %s", out)
		}
		t.Fatalf("netns: tc qdisc add dev %s %s: %v: %s", dev, strings.Join(netem, " "), err, out)
	}
	if rateKbit > 0 {
		mustTcq("add", append([]string{"parent", "1:1", "handle", "10:"}, tbf...)...)
	}
}

// destroy removes the namespace and the veth, kills what still runs in the
// namespace, and waits until both are gone. Errors are reported, not fatal
// (it runs in Cleanup).
func (n *NS) destroy() {
	t := n.t
	if out, err := output("ip", "netns", "pids", n.Name); err == nil {
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	// Deleting the host end removes the pair at once; deleting the
	// namespace alone frees the veth asynchronously.
	if n.linkExists() {
		if out, err := output("ip", "link", "del", n.HostIf); err != nil && n.linkExists() {
			t.Errorf("netns cleanup: ip link del %s: %v: %s", n.HostIf, err, out)
		}
	}
	if n.nsExists() {
		if out, err := output("ip", "netns", "del", n.Name); err != nil {
			t.Errorf("netns cleanup: ip netns del %s: %v: %s", n.Name, err, out)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for n.linkExists() || n.nsExists() {
		if time.Now().After(deadline) {
			t.Errorf("netns cleanup: %s or %s still present after 10s", n.Name, n.HostIf)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (n *NS) nsExists() bool {
	_, err := os.Stat("/run/netns/" + n.Name)
	return err == nil
}

func (n *NS) linkExists() bool {
	_, err := net.InterfaceByName(n.HostIf)
	return err == nil
}

// Exists reports whether namespace name is listed by ip netns list.
func Exists(name string) bool {
	out, err := output("ip", "netns", "list")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// LinkExists reports whether the host has an interface called name
// (ip link show).
func LinkExists(name string) bool {
	_, err := output("ip", "link", "show", "dev", name)
	return err == nil
}

func freeSubnet(t testing.TB) int {
	t.Helper()
	used := map[int]bool{}
	out := run(t, "ip", "-4", "-o", "addr", "show")
	for _, f := range strings.Fields(out) {
		ip, _, err := net.ParseCIDR(f)
		if err != nil {
			continue
		}
		if v4 := ip.To4(); v4 != nil && v4[0] == 10 && v4[1] == 77 {
			used[int(v4[2])] = true
		}
	}
	routes := run(t, "ip", "-4", "route", "show")
	for _, f := range strings.Fields(routes) {
		if _, nw, err := net.ParseCIDR(f); err == nil {
			if v4 := nw.IP.To4(); v4 != nil && v4[0] == 10 && v4[1] == 77 {
				used[int(v4[2])] = true
			}
		}
	}
	for x := range 255 {
		if !used[x] {
			return x
		}
	}
	t.Fatal("netns: no free 10.77.X.0/24 left (leftover tc-* namespaces? see ip netns list)")
	return 0
}

func lockSubnets(t testing.TB) func() {
	t.Helper()
	subnetLock.Lock()
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		subnetLock.Unlock()
		t.Fatalf("netns: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		subnetLock.Unlock()
		t.Fatalf("netns: lock %s: %v", lockFile, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
		subnetLock.Unlock()
	}
}

func randomID(t testing.TB) string {
	t.Helper()
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("netns: random: %v", err)
	}
	return hex.EncodeToString(b)
}

func requireTool(t testing.TB, tool, pkg string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Fatalf("netns: %s not found: install the Debian package %s", tool, pkg)
	}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := output(name, args...)
	if err != nil {
		t.Fatalf("netns: %s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return out
}

func output(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var b bytes.Buffer
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return strings.TrimSpace(b.String()), err
}
