package session

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tabcast/tabcast/core/metrics"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// keyframeMinGap bounds how often viewers' PLI/FIR become keyframes: a burst
// of loss reports from several viewers must not turn the stream into all
// keyframes.
const keyframeMinGap = 500 * time.Millisecond

// pipeline encodes one session's frames for one codec and writes them to
// the codec's shared track. It is owned by its Session, started on the first
// viewer of the codec and stopped with the last.
type pipeline struct {
	codec string
	s     *Session
	slot  *frameSlot
	out   *rtpWriter

	refs int // guarded by Session.mu

	keyframe    atomic.Bool
	kfWake      chan struct{}
	lastKFNanos atomic.Int64
	// passKF: a passthrough pipeline drops the browser's frames until a
	// keyframe (at start, and after a frame it could not write).
	passKF atomic.Bool

	cancel context.CancelFunc
	done   chan struct{}

	encoderName atomic.Value // string
	hardware    atomic.Bool
	encoded     atomic.Uint64
	keyframes   atomic.Uint64
	badFrames   atomic.Uint64
	bytes       atomic.Uint64
	restarts    atomic.Uint64
	age         *metrics.Window
	encodeTime  *metrics.Window
}

func newPipeline(s *Session, codec string) (*pipeline, error) {
	w, err := newRTPWriter(codec, s.id)
	if err != nil {
		return nil, fmt.Errorf("video track for %s: %w", codec, err)
	}
	p := &pipeline{
		codec: codec, s: s, slot: newFrameSlot(), out: w,
		kfWake: make(chan struct{}, 1), done: make(chan struct{}),
		age: metrics.NewWindow(512), encodeTime: metrics.NewWindow(512),
	}
	p.encoderName.Store("")
	return p, nil
}

func (p *pipeline) start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	p.cancel = cancel
	go p.run(ctx)
}

// stop ends the pipeline and waits for its goroutine.
func (p *pipeline) stop() {
	p.cancel()
	<-p.done
}

// requestKeyframe asks for the next frame to be a keyframe. rateLimited
// requests (viewer PLI/FIR) are dropped when one was granted within
// keyframeMinGap; a new viewer's request is never dropped.
func (p *pipeline) requestKeyframe(rateLimited bool) {
	// Unlimited requests (a new viewer, a fresh encoder) do not count
	// against the PLI budget: the viewer's transport may not be up yet when
	// they are served, and its own request once connected must get through.
	if rateLimited {
		now := time.Now().UnixNano()
		last := p.lastKFNanos.Load()
		if now-last < int64(keyframeMinGap) || !p.lastKFNanos.CompareAndSwap(last, now) {
			return
		}
	}
	p.keyframe.Store(true)
	select {
	case p.kfWake <- struct{}{}:
	default:
	}
}

func (p *pipeline) run(ctx context.Context) {
	defer close(p.done)
	retry(ctx, p.loop, func(err error) {
		if errors.Is(err, errModeChanged) {
			return
		}
		p.restarts.Add(1)
		p.s.log.Warn("encode pipeline restarting", "codec", p.codec, "err", err)
	})
}

// errModeChanged ends a passthrough loop when the session falls back to
// the CDP screencast: the pipeline goes on encoding.
var errModeChanged = errors.New("capture mode changed")

func (p *pipeline) loop(ctx context.Context) error {
	p.s.mu.Lock()
	pass, changed := p.s.passthroughLocked(p.codec), p.s.capModeCh
	p.s.mu.Unlock()
	if pass {
		return p.passLoop(ctx, changed)
	}
	return p.encodeLoop(ctx)
}

// passLoop serves a pipeline that forwards the browser's own VP8 (tab
// capture): frames arrive through pass; this loop turns keyframe requests
// into requests to the browser's encoder.
func (p *pipeline) passLoop(ctx context.Context, changed <-chan struct{}) error {
	p.encoderName.Store("browser (tab capture)")
	p.hardware.Store(false)
	p.passKF.Store(true)
	p.requestKeyframe(false)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			return errModeChanged
		case <-p.kfWake:
		}
		if p.keyframe.Swap(false) {
			p.s.tabKeyframe(ctx)
		}
	}
}

// pass writes one browser-encoded frame to the track. Deltas after a gap
// cannot decode, so they wait for a keyframe (and ask for one).
func (p *pipeline) pass(f capture.Frame) {
	if p.passKF.Load() {
		if !f.Keyframe {
			p.slot.dropped.Add(1)
			p.requestKeyframe(true)
			return
		}
		p.passKF.Store(false)
	}
	now := time.Now()
	if err := p.out.write(f.Data, now); err != nil {
		p.s.log.Debug("rtp write", "codec", p.codec, "err", err)
	}
	p.encoded.Add(1)
	p.bytes.Add(uint64(len(f.Data)))
	if f.Keyframe {
		p.keyframes.Add(1)
	}
	p.age.Add(now.Sub(f.CaptureTime))
}

