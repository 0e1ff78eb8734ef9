// Package media turns a session's captured pictures into the RTP its
// viewers receive: one Pipeline per codec (the encode loop with its pacing,
// rate and resolution steps and idle repeats, or the pass-through of the
// browser's own VP8 under tab capture), the slot of one between capture
// and encoder, the packetizer and the shared video tracks, and the codec
// table every peer offers. A pipeline sees its session only through Source.
package media

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/tabcast/tabcast/core/metrics"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// Video are the encode targets for every pipeline.
type Video struct {
	Codec string // auto, h264 or vp8: which codecs viewers may use
	FPS   int
	// IdleFPS: repeats of the last picture per second while the page is
	// still, for idleRefineFor after its last change (0 = none).
	IdleFPS          int
	BitrateKbps      int
	KeyframeInterval time.Duration
	Hardware         string
}

// Encoder is what a pipeline uses of the encoder plugin's client
// (encoder.Encoder has it).
type Encoder interface {
	Open(ctx context.Context, p encoder.OpenParams) (encoder.Stream, error)
}

// Source is what a pipeline needs from the session it serves.
type Source interface {
	// Video is the current encode targets (a config reload changes them).
	Video() Video
	// Size is the captured picture's size, the encoder's full size.
	Size() (w, h int)
	// LastFrame is the newest captured JPEG, nil before the first: a still
	// page sends none, so repeats and late keyframes re-encode it.
	LastFrame() *capture.Frame
	// Encoder returns the encoder plugin's client and fail, which the
	// pipeline calls with any error of an Open or Encode on it (the
	// session decides whether that means the plugin is broken).
	Encoder(ctx context.Context) (enc Encoder, fail func(error), err error)
	// Passthrough says whether codec's pipeline forwards the browser's own
	// encoded frames (Pass) instead of encoding (Put), and returns a
	// channel closed when that changes.
	Passthrough(codec string) (pass bool, changed <-chan struct{})
	// TabControl sends a keyframe request or a bitrate cap to the
	// browser's encoder (pass-through only).
	TabControl(ctx context.Context, c capture.StreamControl)
	// LowBandwidth says the weakest viewer's link stayed too poor for the
	// browser's encoder (pass-through only): the session should go over to
	// frames this package encodes.
	LowBandwidth()
}

// keyframeMinGap bounds how often viewers' PLI/FIR become keyframes: a burst
// of loss reports from several viewers must not turn the stream into all
// keyframes.
const keyframeMinGap = 500 * time.Millisecond

