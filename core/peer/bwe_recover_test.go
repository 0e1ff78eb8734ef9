package peer

import (
	"testing"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/gcc"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// sim drives the recovery policy on a synthetic clock: the sender sends at
// sendBps in 10 ms slices, the viewer reports every 100 ms with loss, GCC
// sits at gccBps.
type sim struct {
	t       *testing.T
	r       *recovery
	now     time.Time
	sendBps int
	gccBps  int
	loss    float64
	overuse bool
	silent  bool // no reports
	target  int  // the last target read
}

const testMax = 2_500_000

func newSim(t *testing.T) *sim {
	return &sim{t: t, r: newRecovery(testMax), now: time.Unix(1_000_000, 0), sendBps: 800_000, gccBps: 600_000}
}

// run advances d, checking after every slice that the boost never goes
// beyond max, nor grows beyond three times the send rate.
func (s *sim) run(d time.Duration) {
	s.t.Helper()
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(10 * time.Millisecond)
		s.r.sent(s.now, s.sendBps/8/100)
		if !s.silent && s.now.UnixMilli()%100 == 0 {
			s.r.feedback(s.now, s.loss, s.overuse)
		}
		prev := s.r.boosted
		s.target = s.r.target(s.now, s.gccBps)
		if s.target > testMax {
			s.t.Fatalf("target %d above max", s.target)
		}
		if b := s.r.boosted; b > prev && b > 3*s.r.sendRate(s.now) && b > s.gccBps {
			s.t.Fatalf("boost grew to %d, beyond three times the send rate %d", b, s.r.sendRate(s.now))
		}
		if s.target < s.gccBps {
			s.t.Fatalf("target %d under GCC's %d", s.target, s.gccBps)
		}
	}
}

// boostStartsIn runs until the target rises above GCC's and returns how
// long that took (limit: give up).
func (s *sim) boostStartsIn(limit time.Duration) time.Duration {
	s.t.Helper()
	for d := time.Duration(0); d < limit; d += 10 * time.Millisecond {
		s.run(10 * time.Millisecond)
		if s.target > s.gccBps {
			return d + 10*time.Millisecond
		}
	}
	return limit
}

func TestRecoveryRampsWhenClean(t *testing.T) {
	s := newSim(t)
	s.sendBps, s.gccBps = 500_000, 400_000
	s.run(900 * time.Millisecond)
	if s.target != s.gccBps {
		t.Fatalf("boosted before the path was clean for a second: %d", s.target)
	}
	s.run(200 * time.Millisecond)
	// Growth ×1.5 per 500 ms from the send rate (500k > GCC's 400k).
	if want := 750_000; s.target != want {
		t.Fatalf("first step %d, want %d", s.target, want)
	}
	s.run(400 * time.Millisecond)
	if want := 750_000; s.target != want {
		t.Errorf("target %d within 500 ms of the first step, want %d", s.target, want)
	}
	s.run(100 * time.Millisecond)
	if want := 1_125_000; s.target != want {
		t.Errorf("second step %d, want %d", s.target, want)
	}
	// The third (1.69M) is held at three times the send rate (1.5M) while
	// the encoder sends 500k.
	s.run(3 * time.Second)
	if want := 1_500_000; s.target != want {
		t.Errorf("target %d, want %d (three times the send rate)", s.target, want)
	}
	// The encoder follows: the boost goes on, up to max and no further.
	s.sendBps = 1_000_000
	s.run(2 * time.Second)
	if s.target != testMax {
		t.Errorf("target %d, want max %d", s.target, testMax)
	}
	s.run(5 * time.Second)
	if s.target != testMax {
		t.Errorf("target %d, want max %d", s.target, testMax)
	}
}

func TestRecoveryNoBoostAtMax(t *testing.T) {
	s := newSim(t)
	s.gccBps = testMax
	s.run(3 * time.Second)
	if s.r.boosted != 0 || s.target != testMax {
		t.Errorf("boosted %d, target %d with GCC at max", s.r.boosted, s.target)
	}
}

