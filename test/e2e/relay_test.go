package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/netns"
	"github.com/tabcast/tabcast/test/viewer"
)

// freePort returns a port free for both UDP and TCP on host.
func freePort(t *testing.T, host string) int {
	t.Helper()
	for range 50 {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		u, err := net.ListenPacket("udp", net.JoinHostPort(host, fmt.Sprint(port)))
		l.Close()
		if err == nil {
			u.Close()
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// relaySets turns the relay on with ports of its own on host.
func relaySets(t *testing.T, host string) (sets []string, turnPort int) {
	media, turnPort := freePort(t, host), freePort(t, host)
	return []string{
		fmt.Sprintf("webrtc.udpPort=%d", media), "webrtc.tcp=true", "turn.enabled=true",
		fmt.Sprintf("plugins.config.turnd.listenUDP=%s:%d", host, turnPort),
		fmt.Sprintf("plugins.config.turnd.listenTCP=%s:%d", host, turnPort),
		"plugins.config.turnd.relayAddress=" + host,
		"plugins.config.turnd.relayPortMin=" + fmt.Sprint(40000+turnPort%10000),
		"plugins.config.turnd.relayPortMax=" + fmt.Sprint(40000+turnPort%10000+40),
		"plugins.config.turnd.maxAllocations=20",
	}, turnPort
}

// TestRelayOnlyOnLoopback: with webrtc.relayOnly the appliance is reachable
// only through its own relay; a viewer that follows the welcome's TURN
// credentials connects through it and gets video, and its credential stops
// working when it leaves.
func TestRelayOnlyOnLoopback(t *testing.T) {
	p := pages(t)
	sets, _ := relaySets(t, "127.0.0.1")
	a, s := startWithSession(t, p.URL+"/anim", append(sets, "webrtc.relayOnly=true")...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: 5 * time.Second,
		ICETransportPolicy: "relay", Interfaces: []string{"lo"}})
	if err != nil {
		t.Fatalf("relayed viewer: %v\n%s", err, a.LogTail(3000))
	}
	t.Logf("relayed viewer: %d frames, pair %s/%s over %s, first frame after %v", r.Frames, r.LocalCandidateType, r.RemoteCandidateType, r.RelayProtocol, r.FirstFrame)
	if r.WelcomeICEServers == 0 || r.LocalCandidateType != "relay" || r.Frames < 10 {
		t.Errorf("relay-only: %+v", r)
	}
	var metrics string
	if err := a.DoRaw(ctx, "GET", "/metrics", &metrics); err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^tabcast_turn_allocations_total (\d+)`).FindStringSubmatch(metrics)
	if m == nil || m[1] == "0" {
		t.Errorf("/metrics: tabcast_turn_allocations_total missing or 0:\n%s", metrics)
	}
	logs, _ := os.ReadFile(a.LogPath)
	for _, secret := range []string{`"credential"`, "turn-secret-"} {
		if strings.Contains(string(logs), secret) {
			t.Errorf("the log mentions %s", secret)
		}
	}
}

// TestRelayOverTCPFromAnotherNetwork: a viewer in its own network namespace
// whose UDP is blocked reaches the appliance only through the relay over
// TCP, and receives video.
func TestRelayOverTCPFromAnotherNetwork(t *testing.T) {
	ns := netns.Create(t, "relay")
	p := pages(t)
	sets, _ := relaySets(t, ns.HostIP)
	// Beyond loopback: HTTPS with the generated certificate, auth on.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, s := startOnNetns(ctx, t, ns, append(sets, "webrtc.interfaces="+ns.HostIf, "browser.startURL="+p.URL+"/anim", "input.allowLoopbackHosts=127.0.0.1")...)
	bin := tcviewerBin(t)
	ns.BlockUDP(t)
	r, err := watchFromNetns(ctx, t, ns, bin, a, s, "--for", "5s", "--timeout", "60s")
	if err != nil {
		t.Fatalf("tcviewer: %v\n%s", err, a.LogTail(3000))
	}
	t.Logf("viewer without UDP: %d frames, pair %s/%s, relay over %s, first frame after %v", r.Frames, r.LocalCandidateType, r.RemoteCandidateType, r.RelayProtocol, r.FirstFrame)
	if r.LocalCandidateType != "relay" || r.RelayProtocol != "tcp" || r.Frames < 10 {
		t.Errorf("want a relay over TCP with video, got %+v", r)
	}
}

// TestRelayOnlyFromAnotherNetwork: with webrtc.relayOnly a viewer on
// another network that ignores the relay gets no video; one that uses it
// (over UDP) does, through a relay candidate.
func TestRelayOnlyFromAnotherNetwork(t *testing.T) {
	ns := netns.Create(t, "ronly")
	p := pages(t)
	sets, _ := relaySets(t, ns.HostIP)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	a, s := startOnNetns(ctx, t, ns, append(sets, "webrtc.relayOnly=true", "browser.startURL="+p.URL+"/anim", "input.allowLoopbackHosts=127.0.0.1")...)
	bin := tcviewerBin(t)
	watch := func(extra ...string) (viewer.Result, error) {
		return watchFromNetns(ctx, t, ns, bin, a, s, append([]string{"--for", "5s", "--timeout", "20s"}, extra...)...)
	}
	if r, err := watch("--ignore-welcome-ice"); err == nil && r.Frames > 0 {
		t.Errorf("a viewer ignoring the relay got %d frames from a relay-only appliance (pair %s/%s)", r.Frames, r.LocalCandidateType, r.RemoteCandidateType)
	}
	r, err := watch("--relay-only")
	if err != nil {
		t.Fatalf("relayed viewer: %v\n%s", err, a.LogTail(3000))
	}
	t.Logf("relay-only from another network: %d frames, pair %s/%s over %s", r.Frames, r.LocalCandidateType, r.RemoteCandidateType, r.RelayProtocol)
	// The welcome offers the relay over UDP and TCP; either is a relay.
	if r.LocalCandidateType != "relay" || r.Frames < 10 {
		t.Errorf("want a relayed pair with video, got %+v", r)
	}
}

// TestRelayedViewerSurvivesARelayCrash: turnd is killed while a relayed
// viewer watches; the supervisor restarts it, the appliance restarts ICE
// with fresh credentials, and the picture is back within 10 s.
func TestRelayedViewerSurvivesARelayCrash(t *testing.T) {
	p := pages(t)
	sets, _ := relaySets(t, "127.0.0.1")
	a, s := startWithSession(t, p.URL+"/anim", append(sets, "webrtc.relayOnly=true")...)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var arrivals []time.Time
	var killed time.Time
	go func() {
		// Kill the relay once video flows.
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(200 * time.Millisecond):
			}
			mu.Lock()
			n := len(arrivals)
			mu.Unlock()
			if n < 10 {
				continue
			}
			for _, pid := range harness.Descendants(a.Cmd.Process.Pid) {
				if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == "turnd" {
					mu.Lock()
					killed = time.Now()
					mu.Unlock()
					_ = syscall.Kill(pid, syscall.SIGKILL)
					return
				}
			}
		}
	}()
	// AnswerDelay: the viewer's relay candidate reaches the appliance
	// before its answer to the restart offer (about one run in eight
	// without the delay); the appliance must keep it, else the restarted
	// ICE has no relay candidate to pair and never connects.
	r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: 25 * time.Second,
		ICETransportPolicy: "relay", Interfaces: []string{"lo"}, AnswerDelay: 300 * time.Millisecond,
		OnFrame: func(f viewer.Frame) {
			mu.Lock()
			arrivals = append(arrivals, f.Arrived)
			mu.Unlock()
		}})
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, a.LogTail(3000))
	}
	mu.Lock()
	defer mu.Unlock()
	if killed.IsZero() {
		t.Fatal("turnd was never killed")
	}
	var back time.Time
	for _, at := range arrivals {
		if at.After(killed.Add(500 * time.Millisecond)) {
			back = at
			break
		}
	}
	if back.IsZero() {
		t.Fatalf("no frame after the relay was killed (%d frames before; %d restart(s); %d packets, the last at %v; ICE %v)\n%s",
			len(arrivals), r.ICERestarts, r.Packets, r.LastPacket, r.ICEStates, a.LogTail(6000))
	}
	gap := back.Sub(killed)
	t.Logf("relay killed: picture back after %v, %d ICE restart(s), %d frames in all; errors %v", gap.Round(time.Millisecond), r.ICERestarts, len(arrivals), r.Errors)
	if gap > 10*time.Second {
		t.Errorf("the picture came back %v after the relay crash, want within 10 s", gap)
	}
	if r.ICERestarts < 1 {
		t.Errorf("no ICE restart offer after the relay crash")
	}
}