// retry runs once until ctx ends, with a backoff of 100 ms doubling to 2 s
// between attempts (reset after a run of 10 s), reporting each end to
// ended. Plugin restarts make capture and encode streams end; this is how
// they come back.
func retry(ctx context.Context, once func(context.Context) error, ended func(error)) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		started := time.Now()
		err := once(ctx)
		if ctx.Err() != nil {
			return
		}
		ended(err)
		if time.Since(started) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 2*time.Second)
	}
}

// brokenPlugin says whether err means the plugin process is gone or hung,
// as opposed to the plugin refusing one request.
func brokenPlugin(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Aborted:
		return true
	}
	return false
}

func (p *pipeline) encodeLoop(ctx context.Context) error {
	cl, gen, err := p.s.m.encoder.Client(ctx)
	if err != nil {
		return fmt.Errorf("encoder plugin: %w", err)
	}
	enc, ok := cl.(encoder.Encoder)
	if !ok {
		return fmt.Errorf("encoder plugin: client is %T, not an encoder", cl)
	}
	v := p.s.m.cfg.Video
	st, err := enc.Open(ctx, encoder.OpenParams{
		Codec: p.codec, Width: p.s.width, Height: p.s.height, FPS: v.FPS,
		BitrateKbps: v.BitrateKbps, KeyframeInterval: v.KeyframeInterval, Hardware: v.Hardware,
	})
	if err != nil {
		if brokenPlugin(err) {
			p.s.m.encoder.ReportFailure(gen, err)
		}
		return fmt.Errorf("open %s encoder: %w", p.codec, err)
	}
	defer st.Close()
	p.encoderName.Store(st.Opened().Encoder)
	p.hardware.Store(st.Opened().Hardware)
	// A fresh encoder starts with a keyframe anyway; ask so that the
	// still-page path below re-sends the last picture to viewers at once.
	p.requestKeyframe(false)

	// Pace to the configured frame rate: when Chromium paints faster than
	// that, wait out the frame interval and encode the newest frame then,
	// dropping the ones in between (a still page sends nothing and costs
	// nothing).
	interval := time.Second / time.Duration(max(v.FPS, 1))
	var (
		seq        uint64
		lastEncode time.Time
	)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-p.slot.ready:
		case <-p.kfWake:
		}
		if wait := interval - time.Since(lastEncode); wait > 0 && !p.keyframe.Load() {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		lastEncode = time.Now()
		f := p.slot.take()
		force := p.keyframe.Swap(false)
		if f == nil {
			if !force {
				continue
			}
			// A still page sends no frames: re-encode the last picture as
			// a keyframe so that a viewer who joined late sees it.
			if f = p.s.lastFrame.Load(); f == nil {
				p.keyframe.Store(true) // nothing captured yet: the first frame will be a keyframe
				continue
			}
		}
		seq++
		res, err := st.Encode(encoder.InputFrame{JPEG: f.Data, CaptureTime: f.CaptureTime, ForceKeyframe: force, Seq: seq})
		if err != nil {
			var ee *encoder.Error
			if errors.As(err, &ee) && ee.Code == "bad_frame" {
				p.badFrames.Add(1)
				if force {
					p.keyframe.Store(true)
				}
				continue
			}
			if brokenPlugin(err) {
				p.s.m.encoder.ReportFailure(gen, err)
			}
			return fmt.Errorf("encode: %w", err)
		}
		p.encodeTime.Add(res.EncodeTime)
		for _, smp := range res.Samples {
			now := time.Now()
			if err := p.out.write(smp.Data, now); err != nil {
				p.s.log.Debug("rtp write", "codec", p.codec, "err", err)
			}
			p.encoded.Add(1)
			p.bytes.Add(uint64(len(smp.Data)))
			if smp.Keyframe {
				p.keyframes.Add(1)
			}
			p.age.Add(now.Sub(f.CaptureTime))
		}
	}
}

// PipelineStats is one codec pipeline's state in a session snapshot.
type PipelineStats struct {
	Codec          string          `json:"codec"`
	Encoder        string          `json:"encoder"`
	Hardware       bool            `json:"hardware"`
	Viewers        int             `json:"viewers"`
	FramesEncoded  uint64          `json:"framesEncoded"`
	Keyframes      uint64          `json:"keyframes"`
	FramesDropped  uint64          `json:"framesDropped"`
	BadFrames      uint64          `json:"badFrames"`
	Bytes          uint64          `json:"bytes"`
	Restarts       uint64          `json:"restarts"`
	FrameAge       metrics.Summary `json:"frameAge"`
	EncodeDuration metrics.Summary `json:"encodeDuration"`
}

func (p *pipeline) stats(viewers int) PipelineStats {
	return PipelineStats{
		Codec: p.codec, Encoder: p.encoderName.Load().(string), Hardware: p.hardware.Load(),
		Viewers: viewers, FramesEncoded: p.encoded.Load(), Keyframes: p.keyframes.Load(),
		FramesDropped: p.slot.dropped.Load(), BadFrames: p.badFrames.Load(), Bytes: p.bytes.Load(),
		Restarts: p.restarts.Load(), FrameAge: p.age.Summary(), EncodeDuration: p.encodeTime.Summary(),
	}
}
