package peer

import (
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/interceptor/pkg/gcc"
	"github.com/pion/rtcp"
	"github.com/pion/rtp"
)

// Fast recovery. GCC climbs back slowly after congestion (its loss average
// decays for seconds, then the delay controller grows ≤ 8 %/s and stays
// within 1.5× the received rate), so a viewer whose link recovered waits
// 15–20 s for its picture. recoveringBWE wraps GCC: once the path has been
// clean for a while it raises the target faster, never far above what the
// path has carried, and hands control straight back to GCC on the first
// congestion sign, backing off before it tries again.

const (
	cleanFor     = time.Second            // no loss ≥ lossDirty, no overuse
	lossDirty    = 0.02                   // a report this lossy is not clean
	lossCongest  = 0.05                   // a report this lossy ends a boost
	boostEvery   = 500 * time.Millisecond // one growth step
	boostFactor  = 1.5                    // per step: up to the cap by the next viewer report
	backoffMin   = 2 * time.Second
	backoffMax   = 30 * time.Second
	boostHeld    = 10 * time.Second // a boost this long without congestion was right
	feedbackGone = time.Second      // no feedback this long: the path is unknown
)

// boostOverUse caps the boost's growth at this × the send rate of the last
// second. The session raises its encoder at most every 2 s while it climbs
// (session.rateStep), so each raise is at most this × what the path
// carried: 2× needs three raises from the 300 kbit/s floor to 2.5 Mbit/s,
// 3× two (6.5–7.5 s back to 90 % measured in the e2e test).
const boostOverUse = 3

// sendWindow is the send rate's window, in windowBuckets buckets; the ring
// holds one more, the one being filled.
const (
	sendWindow    = time.Second
	windowBuckets = 10
	rateBuckets   = windowBuckets + 1
	bucketLen     = sendWindow / windowBuckets
)

// recovery is the fast-recovery policy: pure logic, every input carries its
// time, so it is tested with a synthetic clock. Not safe for concurrent use.
type recovery struct {
	maxBps int

	// Bytes sent per bucketLen, a ring indexed by the bucket's number.
	bytes [rateBuckets]int64
	stamp [rateBuckets]int64

	lastReport time.Time // last TWCC report
	lastDirty  time.Time // last report with loss ≥ lossDirty, or overuse
	boosted    int       // bit/s; 0 when not boosting
	boostStart time.Time
	lastStep   time.Time
	proven     bool          // this boost reached max or held boostHeld
	notBefore  time.Time     // earliest start of the next boost
	backoff    time.Duration // the wait after the next boost that ends in congestion
}

func newRecovery(maxBps int) *recovery {
	return &recovery{maxBps: maxBps, backoff: backoffMin}
}

func bucketOf(t time.Time) int64 { return t.UnixNano() / int64(bucketLen) }

// sent counts n bytes that went out at now.
func (r *recovery) sent(now time.Time, n int) {
	b := bucketOf(now)
	i := b % rateBuckets
	if r.stamp[i] != b {
		r.stamp[i], r.bytes[i] = b, 0
	}
	r.bytes[i] += int64(n)
}

// sendRate is bit/s over the last complete second of buckets (the current,
// partial bucket left out so that the rate does not dip at its start).
func (r *recovery) sendRate(now time.Time) int {
	cur := bucketOf(now)
	var sum int64
	for i := range rateBuckets {
		if b := r.stamp[i]; b < cur && b >= cur-windowBuckets {
			sum += r.bytes[i]
		}
	}
	return int(sum * 8 * int64(time.Second) / int64(sendWindow))
}

// feedback takes one TWCC report's loss fraction and whether GCC sees the
// delay overusing the path.
func (r *recovery) feedback(now time.Time, loss float64, overuse bool) {
	// The first report after none (or a silence) starts the clean time.
	if r.lastReport.IsZero() || now.Sub(r.lastReport) > feedbackGone {
		r.lastDirty = now
	}
	r.lastReport = now
	if loss >= lossDirty || overuse {
		r.lastDirty = now
	}
	if (loss >= lossCongest || overuse) && r.boosted > 0 {
		// Congestion: GCC's own target rules at once, and the next try
		// waits, longer after each boost that ended like this.
		r.boosted = 0
		r.notBefore = now.Add(r.backoff)
		r.backoff = min(2*r.backoff, backoffMax)
	}
}

// target advances the boost and returns the target in bit/s given GCC's.
func (r *recovery) target(now time.Time, gccBps int) int {
	if r.boosted > 0 {
		switch {
		case now.Sub(r.lastReport) > feedbackGone:
			r.boosted = 0 // flying blind: GCC's estimate
			return gccBps
		case gccBps >= r.boosted:
			r.boosted = 0 // GCC caught up: the boost did its job
			r.backoff = backoffMin
			return gccBps
		}
		if !r.proven && (r.boosted >= r.maxBps || now.Sub(r.boostStart) >= boostHeld) {
			r.proven = true
			r.backoff = backoffMin
		}
	}
	clean := !r.lastReport.IsZero() && now.Sub(r.lastReport) <= feedbackGone &&
		now.Sub(r.lastDirty) >= cleanFor
	if !clean || gccBps >= r.maxBps {
		return max(gccBps, r.boosted)
	}
	rate := r.sendRate(now)
	// The cap limits growth only: an encoder that sends less for a while
	// (a still picture) is no congestion sign.
	limit := min(r.maxBps, boostOverUse*rate)
	if r.boosted == 0 {
		if now.Before(r.notBefore) {
			return gccBps
		}
		first := min(int(float64(max(gccBps, rate))*boostFactor), limit)
		if first <= gccBps {
			return gccBps // no room above GCC: nothing to boost
		}
		r.boosted, r.boostStart, r.lastStep, r.proven = first, now, now, false
		return first
	}
	if now.Sub(r.lastStep) >= boostEvery {
		r.lastStep = now
		if next := min(int(float64(r.boosted)*boostFactor), limit); next > r.boosted {
			r.boosted = next
		}
	}
	return max(gccBps, r.boosted)
}

