package peer_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/peer/peertest"
)

var clips = map[string]*peertest.Clip{}

func TestMain(m *testing.M) {
	var err error
	if clips, err = peertest.EncodeAll(2, "vp8", "h264"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m)
}

// testLogger logs into the test until it ends (Pion goroutines may still
// log while they wind down).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// connect runs the offer/answer and trickle between a peer and a receiver
// directly (no signaling) and returns both.
func connect(t *testing.T, f *peer.Factory, src *peertest.Source, keyframes *atomic.Int32,
) (*peer.Peer, *peertest.Receiver) {
	t.Helper()
	return connectWith(t, f, peer.Options{Track: src.Track, OnKeyframeRequest: func() { keyframes.Add(1) }}, nil, nil)
}

// connectWith is connect with the peer's options (its OnICECandidate is
// replaced; OnStateChange also gets every state), and a hook to set the
// receiver up before it answers.
func connectWith(t *testing.T, f *peer.Factory, o peer.Options, setup func(*peertest.Receiver),
	onState func(webrtc.PeerConnectionState),
) (*peer.Peer, *peertest.Receiver) {
	t.Helper()
	var (
		mu      sync.Mutex
		p       *peer.Peer
		toPeer  []webrtc.ICECandidateInit
		toRecv  []webrtc.ICECandidateInit
		ready   bool
		recv    *peertest.Receiver
		stateCh = make(chan webrtc.PeerConnectionState, 16)
	)
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, func(c webrtc.ICECandidateInit) {
		mu.Lock()
		defer mu.Unlock()
		if ready {
			if err := p.AddCandidate(c); err != nil {
				t.Errorf("peer add candidate: %v", err)
			}
			return
		}
		toPeer = append(toPeer, c)
	})
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(recv)
	}
	o.OnICECandidate = func(c webrtc.ICECandidateInit) {
		mu.Lock()
		defer mu.Unlock()
		toRecv = append(toRecv, c)
	}
	o.OnStateChange = func(s webrtc.PeerConnectionState) {
		if onState != nil {
			onState(s)
		}
		select {
		case stateCh <- s:
		default:
		}
	}
	p, err = f.NewPeer(o)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	offer, err := p.CreateOffer()
	mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	answer, err := recv.Answer(offer)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetAnswer(answer); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	ready = true
	for _, c := range toPeer {
		if err := p.AddCandidate(c); err != nil {
			t.Fatalf("add candidate: %v", err)
		}
	}
	mu.Unlock()
	// Local candidates of the peer go to the receiver once it has the offer
	// (it does: Answer set it); keep forwarding new ones for a moment.
	deadline := time.Now().Add(5 * time.Second)
	sent := 0
	for time.Now().Before(deadline) {
		mu.Lock()
		pending := toRecv[sent:]
		sent = len(toRecv)
		mu.Unlock()
		for _, c := range pending {
			if err := recv.PC.AddICECandidate(c); err != nil {
				t.Fatalf("receiver add candidate: %v", err)
			}
		}
		if recv.PC.ConnectionState() == webrtc.PeerConnectionStateConnected {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	timeout := time.After(10 * time.Second)
	for connected := false; !connected; {
		select {
		case s := <-stateCh:
			connected = s == webrtc.PeerConnectionStateConnected
			if s == webrtc.PeerConnectionStateFailed {
				t.Fatal("peer failed")
			}
		case <-timeout:
			t.Fatal("peer did not connect")
		}
	}
	return p, recv
}

func TestPeerSendsVideoAndForwardsPLI(t *testing.T) {
	for _, codec := range []string{"vp8", "h264"} {
		t.Run(codec, func(t *testing.T) {
			f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Logger: testLogger(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			src, err := peertest.Start(clips[codec])
			if err != nil {
				t.Fatal(err)
			}
			defer src.Stop()
			var keyframes atomic.Int32
			p, recv := connect(t, f, src, &keyframes)
			defer recv.Close()
			defer p.Close()

			if err := recv.WaitTrack(5 * time.Second); err != nil {
				t.Fatal(err)
			}
			n, err := recv.WaitFrames(30, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			mime, w, h := recv.Info()
			_, keys := recv.Counts()
			t.Logf("%s: %d frames, %d keyframes, %dx%d", mime, n, keys, w, h)
			if !strings.EqualFold(mime, "video/"+codec) {
				t.Fatalf("mime %q, want video/%s", mime, codec)
			}
			if codec == "vp8" && (w != peertest.Width || h != peertest.Height) {
				t.Fatalf("keyframe size %dx%d", w, h)
			}
			before := keyframes.Load()
			if err := recv.SendPLI(); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 3*time.Second, "keyframe request", func() bool { return keyframes.Load() > before })
			st := p.Stats()
			if st.State != webrtc.PeerConnectionStateConnected || st.PacketsSent == 0 || st.BytesSent == 0 || st.PLIs == 0 {
				t.Fatalf("stats %+v", st)
			}
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			if err := p.Close(); err != nil { // idempotent
				t.Fatal(err)
			}
		})
	}
}

func TestPeerUDPMux(t *testing.T) {
	port := freeUDPPort(t)
	f, err := peer.NewFactory(peer.Config{UDPPort: port, Interfaces: []string{"lo"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	var keyframes atomic.Int32
	var peers []*peer.Peer
	// Two viewers share the one UDP port.
	for i := 0; i < 2; i++ {
		p, recv := connect(t, f, src, &keyframes)
		defer recv.Close()
		defer p.Close()
		peers = append(peers, p)
		if _, err := recv.WaitFrames(10, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		local, err := recv.PC.SCTP().Transport().ICETransport().GetSelectedCandidatePair()
		if err != nil || local == nil {
			t.Fatalf("selected pair: %v", err)
		}
		if int(local.Remote.Port) != port {
			t.Fatalf("peer %d uses port %d, want the mux port %d", i, local.Remote.Port, port)
		}
	}
}

func freeUDPPort(t *testing.T) int {
	t.Helper()
	c, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := c.LocalAddr().(*net.UDPAddr).Port
	_ = c.Close()
	return port
}

func TestPeerInputLimits(t *testing.T) {
	f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	p, err := f.NewPeer(peer.Options{Track: src.Track})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if len(p.ID()) < 16 {
		t.Fatalf("id %q too short", p.ID())
	}
	if err := p.SetAnswer("v=0"); !errors.Is(err, peer.ErrBadState) && !errors.Is(err, peer.ErrBadSDP) {
		t.Fatalf("answer before offer: %v", err)
	}
	if err := p.AddCandidate(webrtc.ICECandidateInit{Candidate: "candidate:1 1 udp 1 127.0.0.1 9 typ host"}); !errors.Is(err, peer.ErrBadState) {
		t.Fatalf("candidate before answer: %v", err)
	}
	offer, err := p.CreateOffer()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(offer, "VP8/90000") || strings.Contains(offer, "H264") {
		t.Fatalf("offer should carry VP8 only:\n%s", offer)
	}
	if !strings.Contains(offer, "a=sendonly") {
		t.Fatal("offer is not sendonly")
	}
	if err := p.SetAnswer(strings.Repeat("a", peer.MaxSDPSize+1)); !errors.Is(err, peer.ErrSDPTooLarge) {
		t.Fatalf("large sdp: %v", err)
	}
	if err := p.SetAnswer("this is not sdp"); !errors.Is(err, peer.ErrBadSDP) {
		t.Fatalf("garbage sdp: %v", err)
	}
	recv, err := peertest.NewReceiver(media.Codecs, []string{"lo"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer recv.Close()
	answer, err := recv.Answer(offer)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetAnswer(answer); err != nil {
		t.Fatal(err)
	}
	if err := p.SetAnswer(answer); !errors.Is(err, peer.ErrBadState) {
		t.Fatalf("second answer: %v", err)
	}
	if err := p.AddCandidate(webrtc.ICECandidateInit{Candidate: "candidate:garbage"}); !errors.Is(err, peer.ErrBadCandidate) {
		t.Fatalf("garbage candidate: %v", err)
	}
	for i := 1; i < peer.MaxCandidates; i++ {
		c := fmt.Sprintf("candidate:%d 1 udp 2130706431 127.0.0.1 %d typ host", i, 40000+i)
		if err := p.AddCandidate(webrtc.ICECandidateInit{Candidate: c}); err != nil {
			t.Fatalf("candidate %d: %v", i, err)
		}
	}
	c := "candidate:99 1 udp 2130706431 127.0.0.1 49999 typ host"
	if err := p.AddCandidate(webrtc.ICECandidateInit{Candidate: c}); !errors.Is(err, peer.ErrTooManyCandidates) {
		t.Fatalf("candidate 51: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := p.CreateOffer(); !errors.Is(err, peer.ErrClosed) {
		t.Fatalf("offer after close: %v", err)
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
