package session

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

	// Bandwidth adaptation: each viewer's estimate (kbit/s) and the target
	// the encoder follows, the weakest viewer's within [MinBitrateKbps, the
	// configured bitrate].
	rateMu     sync.Mutex
	rates      map[string]viewerRate
	targetKbps atomic.Int64
	steadyKbps atomic.Int64 // targetKbps without recovery boosts: for steps down
	resStep    atomic.Int32 // resolution step of the next encoder (see resolutionStep)
	size       atomic.Value // string, the encoded picture size

	encoderName atomic.Value // string
	hardware    atomic.Bool
	// fallback: the hardware encoder that failed at run time and why ("" =
	// none); kept across reopens, which the plugin serves in software.
	fallback   atomic.Value // string
	encoded    atomic.Uint64
	keyframes  atomic.Uint64
	badFrames  atomic.Uint64
	bytes      atomic.Uint64
	restarts   atomic.Uint64
	repeats    atomic.Uint64 // idle repeats of a still picture
	age        *metrics.Window
	encodeTime *metrics.Window
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
	p.fallback.Store("")
	p.size.Store("")
	p.rates = map[string]viewerRate{}
	p.targetKbps.Store(int64(s.m.video().BitrateKbps))
	p.steadyKbps.Store(int64(s.m.video().BitrateKbps))
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
		if errors.Is(err, errModeChanged) || errors.Is(err, errRescale) {
			return
		}
		p.restarts.Add(1)
		p.s.log.Warn("encode pipeline restarting", "codec", p.codec, "err", err)
	})
}

// minTargetKbps is the lowest bitrate the encoder is asked for; the
// browser's encoder (tab capture) gets at least minTabKbps: below that it
// sends too little for the estimate to learn that the link recovered.
const (
	minTargetKbps = 300
	minTabKbps    = 300
)

// A tab-capture session whose weakest viewer's estimate stays under
// tabLowKbps for tabLowFor goes over to the screencast (ReasonLowBandwidth).
const (
	tabLowKbps = 1200
	tabLowFor  = time.Second
)

// setViewerRate records one viewer's estimate and its steady part (0 =
// the viewer left; steady 0 = the same as bps) and recomputes the targets.
func (p *pipeline) setViewerRate(viewer string, bps, steadyBps int) {
	p.rateMu.Lock()
	defer p.rateMu.Unlock()
	if steadyBps <= 0 || steadyBps > bps {
		steadyBps = bps
	}
	if bps <= 0 {
		delete(p.rates, viewer)
	} else if _, known := p.rates[viewer]; known || len(p.rates) < 64 {
		p.rates[viewer] = viewerRate{bps / 1000, steadyBps / 1000}
	}
	p.retargetLocked()
}

// viewerRate is one viewer's estimate and its steady part, kbit/s.
type viewerRate struct{ kbps, steady int }

// retarget recomputes the target after the configured bitrate changed.
func (p *pipeline) retarget() {
	p.rateMu.Lock()
	defer p.rateMu.Unlock()
	p.retargetLocked()
}

func (p *pipeline) retargetLocked() {
	target := p.s.m.video().BitrateKbps
	steady := target
	for _, r := range p.rates {
		target, steady = min(target, r.kbps), min(steady, r.steady)
	}
	p.targetKbps.Store(int64(max(target, minTargetKbps)))
	p.steadyKbps.Store(int64(max(steady, minTargetKbps)))
}

// rateStep decides whether to move the encoder from applied to target kbit/s
// now: down quickly (the link is suffering), up slowly (each change reopens
// an FFmpeg encoder and costs a keyframe), never for small moves. Once a
// climb has begun the next raise comes sooner: the estimator only offers
// more after the encoder has really sent more (bwe_recover.go grows to 3×
// the send rate), so each raise is what unlocks the next.
type rateStep struct {
	applied int
	at      time.Time
	rising  bool // the last move was up
}

const (
	rateDownAfter  = time.Second
	rateUpAfter    = 4 * time.Second
	rateClimbAfter = 2 * time.Second
)

