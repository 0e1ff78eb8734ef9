package media

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/tabcast/tabcast/plugins/capture"
)

// frameSlot is the hand-off between capture and one encode pipeline: a slot
// of one. A newer frame replaces an unread older one (counted as a drop), so
// a slow encoder makes frames stale-drop instead of queueing.
type frameSlot struct {
	mu      sync.Mutex
	f       *capture.Frame
	ready   chan struct{}
	dropped atomic.Uint64
}

func newFrameSlot() *frameSlot { return &frameSlot{ready: make(chan struct{}, 1)} }

func (s *frameSlot) put(f *capture.Frame) {
	s.mu.Lock()
	if s.f != nil {
		s.dropped.Add(1)
	}
	s.f = f
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

func (s *frameSlot) take() *capture.Frame {
	s.mu.Lock()
	f := s.f
	s.f = nil
	s.mu.Unlock()
	return f
}

// rtpWriter packetizes encoded samples onto a shared RTP track.
//
// We packetize ourselves instead of using TrackLocalStaticSample because
// Pion's sample track stamps each sample with the running sum of the
// previous samples' durations: with a variable frame rate (a still page
// sends no frames for seconds) the timestamp after a pause would be wrong by
// the whole pause, and receivers' jitter buffers would misjudge the frame
// timing. Here the RTP timestamp is the send time on a 90 kHz clock.
type rtpWriter struct {
	track      *videoTrack
	packetizer rtp.Packetizer
	start      time.Time
	lastTS     uint32
	wrote      bool
}

// maxRTPPayload keeps packets under common LAN/VPN MTUs after SRTP and
// TURN overhead.
const maxRTPPayload = 1200

// newRTPWriter makes codec's track; streamID names the media stream the
// viewers' browsers see it in.
func newRTPWriter(codec, streamID string) (*rtpWriter, error) {
	var pay rtp.Payloader = &codecs.VP8Payloader{EnablePictureID: true}
	if codec == "h264" {
		pay = &codecs.H264Payloader{}
	}
	inner, err := webrtc.NewTrackLocalStaticRTP(trackCapability(codec), "video", streamID)
	if err != nil {
		return nil, fmt.Errorf("video track for %s: %w", codec, err)
	}
	track := &videoTrack{TrackLocalStaticRTP: inner, playout: map[string]uint8{}}
	return &rtpWriter{
		track:      track,
		packetizer: rtp.NewPacketizer(maxRTPPayload, 0, 0, pay, rtp.NewRandomSequencer(), rtpClock),
		start:      time.Now(),
	}, nil
}

// write sends one encoded sample stamped with now.
func (w *rtpWriter) write(data []byte, now time.Time) error {
	ts := uint32(now.Sub(w.start).Seconds() * rtpClock)
	if w.wrote && ts <= w.lastTS {
		ts = w.lastTS + 1 // two samples in one tick still need distinct times
	}
	w.lastTS, w.wrote = ts, true
	var firstErr error
	playout := w.track.playoutID()
	for _, p := range w.packetizer.Packetize(data, 0) {
		p.Timestamp = ts
		if playout != 0 {
			// min = max = 0 (12 bits each, in 10 ms units): render at once.
			_ = p.Header.SetExtension(playout, []byte{0, 0, 0})
		}
		if err := w.track.WriteRTP(p); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// videoTrack is the shared RTP track of one codec. It remembers which
// header-extension id each viewer negotiated for playout delay, so every
// packet can ask for immediate rendering.
type videoTrack struct {
	*webrtc.TrackLocalStaticRTP

	mu      sync.Mutex
	playout map[string]uint8 // binding id → extension id (0: not negotiated)
	// agreed is the id every bound viewer negotiated, or 0; derived when
	// viewers come and go, so writing a sample only loads it.
	agreed atomic.Uint32
}

func (t *videoTrack) Bind(ctx webrtc.TrackLocalContext) (webrtc.RTPCodecParameters, error) {
	p, err := t.TrackLocalStaticRTP.Bind(ctx)
	if err != nil {
		return p, err
	}
	var id uint8
	for _, e := range ctx.HeaderExtensions() {
		if e.URI == PlayoutDelayURI {
			id = uint8(e.ID)
		}
	}
	t.mu.Lock()
	t.playout[ctx.ID()] = id
	t.agreeLocked()
	t.mu.Unlock()
	return p, nil
}

func (t *videoTrack) Unbind(ctx webrtc.TrackLocalContext) error {
	t.mu.Lock()
	delete(t.playout, ctx.ID())
	t.agreeLocked()
	t.mu.Unlock()
	return t.TrackLocalStaticRTP.Unbind(ctx)
}

// agreeLocked derives the id all bound viewers share. The appliance offers
// and all its peers share one media engine, so the ids agree; a packet
// written to all viewers can carry only one.
func (t *videoTrack) agreeLocked() {
	var id uint8
	for _, x := range t.playout {
		if x == 0 || (id != 0 && x != id) {
			id = 0
			break
		}
		id = x
	}
	t.agreed.Store(uint32(id))
}

// playoutID is the playout-delay extension id to stamp, or 0.
func (t *videoTrack) playoutID() uint8 { return uint8(t.agreed.Load()) }