// twccLoss is the fraction of the packets a TWCC report covers that it
// reports not received.
func twccLoss(fb *rtcp.TransportLayerCC) float64 {
	total, lost := 0, 0
	left := int(fb.PacketStatusCount)
	for _, c := range fb.PacketChunks {
		if left <= 0 {
			break
		}
		switch c := c.(type) {
		case *rtcp.RunLengthChunk:
			n := min(int(c.RunLength), left)
			total += n
			if c.PacketStatusSymbol == rtcp.TypeTCCPacketNotReceived {
				lost += n
			}
			left -= n
		case *rtcp.StatusVectorChunk:
			for _, s := range c.SymbolList {
				if left <= 0 {
					break
				}
				total++
				if s == rtcp.TypeTCCPacketNotReceived {
					lost++
				}
				left--
			}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(lost) / float64(total)
}

// recoveringBWE is GCC with fast recovery (see recovery).
type recoveringBWE struct {
	inner *gcc.SendSideBWE
	now   func() time.Time

	mu       sync.Mutex
	r        *recovery
	onChange func(int)
	reported int    // the last target passed to onChange
	seen     [2]any // GCC's last delay stats read
}

var _ cc.BandwidthEstimator = (*recoveringBWE)(nil)

func newRecoveringBWE(inner *gcc.SendSideBWE, maxBps int, now func() time.Time) *recoveringBWE {
	w := &recoveringBWE{inner: inner, now: now, r: newRecovery(maxBps)}
	// Set before any feedback reaches the inner estimator.
	inner.OnTargetBitrateChange(func(int) { w.notify() })
	return w
}

// AddStream counts what goes out on the stream: the boost never goes far
// beyond what the path has carried.
func (w *recoveringBWE) AddStream(info *interceptor.StreamInfo, writer interceptor.RTPWriter) interceptor.RTPWriter {
	next := w.inner.AddStream(info, writer)
	return interceptor.RTPWriterFunc(func(h *rtp.Header, payload []byte, a interceptor.Attributes) (int, error) {
		n, err := next.Write(h, payload, a)
		if err == nil {
			size := h.MarshalSize() + len(payload)
			w.mu.Lock()
			w.r.sent(w.now(), size)
			w.mu.Unlock()
		}
		return n, err
	})
}

// WriteRTCP feeds GCC first, so that its overuse verdict on this feedback
// may be read right after.
func (w *recoveringBWE) WriteRTCP(pkts []rtcp.Packet, a interceptor.Attributes) error {
	err := w.inner.WriteRTCP(pkts, a)
	st := w.inner.GetStats()
	w.mu.Lock()
	// GCC's stats keep the last verdict written, which is stale while its
	// rate controller holds: an overuse counts once, when it is new. (Before
	// the first verdict the zero stats read "overuse" in state "increase".)
	seen := [2]any{st["delayMeasurement"], st["delayEstimate"]}
	overuse := st["usage"] == "overuse" && st["state"] == "decrease" && seen != w.seen
	now := w.now()
	for _, p := range pkts {
		if fb, ok := p.(*rtcp.TransportLayerCC); ok {
			w.r.feedback(now, twccLoss(fb), overuse)
			w.seen, overuse = seen, false // kept for a batch without TWCC
		}
	}
	w.mu.Unlock()
	w.notify() // advances the boost
	return err
}

// GetTargetBitrate is GCC's target or, while the path is clean, the boost
// when that is higher.
func (w *recoveringBWE) GetTargetBitrate() int {
	gccBps := w.inner.GetTargetBitrate()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.r.target(w.now(), gccBps)
}

// OnTargetBitrateChange reports the combined target (GCC's or the boost).
// The callback runs on the caller's goroutine: GCC's own (it starts one per
// change) or the RTCP reader's when the boost moves.
func (w *recoveringBWE) OnTargetBitrateChange(f func(int)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.onChange = f
}

func (w *recoveringBWE) notify() {
	gccBps := w.inner.GetTargetBitrate()
	w.mu.Lock()
	f, v := w.onChange, w.r.target(w.now(), gccBps)
	changed := f != nil && v != w.reported
	if changed {
		w.reported = v
	}
	w.mu.Unlock()
	if changed {
		f(v)
	}
}

// GetStats is GCC's with the boost and the send rate it is measured against.
func (w *recoveringBWE) GetStats() map[string]any {
	s := w.inner.GetStats()
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	s["boostedTargetBitrate"] = w.r.boosted
	s["sendRate"] = w.r.sendRate(now)
	s["boostBackoff"] = w.r.backoff.Seconds()
	return s
}

func (w *recoveringBWE) Close() error { return w.inner.Close() }