func TestRecoveryLossEndsBoost(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	if s.target <= s.gccBps {
		t.Fatalf("no boost: %d", s.target)
	}
	// Some loss (2–5 %): the boost holds, it does not grow though the
	// send rate leaves room, and grows again after a clean second.
	held := s.target
	s.loss, s.sendBps = 0.03, 2_000_000
	s.run(2 * time.Second)
	if s.target != held {
		t.Errorf("target %d under 3 %% loss, want it held at %d", s.target, held)
	}
	s.loss = 0
	s.run(1100 * time.Millisecond)
	if s.target <= held {
		t.Errorf("target %d a clean second after 3 %% loss, want above %d", s.target, held)
	}
	s.run(200 * time.Millisecond)
	// Congestion: GCC's target at once.
	s.loss = 0.06
	s.run(100 * time.Millisecond)
	if s.target != s.gccBps {
		t.Errorf("target %d after a 6 %% loss report, want GCC's %d", s.target, s.gccBps)
	}
}

func TestRecoveryOveruseEndsBoost(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	if s.target <= s.gccBps {
		t.Fatalf("no boost: %d", s.target)
	}
	s.overuse = true
	s.run(100 * time.Millisecond)
	if s.target != s.gccBps {
		t.Errorf("target %d on overuse, want GCC's %d", s.target, s.gccBps)
	}
	s.overuse = false
	s.run(900 * time.Millisecond)
	if s.target != s.gccBps {
		t.Errorf("boosted again %d within a second of an overuse", s.target)
	}
}

func TestRecoverySilenceEndsBoost(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	if s.target <= s.gccBps {
		t.Fatalf("no boost: %d", s.target)
	}
	s.silent = true
	s.run(1200 * time.Millisecond)
	if s.target != s.gccBps {
		t.Errorf("target %d after 1.2 s without feedback, want GCC's %d", s.target, s.gccBps)
	}
}

func TestRecoveryGCCCatchesUp(t *testing.T) {
	s := newSim(t)
	s.run(2 * time.Second)
	s.gccBps = s.target + 1
	s.run(10 * time.Millisecond)
	if s.r.boosted != 0 || s.target != s.gccBps {
		t.Errorf("boosted %d, target %d once GCC passed the boost", s.r.boosted, s.target)
	}
}

// congest ends the current boost with a 10 % loss report and clears the
// loss again.
func (s *sim) congest() {
	s.t.Helper()
	if s.target <= s.gccBps {
		s.t.Fatalf("congest: no boost to end")
	}
	s.loss = 0.10
	s.run(100 * time.Millisecond)
	s.loss = 0
	if s.target != s.gccBps {
		s.t.Fatalf("target %d after congestion", s.target)
	}
}

func TestRecoveryBackoff(t *testing.T) {
	s := newSim(t)
	s.run(1500 * time.Millisecond)
	// Each boost that ends in congestion doubles the wait before the next:
	// 2, 4, 8, 16, 30, 30 s.
	for _, want := range []time.Duration{2, 4, 8, 16, 30, 30} {
		s.congest()
		got := s.boostStartsIn(40 * time.Second)
		want *= time.Second
		if got < want || got > want+150*time.Millisecond {
			t.Fatalf("boost again after %v, want %v", got, want)
		}
	}
	// A boost that holds 10 s was right: the next wait is 2 s again.
	s.run(10 * time.Second)
	s.congest()
	if got := s.boostStartsIn(40 * time.Second); got > 2150*time.Millisecond {
		t.Errorf("boost again after %v following a 10 s boost, want 2 s", got)
	}
	// So is one that reaches max.
	s.congest() // waits 2 s, the next one 4 s
	s.boostStartsIn(40 * time.Second)
	s.sendBps = testMax
	s.run(3 * time.Second)
	if s.target != testMax {
		t.Fatalf("target %d, want max", s.target)
	}
	s.congest()
	if got := s.boostStartsIn(40 * time.Second); got > 2150*time.Millisecond {
		t.Errorf("boost again after %v following a boost to max, want 2 s", got)
	}
}