// Pipeline encodes one session's frames for one codec and writes them to
// the codec's shared track. Its owner starts it on the first viewer of the
// codec and stops it with the last.
type Pipeline struct {
	codec string
	src   Source
	log   *slog.Logger
	slot  *frameSlot
	out   *rtpWriter

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

// NewPipeline makes codec's pipeline and its track, named streamID for the
// viewers' browsers; Start runs it.
func NewPipeline(codec, streamID string, src Source, log *slog.Logger) (*Pipeline, error) {
	w, err := newRTPWriter(codec, streamID)
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	p := &Pipeline{
		codec: codec, src: src, log: log, slot: newFrameSlot(), out: w,
		kfWake: make(chan struct{}, 1), done: make(chan struct{}),
		age: metrics.NewWindow(512), encodeTime: metrics.NewWindow(512),
	}
	p.encoderName.Store("")
	p.fallback.Store("")
	p.size.Store("")
	p.rates = map[string]viewerRate{}
	kbps := int64(src.Video().BitrateKbps)
	p.targetKbps.Store(kbps)
	p.steadyKbps.Store(kbps)
	return p, nil
}

// Codec is the codec the pipeline sends.
func (p *Pipeline) Codec() string { return p.codec }

// Track is the shared track every viewer of the codec sends.
func (p *Pipeline) Track() webrtc.TrackLocal { return p.out.track }

// Start runs the pipeline until ctx ends or Stop.
func (p *Pipeline) Start(parent context.Context) {
	ctx, cancel := context.WithCancel(parent)
	p.cancel = cancel
	go p.run(ctx)
}

// Stop ends the pipeline and waits for its goroutine.
func (p *Pipeline) Stop() {
	p.cancel()
	<-p.done
}

// Put hands the pipeline a newly captured JPEG (encoding pipelines).
func (p *Pipeline) Put(f *capture.Frame) { p.slot.put(f) }

// CaptureRestarted: the capture starts over (a tab switch, a recovery).
// Its first picture goes out as a keyframe, and a passthrough pipeline
// drops the new capture's deltas until the browser's keyframe (an
// encoding pipeline never reads that flag, and one that becomes
// passthrough sets it anyway).
func (p *Pipeline) CaptureRestarted() {
	p.passKF.Store(true)
	p.RequestKeyframe(false)
}

// RequestKeyframe asks for the next frame to be a keyframe. rateLimited
// requests (viewer PLI/FIR) are dropped when one was granted within
// keyframeMinGap; a new viewer's request is never dropped.
func (p *Pipeline) RequestKeyframe(rateLimited bool) {
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

func (p *Pipeline) run(ctx context.Context) {
	defer close(p.done)
	Retry(ctx, p.loop, func(err error) {
		if errors.Is(err, errModeChanged) || errors.Is(err, errRescale) {
			return
		}
		p.restarts.Add(1)
		p.log.Warn("encode pipeline restarting", "codec", p.codec, "err", err)
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
// tabLowKbps for tabLowFor goes over to the screencast (Source.LowBandwidth).
const (
	tabLowKbps = 1200
	tabLowFor  = time.Second
)

// SetViewerRate records one viewer's estimate and its steady part in bit/s
// (0 = the viewer left; steady 0 = the same as bps) and recomputes the
// targets.
func (p *Pipeline) SetViewerRate(viewer string, bps, steadyBps int) {
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

// Retarget recomputes the target after the configured bitrate changed.
func (p *Pipeline) Retarget() {
	p.rateMu.Lock()
	defer p.rateMu.Unlock()
	p.retargetLocked()
}

func (p *Pipeline) retargetLocked() {
	target := p.src.Video().BitrateKbps
	steady := target
	for _, r := range p.rates {
		target, steady = min(target, r.kbps), min(steady, r.steady)
	}
	p.targetKbps.Store(int64(max(target, minTargetKbps)))
	p.steadyKbps.Store(int64(max(steady, minTargetKbps)))
}

// errModeChanged ends a passthrough loop when the session falls back to
// the CDP screencast: the pipeline goes on encoding.
var errModeChanged = errors.New("capture mode changed")

func (p *Pipeline) loop(ctx context.Context) error {
	if pass, changed := p.src.Passthrough(p.codec); pass {
		return p.passLoop(ctx, changed)
	}
	return p.encodeLoop(ctx)
}

// passLoop serves a pipeline that forwards the browser's own VP8 (tab
// capture): frames arrive through Pass; this loop turns keyframe requests
// into requests to the browser's encoder.
func (p *Pipeline) passLoop(ctx context.Context, changed <-chan struct{}) error {
	p.encoderName.Store("browser (tab capture)")
	p.hardware.Store(false)
	p.passKF.Store(true)
	p.RequestKeyframe(false)
	rates := time.NewTicker(time.Second)
	defer rates.Stop()
	step := rateStep{applied: p.src.Video().BitrateKbps, at: time.Now()}
	var lowSince time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			return errModeChanged
		case <-p.kfWake:
			if p.keyframe.Swap(false) {
				p.src.TabControl(ctx, capture.StreamControl{Keyframe: true})
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
				p.src.LowBandwidth()
				continue
			}
			if kbps, ok := step.next(max(target, minTabKbps), now); ok {
				// The browser's encoder takes a cap (RTCRtpSender maxBitrate).
				p.src.TabControl(ctx, capture.StreamControl{MaxBitrateKbps: kbps})
			}
		}
	}
}

// Pass writes one browser-encoded frame to the track. Deltas after a gap
// cannot decode, so they wait for a keyframe (and ask for one).
func (p *Pipeline) Pass(f capture.Frame) {
	if p.passKF.Load() {
		if !f.Keyframe {
			p.slot.dropped.Add(1)
			p.RequestKeyframe(true)
			return
		}
		p.passKF.Store(false)
	}
	p.send(f.Data, f.Keyframe, f.CaptureTime)
}

// send writes one encoded frame to the viewers' track and counts it.
func (p *Pipeline) send(data []byte, keyframe bool, captured time.Time) {
	now := time.Now()
	if err := p.out.write(data, now); err != nil {
		p.log.Debug("rtp write", "codec", p.codec, "err", err)
	}
	p.encoded.Add(1)
	p.bytes.Add(uint64(len(data)))
	if keyframe {
		p.keyframes.Add(1)
	}
	p.age.Add(now.Sub(captured))
}

// Retry runs once until ctx ends, with a backoff of 100 ms doubling to 2 s
// between attempts (reset after a run of 10 s), reporting each end to
// ended. Plugin restarts make capture and encode streams end; this is how
// they come back.
func Retry(ctx context.Context, once func(context.Context) error, ended func(error)) {
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

// Stats is one codec pipeline's state in a session snapshot.
type Stats struct {
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

// Stats is the pipeline's state; viewers is its owner's count of them.
func (p *Pipeline) Stats(viewers int) Stats {
	return Stats{
		Codec: p.codec, Encoder: p.encoderName.Load().(string), Hardware: p.hardware.Load(), EncoderFallback: p.fallback.Load().(string),
		Viewers: viewers, FramesEncoded: p.encoded.Load(), Keyframes: p.keyframes.Load(),
		FramesDropped: p.slot.dropped.Load(), BadFrames: p.badFrames.Load(), Bytes: p.bytes.Load(),
		Restarts: p.restarts.Load(), IdleRepeats: p.repeats.Load(), TargetKbps: int(p.targetKbps.Load()), Size: p.size.Load().(string), FrameAge: p.age.Summary(), EncodeDuration: p.encodeTime.Summary(),
	}
}
