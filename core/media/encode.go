package media

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/encoder"
)

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

// steadyWindow holds the steady estimate's samples of the last
// rescaleAfter (one per steadySampleEvery at most) for the step down. Its
// mean, not every sample, decides: behind a capped link GCC's estimate
// swings around the cap (590–1,560 kbit/s behind 1 Mbit/s measured in
// TestBitrateFollowsTheLink), and when each sample had to stay under the
// step's bound one swing above it restarted the wait, so the picture never
// stepped down within 14 s. A new encoder (after any step) starts a new
// window: no step follows another within rescaleAfter.
type steadyWindow struct {
	start   time.Time // the first sample
	samples []steadySample
}

type steadySample struct {
	at   time.Time
	kbps int
}

const steadySampleEvery = 100 * time.Millisecond

func (w *steadyWindow) add(now time.Time, kbps int) {
	if w.start.IsZero() {
		w.start = now
	}
	if n := len(w.samples); n > 0 && now.Sub(w.samples[n-1].at) < steadySampleEvery {
		return
	}
	// Bounded: older than the window is dropped (at most
	// rescaleAfter/steadySampleEvery+1 samples stay).
	i := 0
	for i < len(w.samples) && now.Sub(w.samples[i].at) > rescaleAfter {
		i++
	}
	w.samples = append(w.samples[:0], w.samples[i:]...)
	w.samples = append(w.samples, steadySample{now, kbps})
}

// mean is the mean of the window's samples; full once the window has
// covered rescaleAfter.
func (w *steadyWindow) mean(now time.Time) (kbps int, full bool) {
	if len(w.samples) == 0 {
		return 0, false
	}
	sum := 0
	for _, s := range w.samples {
		sum += s.kbps
	}
	return sum / len(w.samples), now.Sub(w.start) >= rescaleAfter
}

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

// encodeLoop runs one encoder stream: it opens the encoder at the current
// resolution step, then encodes the slot's frames paced to the frame rate,
// moves the bitrate with the viewers' estimates and repeats a still
// picture. It returns errRescale to be reopened at another size, or an
// error that the retry loop counts as a restart.
func (p *Pipeline) encodeLoop(ctx context.Context) error {
	enc, fail, err := p.src.Encoder(ctx)
	if err != nil {
		return fmt.Errorf("encoder plugin: %w", err)
	}
	v := p.src.Video()
	step := int(p.resStep.Load())
	fullW, fullH := p.src.Size()
	w, h := scaledSize(fullW, fullH, step)
	st, err := enc.Open(ctx, encoder.OpenParams{
		Codec: p.codec, Width: w, Height: h, FPS: v.FPS,
		BitrateKbps: v.BitrateKbps, KeyframeInterval: v.KeyframeInterval, Hardware: v.Hardware,
	})
	if err != nil {
		fail(err)
		return fmt.Errorf("open %s encoder: %w", p.codec, err)
	}
	defer st.Close()
	p.encoderName.Store(st.Opened().Encoder)
	p.hardware.Store(st.Opened().Hardware)
	p.size.Store(fmt.Sprintf("%dx%d", w, h))
	// A fresh encoder starts with a keyframe anyway; ask so that the
	// still-page path below re-sends the last picture to viewers at once.
	p.RequestKeyframe(false)

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
		steady     steadyWindow
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
		// keep the picture large on a poor link), judged on its mean over
		// the last rescaleAfter; larger on the target, whose probes are
		// what finds the room for it, once it has called for it for
		// rescaleUpAfter.
		steady.add(now, int(p.steadyKbps.Load()))
		want, wait := step, time.Duration(0)
		if mean, full := steady.mean(now); full {
			// The target must agree at this moment: once a capped link
			// is lifted the mean trails the rising estimate, and a step
			// down then would undo the step up (each a new encoder).
			want = max(step, min(resolutionStep(mean), resolutionStep(target)))
		}
		if up := resolutionStep(target); up < step {
			want, wait = up, rescaleUpAfter
		}
		if want != stepWant {
			stepWant, stepSince = want, now
		}
		if want != step && now.Sub(stepSince) >= wait {
			p.resStep.Store(int32(want))
			p.log.Info("resolution step", "codec", p.codec, "targetKbps", target, "from", step, "to", want)
			return errRescale
		}
		if kbps, ok := rates.next(target, now); ok {
			// Applied before the next frame (FFmpeg reopens the encoder).
			if err := st.Control(encoder.Control{BitrateKbps: kbps}); err != nil {
				p.log.Debug("encoder bitrate", "kbps", kbps, "err", err)
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
			if f = p.src.LastFrame(); f == nil {
				p.keyframe.Store(true) // nothing captured yet: the first frame will be a keyframe
				continue
			}
		}
		seq++
		res, err := st.Encode(encoder.InputFrame{JPEG: f.Data, CaptureTime: f.CaptureTime, ForceKeyframe: force, Seq: seq})
		if err != nil {
			if errcode.CodeOf(encodeError(err)) == errcode.BadFrame {
				p.badFrames.Add(1)
				if force {
					p.keyframe.Store(true)
				}
				continue
			}
			fail(err)
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
				p.log.Warn("hardware encoder failed: software from here on", "codec", p.codec, "from", o.FallbackFrom, "to", o.Encoder, "err", o.FallbackReason)
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
