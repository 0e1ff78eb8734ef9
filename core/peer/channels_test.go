package peer_test

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/peer/peertest"
)

// viewerChannels is the viewer's side of the input channels: what arrives
// on each, and a gate per channel that stalls its reader (so the SCTP
// receive window fills and the appliance's side buffers).
type viewerChannels struct {
	mu       sync.Mutex
	channels map[string]*webrtc.DataChannel
	got      map[string][][]byte
	open     chan string
	gates    map[string]chan struct{} // a handler waits while its gate is open (non-nil and not closed)
	release  sync.Once
	released chan struct{}
}

func newViewerChannels() *viewerChannels {
	return &viewerChannels{channels: map[string]*webrtc.DataChannel{}, got: map[string][][]byte{},
		open: make(chan string, 8), gates: map[string]chan struct{}{}, released: make(chan struct{})}
}

// stall makes the viewer stop reading label until unstall.
func (v *viewerChannels) stall(label string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.gates[label] = make(chan struct{})
}

func (v *viewerChannels) unstall(label string) {
	v.mu.Lock()
	g := v.gates[label]
	delete(v.gates, label)
	v.mu.Unlock()
	if g != nil {
		close(g)
	}
}

// unstallAll frees every stalled reader (test cleanup: a stalled Pion
// read loop would keep its goroutine).
func (v *viewerChannels) unstallAll() {
	v.mu.Lock()
	gates := v.gates
	v.gates = map[string]chan struct{}{}
	v.mu.Unlock()
	for _, g := range gates {
		close(g)
	}
}

func (v *viewerChannels) setup(r *peertest.Receiver) {
	r.PC.OnDataChannel(func(dc *webrtc.DataChannel) {
		label := dc.Label()
		v.mu.Lock()
		v.channels[label] = dc
		v.mu.Unlock()
		dc.OnOpen(func() { v.open <- label })
		dc.OnMessage(func(m webrtc.DataChannelMessage) {
			v.mu.Lock()
			g := v.gates[label]
			v.mu.Unlock()
			if g != nil {
				<-g
			}
			v.mu.Lock()
			v.got[label] = append(v.got[label], m.Data)
			v.mu.Unlock()
		})
	})
}

func (v *viewerChannels) waitOpen(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for i := 0; i < n; i++ {
		select {
		case <-v.open:
		case <-timeout:
			t.Fatalf("only %d of %d channels opened", i, n)
		}
	}
}

func (v *viewerChannels) dc(label string) *webrtc.DataChannel {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.channels[label]
}

func (v *viewerChannels) received(label string) [][]byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([][]byte(nil), v.got[label]...)
}

// inputRig is an interactive peer connected to a Pion viewer.
type inputRig struct {
	p       *peer.Peer
	recv    *peertest.Receiver
	v       *viewerChannels
	mu      sync.Mutex
	control [][]byte
	pointer [][]byte
	events  chan string // "control:open", "pointer:close", "unhealthy:<reason>", "state:closed"
}

func (r *inputRig) gotControl() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.control...)
}

func (r *inputRig) gotPointer() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.pointer...)
}

func (r *inputRig) waitEvent(t *testing.T, prefix string, d time.Duration) string {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case e := <-r.events:
			if strings.HasPrefix(e, prefix) {
				return e
			}
		case <-timeout:
			t.Fatalf("no %q event within %v", prefix, d)
		}
	}
}

