package peer

import (
	"fmt"
	"sync"
	"time"

	"github.com/pion/interceptor"
	"github.com/pion/interceptor/pkg/cc"
	"github.com/pion/interceptor/pkg/gcc"
	"github.com/pion/webrtc/v4"
)

// Send-side bandwidth estimation (Google Congestion Control over the
// viewer's transport-wide-cc feedback): every peer gets an estimator, and
// the session's encoders follow the weakest viewer's target.

// MinBitrateKbps is the floor of every estimate: below it a picture is not
// worth sending, and the loss-based controller recovers from here.
const MinBitrateKbps = 300

// bweTable hands each new PeerConnection's estimator (created inside
// NewPeerConnection by the interceptor) to the Peer built around it.
type bweTable struct {
	mu sync.Mutex
	m  map[string]cc.BandwidthEstimator // by PeerConnection ID
}

func (t *bweTable) put(id string, e cc.BandwidthEstimator) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.m) > 1024 { // entries of peer connections that failed to build
		clear(t.m)
	}
	t.m[id] = e
}

func (t *bweTable) take(id string) cc.BandwidthEstimator {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[id]
	delete(t.m, id)
	return e
}

// registerBWE adds the transport-wide sequence numbers to what peers send
// and the congestion controller that reads the viewers' feedback. No
// pacer: the encoder's rate follows the estimate, and pacing would add the
// queueing delay the whole path is built to avoid.
func registerBWE(me *webrtc.MediaEngine, reg *interceptor.Registry, maxKbps int, t *bweTable) error {
	maxKbps = max(maxKbps, MinBitrateKbps)
	f, err := cc.NewInterceptor(func() (cc.BandwidthEstimator, error) {
		e, err := gcc.NewSendSideBWE(
			gcc.SendSideBWEInitialBitrate(maxKbps*1000),
			gcc.SendSideBWEMinBitrate(MinBitrateKbps*1000),
			gcc.SendSideBWEMaxBitrate(maxKbps*1000),
			gcc.SendSideBWEPacer(gcc.NewNoOpPacer()),
		)
		if err != nil {
			return nil, err
		}
		// GCC alone takes 15–20 s back up after congestion (bwe_recover.go).
		return newRecoveringBWE(e, maxKbps*1000, time.Now), nil
	})
	if err != nil {
		return fmt.Errorf("congestion control: %w", err)
	}
	f.OnNewPeerConnection(t.put)
	// Order matters: interceptors added later see a packet first, and the
	// estimator needs the sequence number the TWCC interceptor writes.
	reg.Add(f)
	if err := webrtc.ConfigureTWCCHeaderExtensionSender(me, reg); err != nil {
		return fmt.Errorf("transport-wide cc: %w", err)
	}
	return nil
}

// TargetBitrate is the send-side estimate of what this viewer's path
// carries, in bit/s; 0 when there is none (yet).
func (p *Peer) TargetBitrate() int {
	if p.bwe == nil {
		return 0
	}
	return p.bwe.GetTargetBitrate()
}

// SteadyBitrate is the estimate without the fast-recovery boost (GCC's
// own): what the path has shown it carries. Decisions that cost the
// picture (a smaller size, leaving tab capture) follow it, so that a probe
// of a few hundred milliseconds does not undo them.
func (p *Peer) SteadyBitrate() int {
	if w, ok := p.bwe.(*recoveringBWE); ok {
		return w.inner.GetTargetBitrate()
	}
	return p.TargetBitrate()
}