func (r *rateStep) next(target int, now time.Time) (int, bool) {
	if r.applied == 0 {
		r.applied, r.at = target, now
		return 0, false // the encoder opened with the configured rate
	}
	diff := target - r.applied
	switch {
	case diff == 0 || abs(diff)*100 < r.applied*15:
		return 0, false
	case diff < 0 && now.Sub(r.at) < rateDownAfter:
		return 0, false
	case diff > 0 && !r.rising && now.Sub(r.at) < rateUpAfter:
		return 0, false
	case diff > 0 && r.rising && now.Sub(r.at) < rateClimbAfter:
		return 0, false
	}
	r.applied, r.at, r.rising = target, now, diff > 0
	return target, true
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// Resolution steps: under a low target the encoder gets a smaller picture
// (720p → 540p → 360p for a 1280×720 viewport), whose frames, keyframes
// above all, fit a poor link; a step is taken when the target has called
// for it for rescaleAfter (rescaleUpAfter back up: the estimator's target
// only rises on a clean path, and the small picture caps what the encoder
// sends, which in turn caps the estimate).
const (
	rescaleAfter   = 5 * time.Second
	rescaleUpAfter = 3 * time.Second
)

// resolutionStep is the step (0 full, 1 three quarters, 2 half) for kbps.
func resolutionStep(kbps int) int {
	switch {
	case kbps >= 1200:
		return 0
	case kbps >= 600:
		return 1
	}
	return 2
}

// scaledSize is w×h at step, rounded to even sizes (what encoders need).
func scaledSize(w, h, step int) (int, int) {
	num, den := []int{1, 3, 1}[step], []int{1, 4, 2}[step]
	return max(w*num/den&^1, 2), max(h*num/den&^1, 2)
}

// errRescale ends an encode loop to reopen the encoder at another size.
var errRescale = errors.New("resolution step")

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
	rates := time.NewTicker(time.Second)
	defer rates.Stop()
	step := rateStep{applied: p.s.m.video().BitrateKbps, at: time.Now()}
	var lowSince time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			return errModeChanged
		case <-p.kfWake:
			if p.keyframe.Swap(false) {
				p.s.tabControl(ctx, capture.StreamControl{Keyframe: true})
			}
		case now := <-rates.C:
			target := int(p.targetKbps.Load())
			// The browser's encoder cannot serve a poor link: it sends no
			// periodic keyframes and its keyframes burst far over a low
			// rate, so a lost one freezes the picture for good. A viewer
			// whose link stays poor moves the session to the screencast,
			// whose encoder keeps small frames and regular keyframes.
			// The steady estimate: a recovery probe must not keep it here.
			if int(p.steadyKbps.Load()) >= tabLowKbps {
				lowSince = time.Time{}
			} else if lowSince.IsZero() {
				lowSince = now
			} else if now.Sub(lowSince) >= tabLowFor {
				p.s.fallBackToCDP(ReasonLowBandwidth, nil)
				continue
			}
			if kbps, ok := step.next(max(target, minTabKbps), now); ok {
				// The browser's encoder takes a cap (RTCRtpSender maxBitrate).
				p.s.tabControl(ctx, capture.StreamControl{MaxBitrateKbps: kbps})
			}
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
	p.send(f.Data, f.Keyframe, f.CaptureTime)
}