func TestSendRate(t *testing.T) {
	r := newRecovery(testMax)
	now := time.Unix(1_000_000, 0)
	for range 200 { // 2 s at 1 Mbit/s
		now = now.Add(10 * time.Millisecond)
		r.sent(now, 1250)
	}
	if got := r.sendRate(now); got < 990_000 || got > 1_010_000 {
		t.Errorf("send rate %d, want 1 Mbit/s", got)
	}
	if got := r.sendRate(now.Add(1100 * time.Millisecond)); got != 0 {
		t.Errorf("send rate %d a second after the last packet, want 0", got)
	}
}

func TestTWCCLoss(t *testing.T) {
	fb := &rtcp.TransportLayerCC{
		PacketStatusCount: 30,
		PacketChunks: []rtcp.PacketStatusChunk{
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 14},
			&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketNotReceived, RunLength: 2},
			// 14 one-bit symbols; only 14 of the count are left, the rest
			// of the chunk is padding.
			&rtcp.StatusVectorChunk{SymbolSize: rtcp.TypeTCCSymbolSizeOneBit, SymbolList: []uint16{1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}},
			&rtcp.StatusVectorChunk{SymbolSize: rtcp.TypeTCCSymbolSizeTwoBit, SymbolList: []uint16{0, 0, 0}},
		},
	}
	if got, want := twccLoss(fb), 4.0/30; got != want {
		t.Errorf("loss %v, want %v", got, want)
	}
	if got := twccLoss(&rtcp.TransportLayerCC{}); got != 0 {
		t.Errorf("empty report: loss %v", got)
	}
}

// The wrapper counts what goes out and reports GCC's target until the path
// has proven clean.
func TestRecoveringBWE(t *testing.T) {
	inner, err := gcc.NewSendSideBWE(gcc.SendSideBWEInitialBitrate(1_000_000),
		gcc.SendSideBWEMinBitrate(300_000), gcc.SendSideBWEMaxBitrate(testMax), gcc.SendSideBWEPacer(gcc.NewNoOpPacer()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_000_000, 0)
	w := newRecoveringBWE(inner, testMax, func() time.Time { return now })
	defer w.Close()
	var fired []int
	w.OnTargetBitrateChange(func(v int) { fired = append(fired, v) })
	wr := w.AddStream(&interceptor.StreamInfo{SSRC: 1}, interceptor.RTPWriterFunc(
		func(*rtp.Header, []byte, interceptor.Attributes) (int, error) { return 0, nil }))
	seq := uint16(0)
	send := func(d time.Duration) { // at 1 Mbit/s, 12-byte headers
		for range d / (10 * time.Millisecond) {
			now = now.Add(10 * time.Millisecond)
			seq++
			if _, err := wr.Write(&rtp.Header{Version: 2, SSRC: 1, SequenceNumber: seq}, make([]byte, 1238), nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	send(time.Second)
	now = now.Add(10 * time.Millisecond)
	if got := w.GetStats()["sendRate"].(int); got < 990_000 || got > 1_010_000 {
		t.Errorf("send rate %d, want 1 Mbit/s", got)
	}
	if got := w.GetTargetBitrate(); got != 1_000_000 {
		t.Errorf("target %d without feedback, want GCC's", got)
	}
	// Clean feedback for a second: the boost starts and is reported.
	for i := range 12 {
		fb := &rtcp.TransportLayerCC{BaseSequenceNumber: uint16(i), PacketStatusCount: 1,
			PacketChunks: []rtcp.PacketStatusChunk{&rtcp.RunLengthChunk{PacketStatusSymbol: rtcp.TypeTCCPacketReceivedSmallDelta, RunLength: 1}},
			RecvDeltas:   []*rtcp.RecvDelta{{Type: rtcp.TypeTCCPacketReceivedSmallDelta, Delta: 1000}}}
		if err := w.WriteRTCP([]rtcp.Packet{fb}, nil); err != nil {
			t.Fatal(err)
		}
		send(100 * time.Millisecond)
	}
	if got := w.GetTargetBitrate(); got <= 1_000_000 {
		t.Errorf("target %d after a clean second, want a boost", got)
	}
	if len(fired) == 0 || fired[len(fired)-1] != w.GetTargetBitrate() {
		t.Errorf("OnTargetBitrateChange fired %v, want the boosted target last", fired)
	}
}