func newInputRig(t *testing.T) *inputRig {
	t.Helper()
	f, err := peer.NewFactory(peer.Config{Interfaces: []string{"lo"}, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	src, err := peertest.Start(clips["vp8"])
	if err != nil {
		t.Fatal(err)
	}
	r := &inputRig{v: newViewerChannels(), events: make(chan string, 1024)}
	event := func(s string) {
		select {
		case r.events <- s:
		default:
		}
	}
	p, recv := connectWith(t, f, peer.Options{
		Track:       src.Track,
		Interactive: true,
		OnControl: func(b []byte) {
			r.mu.Lock()
			r.control = append(r.control, b)
			r.mu.Unlock()
		},
		OnPointer: func(b []byte) {
			r.mu.Lock()
			r.pointer = append(r.pointer, b)
			r.mu.Unlock()
		},
		OnChannel: func(label string, open bool) {
			if open {
				event(label + ":open")
			} else {
				event(label + ":close")
			}
		},
		OnUnhealthy: func(reason string) { event("unhealthy:" + reason) },
	}, r.v.setup, func(s webrtc.PeerConnectionState) { event("state:" + s.String()) })
	r.p, r.recv = p, recv
	t.Cleanup(func() {
		r.v.unstallAll()
		_ = recv.Close()
		_ = p.Close()
		src.Stop()
		_ = f.Close()
	})
	r.v.waitOpen(t, 3)
	return r
}

// TestInputChannels: the three channels exist with the right reliability,
// messages flow both ways in order, and a channel the viewer closes is
// reported.
func TestInputChannels(t *testing.T) {
	r := newInputRig(t)
	if !r.p.Interactive() {
		t.Fatal("not interactive")
	}
	ctl, ptr, st := r.v.dc(peer.ChannelControl), r.v.dc(peer.ChannelPointer), r.v.dc(peer.ChannelState)
	if ctl == nil || ptr == nil || st == nil {
		t.Fatalf("channels %v %v %v", ctl, ptr, st)
	}
	if !ctl.Ordered() || ctl.MaxRetransmits() != nil || ctl.MaxPacketLifeTime() != nil {
		t.Fatalf("control: ordered %v maxRetransmits %v", ctl.Ordered(), ctl.MaxRetransmits())
	}
	if ptr.Ordered() || ptr.MaxRetransmits() == nil || *ptr.MaxRetransmits() != 0 {
		t.Fatalf("pointer: ordered %v maxRetransmits %v", ptr.Ordered(), ptr.MaxRetransmits())
	}
	if !st.Ordered() || st.MaxRetransmits() != nil {
		t.Fatalf("state: ordered %v maxRetransmits %v", st.Ordered(), st.MaxRetransmits())
	}
	if n := r.p.RemoteMaxMessageSize(); n <= 0 {
		t.Fatalf("remote max message size %d", n)
	}
	r.waitEvent(t, "control:open", 5*time.Second)

	// Viewer → appliance, in order on control; a 1.5 MiB message (a big
	// clipboard) arrives whole.
	const n = 200
	for i := 0; i < n; i++ {
		if err := ctl.Send([]byte(fmt.Sprintf("c%d", i))); err != nil {
			t.Fatal(err)
		}
		if err := ptr.Send([]byte(fmt.Sprintf("p%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	big := bytes.Repeat([]byte("x"), 3<<19)
	if err := ctl.Send(big); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "control messages", func() bool { return len(r.gotControl()) == n+1 })
	for i, b := range r.gotControl()[:n] {
		if string(b) != fmt.Sprintf("c%d", i) {
			t.Fatalf("control message %d is %q", i, b)
		}
	}
	if got := r.gotControl()[n]; !bytes.Equal(got, big) {
		t.Fatalf("big message: %d bytes", len(got))
	}
	// Pointer is unreliable, but loopback loses nothing this small.
	waitFor(t, 5*time.Second, "pointer messages", func() bool { return len(r.gotPointer()) > n/2 })

	// Appliance → viewer on control, in order.
	for i := 0; i < n; i++ {
		if err := r.p.SendControl([]byte(fmt.Sprintf("a%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 5*time.Second, "acks", func() bool { return len(r.v.received(peer.ChannelControl)) == n })
	for i, b := range r.v.received(peer.ChannelControl) {
		if string(b) != fmt.Sprintf("a%d", i) {
			t.Fatalf("ack %d is %q", i, b)
		}
	}
	if err := r.p.SendState("page_state", []byte("s1")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "state", func() bool { return len(r.v.received(peer.ChannelState)) == 1 })
	// The state channel is one-way: what the viewer sends is discarded.
	if err := st.Send([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "state in counted", func() bool { return r.p.InputStats().StateIn == 1 })
	s := r.p.InputStats()
	if s.ControlIn != n+1 || s.ControlOut != n || s.StateOut != 1 {
		t.Fatalf("stats %+v", s)
	}

	// The viewer closing its pointer channel is reported.
	if err := ptr.Close(); err != nil {
		t.Fatal(err)
	}
	r.waitEvent(t, "pointer:close", 5*time.Second)
}

// TestPointerBackPressure: while the viewer does not read, pointer sends
// are dropped past 64 KiB buffered and counted; once the channel drains
// below 16 KiB they flow again.
func TestPointerBackPressure(t *testing.T) {
	r := newInputRig(t)
	r.v.stall(peer.ChannelPointer)
	msg := bytes.Repeat([]byte("m"), 1000)
	sent, dropped := 0, 0
	for i := 0; i < 4000 && dropped == 0; i++ {
		if r.p.SendPointer(msg) {
			sent++
		} else {
			dropped++
		}
	}
	if dropped == 0 {
		t.Fatalf("4000 pointer messages and none dropped")
	}
	if sent < peer.PointerHighWater/len(msg) {
		t.Fatalf("dropped after only %d messages", sent)
	}
	// Paused: the next ones are dropped too, even though nothing changed.
	for i := 0; i < 10; i++ {
		if r.p.SendPointer(msg) {
			t.Fatal("sent while over the high-water mark")
		}
		dropped++
	}
	if s := r.p.InputStats(); s.PointerDropped != uint64(dropped) || s.PointerOut != uint64(sent) {
		t.Fatalf("stats %+v, want %d sent %d dropped", s, sent, dropped)
	}
	t.Logf("%d pointer messages sent before the first drop", sent)
	r.v.unstall(peer.ChannelPointer)
	waitFor(t, 10*time.Second, "pointer to resume", func() bool { return r.p.SendPointer(msg) })
}

// TestStateCoalesced: while the state channel is busy, only the newest
// message per key waits; the viewer ends with every key's latest value,
// each key's values in order.
func TestStateCoalesced(t *testing.T) {
	r := newInputRig(t)
	r.v.stall(peer.ChannelState)
	pad := strings.Repeat("s", 4000)
	const n = 600 // 2.4 MB: past the viewer's 1 MiB receive window
	for i := 0; i < n; i++ {
		key := []string{"page_state", "producer"}[i%2]
		if err := r.p.SendState(key, []byte(fmt.Sprintf("%s %d %s", key, i, pad))); err != nil {
			t.Fatal(err)
		}
		if i%50 == 0 {
			time.Sleep(time.Millisecond) // let the writer run
		}
	}
	waitFor(t, 5*time.Second, "coalescing", func() bool { return r.p.InputStats().StateCoalesced > 0 })
	r.v.unstall(peer.ChannelState)
	last := map[string]int{"page_state": -1, "producer": -1}
	waitFor(t, 10*time.Second, "latest state", func() bool {
		got := r.v.received(peer.ChannelState)
		for k := range last {
			last[k] = -1
		}
		for _, b := range got {
			var key string
			var i int
			if _, err := fmt.Sscanf(string(b), "%s %d", &key, &i); err != nil {
				t.Fatalf("state message %q", b[:20])
			}
			if i <= last[key] {
				t.Fatalf("%s %d after %d", key, i, last[key])
			}
			last[key] = i
		}
		return last["page_state"] == n-2 && last["producer"] == n-1
	})
	s := r.p.InputStats()
	t.Logf("state: %d sent, %d coalesced of %d", s.StateOut, s.StateCoalesced, n)
	if s.StateOut+s.StateCoalesced != n || s.StateDropped != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestControlUnhealthy: a viewer that does not read its control channel
// makes the peer unhealthy once over 1 MiB is buffered; the peer closes.
func TestControlUnhealthy(t *testing.T) {
	r := newInputRig(t)
	r.v.stall(peer.ChannelControl)
	msg := bytes.Repeat([]byte("a"), 64<<10)
	var err error
	for i := 0; i < 200; i++ {
		if err = r.p.SendControl(msg); err != nil {
			break
		}
		// One at a time, so the buffered amount (not the queue) trips.
		out := r.p.InputStats().ControlOut
		deadline := time.Now().Add(5 * time.Second)
		for r.p.InputStats().ControlOut == out && time.Now().Before(deadline) {
			select {
			case e := <-r.events:
				if strings.HasPrefix(e, "unhealthy:") {
					if !strings.Contains(e, "buffered") {
						t.Fatalf("unhealthy for %q", e)
					}
					goto tripped
				}
			default:
				time.Sleep(time.Millisecond)
			}
		}
	}
	t.Fatalf("12.8 MB queued to a stalled viewer and no unhealthy report (last err %v)", err)
tripped:
	r.waitEvent(t, "state:closed", 5*time.Second)
	if err := r.p.SendControl(msg); !errors.Is(err, peer.ErrUnhealthy) {
		t.Fatalf("send after unhealthy: %v", err)
	}
}

// TestControlQueueFull: the control queue is bounded; past it the peer is
// unhealthy (it needs no connection: the writer waits for the channel to
// open).
func TestControlQueueFull(t *testing.T) {
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
	var unhealthy atomic.Int32
	p, err := f.NewPeer(peer.Options{Track: src.Track, Interactive: true,
		OnUnhealthy: func(string) { unhealthy.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	offer, err := p.CreateOffer()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(offer, "m=application") || !strings.Contains(offer, "webrtc-datachannel") {
		t.Fatalf("offer has no data channel section:\n%s", offer)
	}
	if !strings.Contains(offer, fmt.Sprintf("a=max-message-size:%d", peer.MaxMessageSize)) {
		t.Fatalf("offer does not advertise max-message-size %d", peer.MaxMessageSize)
	}
	for i := 0; i < peer.ControlQueue; i++ {
		if err := p.SendControl([]byte("x")); err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	if err := p.SendControl([]byte("x")); !errors.Is(err, peer.ErrUnhealthy) {
		t.Fatalf("past the queue: %v", err)
	}
	waitFor(t, 5*time.Second, "unhealthy report", func() bool { return unhealthy.Load() == 1 })
	if err := p.SendState("k", []byte("x")); err != nil {
		t.Fatalf("state on an unopened channel is queued: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.SendControl([]byte("x")); !errors.Is(err, peer.ErrClosed) && !errors.Is(err, peer.ErrUnhealthy) {
		t.Fatalf("after close: %v", err)
	}

	// A view-only peer has no channels.
	vo, err := f.NewPeer(peer.Options{Track: src.Track})
	if err != nil {
		t.Fatal(err)
	}
	defer vo.Close()
	if vo.Interactive() || !errors.Is(vo.SendControl(nil), peer.ErrNotInteractive) || vo.SendPointer(nil) {
		t.Fatal("view-only peer accepts input sends")
	}
	offer, err = vo.CreateOffer()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(offer, "m=application") {
		t.Fatal("view-only offer has a data channel section")
	}
}