// send writes one encoded frame to the viewers' track and counts it.
func (p *pipeline) send(data []byte, keyframe bool, captured time.Time) {
	now := time.Now()
	if err := p.out.write(data, now); err != nil {
		p.s.log.Debug("rtp write", "codec", p.codec, "err", err)
	}
	p.encoded.Add(1)
	p.bytes.Add(uint64(len(data)))
	if keyframe {
		p.keyframes.Add(1)
	}
	p.age.Add(now.Sub(captured))
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
	v := p.s.m.video()
	step := int(p.resStep.Load())
	w, h := scaledSize(p.s.width, p.s.height, step)
	st, err := enc.Open(ctx, encoder.OpenParams{
		Codec: p.codec, Width: w, Height: h, FPS: v.FPS,
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
	p.size.Store(fmt.Sprintf("%dx%d", w, h))
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
		rates      = rateStep{applied: v.BitrateKbps, at: time.Now()}
		stepSince  time.Time // since when the estimates have called for stepWant
		stepWant   = step
		idle       idleRepeats
	)
	idle.init(v.IdleFPS)
	defer idle.stop()
	for {
		repeat := false
		select {
		case <-ctx.Done():
			return nil
		case <-p.slot.ready:
		case <-p.kfWake:
		case <-idle.c():
			repeat = true
		}
		// Only new pictures pace each other: a new one right after an idle
		// repeat goes out at once (input-to-picture latency).
		if wait := interval - time.Since(lastEncode); wait > 0 && !p.keyframe.Load() && !repeat {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(wait):
			}
		}
		now := time.Now()
		if !repeat {
			lastEncode = now
		}
		target := int(p.targetKbps.Load())
		// Smaller only on the steady estimate (a recovery probe must not
		// keep the picture large on a poor link); larger on the target,
		// whose probes are what finds the room for it.
		want, wait := max(step, resolutionStep(int(p.steadyKbps.Load()))), rescaleAfter
		if up := resolutionStep(target); up < step {
			want, wait = up, rescaleUpAfter
		}
		if want != stepWant {
			stepWant, stepSince = want, now
		}
		if want != step && now.Sub(stepSince) >= wait {
			p.resStep.Store(int32(want))
			p.s.log.Info("resolution step", "codec", p.codec, "targetKbps", target, "from", step, "to", want)
			return errRescale
		}
		if kbps, ok := rates.next(target, now); ok {
			// Applied before the next frame (FFmpeg reopens the encoder).
			if err := st.Control(encoder.Control{BitrateKbps: kbps}); err != nil {
				p.s.log.Debug("encoder bitrate", "kbps", kbps, "err", err)
			}
		}
		f := p.slot.take()
		force := p.keyframe.Swap(false)
		if f != nil {
			if repeat { // a new picture came with the repeat's turn
				repeat, lastEncode = false, now
			}
			idle.changed()
		} else {
			if !force && !repeat {
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
		if o := res.Opened; o != nil {
			// The hardware encoder failed at run time: the plugin went over
			// to software on this very frame (a keyframe).
			p.encoderName.Store(o.Encoder)
			p.hardware.Store(o.Hardware)
			if o.FallbackFrom != "" {
				p.fallback.Store(o.FallbackFrom + ": " + o.FallbackReason)
				p.s.log.Warn("hardware encoder failed: software from here on", "codec", p.codec, "from", o.FallbackFrom, "to", o.Encoder, "err", o.FallbackReason)
			}
		}
		for _, smp := range res.Samples {
			p.send(smp.Data, smp.Keyframe, f.CaptureTime)
		}
		if repeat {
			p.repeats.Add(1)
		}
		idle.next()
	}
}

// idleRefineFor is how long after the picture's last change an encode loop
// repeats it (at Video.IdleFPS). The repeats are what lets the encoder
// sharpen a picture it sent blurred under motion (rate control spends the
// now idle bits on the residual); after that they would only cost CPU.
const idleRefineFor = 3 * time.Second

// idleRepeats schedules the repeats of the last picture on a still page.
// It belongs to one encode loop's goroutine.
type idleRepeats struct {
	every time.Duration // 0 = no repeats
	left  int           // repeats still due since the last change
	t     *time.Timer   // one timer, re-armed (not re-made) per encode
	armed bool          // t will fire a repeat
}

func (r *idleRepeats) init(fps int) {
	if fps > 0 {
		r.every = time.Second / time.Duration(fps)
	}
}

// changed: a new picture arrived; the repeat budget starts over.
func (r *idleRepeats) changed() {
	if r.every > 0 {
		r.left = int(idleRefineFor / r.every)
	}
}

// next arms the timer after an encode, while repeats are due. (Since Go
// 1.23 a Reset timer never delivers a value from before the Reset.)
func (r *idleRepeats) next() {
	r.stop()
	if r.every == 0 || r.left <= 0 {
		return
	}
	r.left--
	if r.t == nil {
		r.t = time.NewTimer(r.every)
	} else {
		r.t.Reset(r.every)
	}
	r.armed = true
}

// c is the timer's channel, nil (never ready) when no repeat is due.
func (r *idleRepeats) c() <-chan time.Time {
	if !r.armed {
		return nil
	}
	return r.t.C
}

func (r *idleRepeats) stop() {
	if r.armed {
		r.t.Stop()
		r.armed = false
	}
}

// PipelineStats is one codec pipeline's state in a session snapshot.
type PipelineStats struct {
	Codec    string `json:"codec"`
	Encoder  string `json:"encoder"`
	Hardware bool   `json:"hardware"`
	// EncoderFallback is "encoder: error" when a hardware encoder failed at
	// run time and the pipeline went on in software.
	EncoderFallback string `json:"encoderFallback,omitempty"`
	Viewers         int    `json:"viewers"`
	FramesEncoded   uint64 `json:"framesEncoded"`
	Keyframes       uint64 `json:"keyframes"`
	FramesDropped   uint64 `json:"framesDropped"`
	BadFrames       uint64 `json:"badFrames"`
	Bytes           uint64 `json:"bytes"`
	Restarts        uint64 `json:"restarts"`
	// IdleRepeats counts re-encodes of a still picture (Video.IdleFPS).
	IdleRepeats uint64 `json:"idleRepeats"`
	// TargetKbps is what the encoder is told to send: the weakest viewer's
	// bandwidth estimate within [300, video.bitrateKbps].
	TargetKbps int `json:"targetKbps"`
	// Size is the encoded picture's size (smaller than the viewport on a
	// resolution step).
	Size           string          `json:"size"`
	FrameAge       metrics.Summary `json:"frameAge"`
	EncodeDuration metrics.Summary `json:"encodeDuration"`
}

func (p *pipeline) stats(viewers int) PipelineStats {
	return PipelineStats{
		Codec: p.codec, Encoder: p.encoderName.Load().(string), Hardware: p.hardware.Load(), EncoderFallback: p.fallback.Load().(string),
		Viewers: viewers, FramesEncoded: p.encoded.Load(), Keyframes: p.keyframes.Load(),
		FramesDropped: p.slot.dropped.Load(), BadFrames: p.badFrames.Load(), Bytes: p.bytes.Load(),
		Restarts: p.restarts.Load(), IdleRepeats: p.repeats.Load(), TargetKbps: int(p.targetKbps.Load()), Size: p.size.Load().(string), FrameAge: p.age.Summary(), EncodeDuration: p.encodeTime.Summary(),
	}
}
