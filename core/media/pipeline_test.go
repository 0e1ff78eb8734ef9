package media

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// video is a test's encode targets: 10 fps (a 100 ms interval), no idle
// repeats unless a test sets them.
var video = Video{FPS: 10, BitrateKbps: 2500, KeyframeInterval: 2 * time.Second}

func start(t *testing.T, codec string, src *fakeSource) *Pipeline {
	t.Helper()
	p, err := NewPipeline(codec, "tabcast-test", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Start(context.Background())
	t.Cleanup(p.Stop)
	return p
}

// recv is the next value of ch within d.
func recv[T any](t *testing.T, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		var zero T
		t.Fatalf("no %s within %v", what, d)
		return zero
	}
}

// eventually waits up to a second for cond: counters move just after the
// fake encoder saw the frame.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s", what)
		}
	}
}

// quiet fails when ch yields anything within d.
func quiet[T any](t *testing.T, ch <-chan T, d time.Duration, what string) {
	t.Helper()
	select {
	case v := <-ch:
		t.Fatalf("unexpected %s: %+v", what, v)
	case <-time.After(d):
	}
}

// TestPacing: frames faster than the frame rate wait out the interval and
// only the newest is encoded; the ones in between count as dropped.
func TestPacing(t *testing.T) {
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "vp8", src)
	if o := recv(t, enc.opens, time.Second, "open"); o.Width != 1280 || o.Height != 720 || o.FPS != 10 || o.Codec != "vp8" {
		t.Fatalf("opened with %+v", o)
	}
	src.capture(p, "a")
	first := recv(t, enc.frames, time.Second, "first frame")
	if string(first.in.JPEG) != "a" || !first.in.ForceKeyframe {
		t.Fatalf("first frame %q keyframe %v, want a as a keyframe", first.in.JPEG, first.in.ForceKeyframe)
	}
	for _, d := range []string{"b", "c", "d"} {
		src.capture(p, d)
	}
	next := recv(t, enc.frames, time.Second, "paced frame")
	if string(next.in.JPEG) != "d" || next.in.ForceKeyframe {
		t.Fatalf("paced frame %q keyframe %v, want d, a delta", next.in.JPEG, next.in.ForceKeyframe)
	}
	if gap := next.at.Sub(first.at); gap < 90*time.Millisecond {
		t.Errorf("second frame %v after the first, want the 100 ms interval", gap)
	}
	quiet(t, enc.frames, 250*time.Millisecond, "frame") // the counters are in by now too
	st := p.Stats(1)
	if st.FramesEncoded != 2 || st.FramesDropped != 2 || st.Keyframes != 1 || st.Encoder != "fake" || st.Size != "1280x720" {
		t.Errorf("stats %+v, want 2 encoded, 2 dropped, 1 keyframe from fake at 1280x720", st)
	}
}

// TestIdleRepeats: a still picture is re-encoded at IdleFPS, as deltas;
// without IdleFPS nothing follows the last frame.
func TestIdleRepeats(t *testing.T) {
	t.Run("on", func(t *testing.T) {
		enc := newRecorder()
		v := video
		v.IdleFPS = 20
		src := newSource(v, enc)
		p := start(t, "h264", src)
		recv(t, enc.opens, time.Second, "open")
		src.capture(p, "still")
		prev := recv(t, enc.frames, time.Second, "frame")
		for i := range 4 {
			r := recv(t, enc.frames, time.Second, "repeat")
			if string(r.in.JPEG) != "still" || r.in.ForceKeyframe {
				t.Fatalf("repeat %d: %q keyframe %v", i, r.in.JPEG, r.in.ForceKeyframe)
			}
			if gap := r.at.Sub(prev.at); gap < 40*time.Millisecond {
				t.Errorf("repeat %d %v after the previous encode, want 50 ms", i, gap)
			}
			prev = r
		}
		// The 4th repeat's count may lag its encode: the first 3 are in.
		if n := p.Stats(1).IdleRepeats; n < 3 {
			t.Errorf("IdleRepeats %d, want at least 3", n)
		}
	})
	t.Run("off", func(t *testing.T) {
		enc := newRecorder()
		src := newSource(video, enc)
		p := start(t, "h264", src)
		recv(t, enc.opens, time.Second, "open")
		src.capture(p, "still")
		recv(t, enc.frames, time.Second, "frame")
		quiet(t, enc.frames, 300*time.Millisecond, "repeat")
	})
}

// TestIdleRepeatBudget: repeats stop idleRefineFor after the last change
// and start over with a new picture.
func TestIdleRepeatBudget(t *testing.T) {
	var r idleRepeats
	r.init(20)
	defer r.stop()
	r.next()
	if r.c() != nil {
		t.Fatal("a repeat is due before any picture")
	}
	r.changed()
	for i := range int(idleRefineFor / (50 * time.Millisecond)) {
		r.next()
		if r.c() == nil {
			t.Fatalf("repeat %d not armed", i)
		}
	}
	r.next()
	if r.c() != nil {
		t.Fatal("a repeat is due after the budget")
	}
	r.changed()
	r.next()
	if r.c() == nil {
		t.Fatal("a new picture did not restart the repeats")
	}
}

// TestKeyframeOnRequest: a viewer's request re-encodes the still page's
// last picture as a keyframe at once; PLIs within keyframeMinGap are
// dropped, a new viewer's request is not.
func TestKeyframeOnRequest(t *testing.T) {
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "vp8", src)
	recv(t, enc.opens, time.Second, "open")
	src.capture(p, "page")
	recv(t, enc.frames, time.Second, "frame")
	time.Sleep(150 * time.Millisecond) // past the frame interval: nothing paces the request

	asked := time.Now()
	p.RequestKeyframe(true)
	kf := recv(t, enc.frames, time.Second, "keyframe")
	if string(kf.in.JPEG) != "page" || !kf.in.ForceKeyframe {
		t.Fatalf("got %q keyframe %v, want the last picture as a keyframe", kf.in.JPEG, kf.in.ForceKeyframe)
	}
	if d := kf.at.Sub(asked); d > 50*time.Millisecond {
		t.Errorf("keyframe %v after the request", d)
	}
	p.RequestKeyframe(true) // a second PLI right after: rate-limited
	quiet(t, enc.frames, 200*time.Millisecond, "frame for a rate-limited request")
	p.RequestKeyframe(false) // a new viewer
	if kf := recv(t, enc.frames, time.Second, "keyframe"); !kf.in.ForceKeyframe {
		t.Fatal("a new viewer's request did not make a keyframe")
	}
	eventually(t, func() bool { return p.Stats(1).Keyframes == 3 }, "3 keyframes counted")
}

// TestFirstFrameIsKeyframe: a request before anything was captured makes
// the first picture a keyframe.
func TestFirstFrameIsKeyframe(t *testing.T) {
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "vp8", src)
	recv(t, enc.opens, time.Second, "open")
	quiet(t, enc.frames, 100*time.Millisecond, "frame before any capture")
	src.capture(p, "first")
	if f := recv(t, enc.frames, time.Second, "frame"); !f.in.ForceKeyframe {
		t.Fatal("the first frame is not a keyframe")
	}
}

// TestRateStepApplied: a slow viewer's estimate reaches the encoder after
// rateDownAfter, as a Control on the open stream.
func TestRateStepApplied(t *testing.T) {
	t.Parallel()
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "h264", src)
	recv(t, enc.opens, time.Second, "open")
	p.SetViewerRate("slow", 800_000, 0)
	if got := p.Stats(1).TargetKbps; got != 800 {
		t.Fatalf("target %d, want 800", got)
	}
	done := make(chan struct{})
	defer close(done)
	go func() { // a page that keeps painting: each frame is a turn of the loop
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				src.capture(p, "x")
			}
		}
	}()
	opened := time.Now()
	c := recv(t, enc.controls, 3*time.Second, "bitrate control")
	if c.BitrateKbps != 800 {
		t.Fatalf("control %+v, want 800 kbit/s", c)
	}
	if d := time.Since(opened); d < rateDownAfter-100*time.Millisecond {
		t.Errorf("the step came %v after the open, want rateDownAfter", d)
	}
}

// TestResolutionStepReopens: a steady estimate under 600 kbit/s for
// rescaleAfter reopens the encoder at half the size, without counting a
// restart.
func TestResolutionStepReopens(t *testing.T) {
	t.Parallel() // waits rescaleAfter (5 s) beside the other tests: make test-unit runs it too
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "h264", src)
	recv(t, enc.opens, time.Second, "open")
	p.SetViewerRate("poor", 300_000, 0)
	done := make(chan struct{})
	defer close(done)
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				src.capture(p, "x")
			}
		}
	}()
	o := recv(t, enc.opens, rescaleAfter+2*time.Second, "reopen")
	if o.Width != 640 || o.Height != 360 {
		t.Fatalf("reopened at %dx%d, want 640x360", o.Width, o.Height)
	}
	if st := p.Stats(1); st.Restarts != 0 {
		t.Errorf("%d restarts for a resolution step", st.Restarts)
	}
}

// TestEncodeErrors: a bad frame is counted and skipped; any other error
// is reported through the source's fail hook and the encoder reopens.
func TestEncodeErrors(t *testing.T) {
	enc := newRecorder()
	src := newSource(video, enc)
	p := start(t, "vp8", src)
	recv(t, enc.opens, time.Second, "open")

	var bad error = &encoder.Error{Code: "bad_frame", Message: "not a JPEG"}
	enc.fail.Store(&bad)
	src.capture(p, "broken")
	eventually(t, func() bool { return p.Stats(1).BadFrames == 1 }, "bad frame counted")
	// The keyframe the bad frame was to be is asked for again: the next
	// picture out is one (the last one re-sent, or the next).
	src.capture(p, "good")
	f := recv(t, enc.frames, time.Second, "frame")
	if !f.in.ForceKeyframe {
		t.Fatalf("got %q as a delta, want a keyframe after the bad frame", f.in.JPEG)
	}
	for string(f.in.JPEG) != "good" {
		f = recv(t, enc.frames, time.Second, "the good frame")
	}
	if st := p.Stats(1); st.Restarts != 0 {
		t.Fatalf("a bad frame restarted the encoder: %+v", st)
	}

	gone := errors.New("plugin went away")
	enc.fail.Store(&gone)
	time.Sleep(150 * time.Millisecond)
	src.capture(p, "lost")
	if err := recv(t, src.failures, time.Second, "failure report"); !errors.Is(err, gone) {
		t.Fatalf("reported %v", err)
	}
	recv(t, enc.opens, 2*time.Second, "reopen")
	if st := p.Stats(1); st.Restarts != 1 {
		t.Errorf("%d restarts, want 1", st.Restarts)
	}
}

// TestPassthrough: under tab capture the browser's VP8 goes out as it is:
// deltas wait for a keyframe (asked of the browser), requests go to the
// browser's encoder, and a fallback turns the pipeline into an encoding
// one.
func TestPassthrough(t *testing.T) {
	enc := newRecorder()
	src := newSource(video, enc)
	src.pass = true
	p := start(t, "vp8", src)
	if c := recv(t, src.controls, time.Second, "tab control"); !c.Keyframe {
		t.Fatalf("first control %+v, want a keyframe request", c)
	}
	vp8 := func(kf bool) capture.Frame {
		return capture.Frame{Format: capture.FormatVP8, Data: []byte{1, 2, 3}, Keyframe: kf, CaptureTime: time.Now()}
	}
	p.Pass(vp8(false))
	if st := p.Stats(1); st.FramesEncoded != 0 || st.FramesDropped != 1 || st.Encoder != "browser (tab capture)" {
		t.Fatalf("a delta before the keyframe: %+v", st)
	}
	p.Pass(vp8(true))
	p.Pass(vp8(false))
	if st := p.Stats(1); st.FramesEncoded != 2 || st.Keyframes != 1 {
		t.Fatalf("after the keyframe: %+v", st)
	}
	time.Sleep(keyframeMinGap)
	p.RequestKeyframe(true)
	if c := recv(t, src.controls, time.Second, "tab control"); !c.Keyframe {
		t.Fatalf("control %+v, want a keyframe request", c)
	}
	quiet(t, enc.opens, 100*time.Millisecond, "encoder open in passthrough")

	src.leavePassthrough()
	recv(t, enc.opens, time.Second, "encoder open after the fallback")
	eventually(t, func() bool { return p.Stats(1).Encoder == "fake" }, "the encoder's name in the stats")
	if st := p.Stats(1); st.Restarts != 0 {
		t.Errorf("a fallback counted as a restart: %+v", st)
	}
}

// TestPassthroughLowBandwidth: a viewer whose steady estimate stays under
// tabLowKbps asks the session to leave tab capture.
func TestPassthroughLowBandwidth(t *testing.T) {
	t.Parallel()
	src := newSource(video, newRecorder())
	src.pass = true
	p := start(t, "vp8", src)
	p.SetViewerRate("weak", 3_000_000, 500_000) // boosted, but steady under the floor
	deadline := time.Now().Add(tabLowFor + 3*time.Second)
	for src.lowBWHits.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session was not asked to leave tab capture")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestRateStep(t *testing.T) {
	t0 := time.Unix(1000, 0)
	r := rateStep{applied: 2500, at: t0}
	steps := []struct {
		after  time.Duration
		target int
		want   int // 0 = no change
	}{
		{100 * time.Millisecond, 800, 0},    // down, but within a second of the last change
		{1100 * time.Millisecond, 800, 800}, // down after 1 s
		{1200 * time.Millisecond, 780, 0},   // a small move
		{2 * time.Second, 1600, 0},          // up: only 4 s after the last change
		{5200 * time.Millisecond, 1600, 1600},
		{6 * time.Second, 2200, 0}, // climbing: the next raise after 2 s
		{7300 * time.Millisecond, 2200, 2200},
		{7400 * time.Millisecond, 150, 0},
		{8400 * time.Millisecond, 150, 150},
		{10 * time.Second, 1000, 0}, // up after a fall: 4 s again
		{12500 * time.Millisecond, 1000, 1000},
	}
	for _, s := range steps {
		got, ok := r.next(s.target, t0.Add(s.after))
		if !ok {
			got = 0
		}
		if got != s.want {
			t.Errorf("at +%v target %d: got %d, want %d", s.after, s.target, got, s.want)
		}
	}
}

func TestViewerRatesPickTheWeakest(t *testing.T) {
	src := newSource(Video{BitrateKbps: 2500}, nil)
	p, err := NewPipeline("vp8", "tabcast-test", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.SetViewerRate("a", 3_000_000, 0)
	if got := p.targetKbps.Load(); got != 2500 {
		t.Errorf("one fast viewer: %d, want the configured 2500", got)
	}
	p.SetViewerRate("b", 900_000, 0)
	if got := p.targetKbps.Load(); got != 900 {
		t.Errorf("a slow viewer joins: %d, want 900", got)
	}
	p.SetViewerRate("c", 20_000, 0)
	if got := p.targetKbps.Load(); got != minTargetKbps {
		t.Errorf("a hopeless viewer: %d, want the floor %d", got, minTargetKbps)
	}
	p.SetViewerRate("c", 0, 0)
	p.SetViewerRate("b", 0, 0)
	if got := p.targetKbps.Load(); got != 2500 {
		t.Errorf("slow viewers left: %d, want 2500", got)
	}
	// A viewer whose estimate is boosted (fast recovery): the steady target
	// stays at what GCC alone estimates.
	p.SetViewerRate("d", 2_000_000, 700_000)
	if got, steady := p.targetKbps.Load(), p.steadyKbps.Load(); got != 2000 || steady != 700 {
		t.Errorf("boosted viewer: target %d steady %d, want 2000 and 700", got, steady)
	}
	p.SetViewerRate("d", 0, 0)
	// A config reload lowers the ceiling (SetVideo → Retarget).
	src.mu.Lock()
	src.video.BitrateKbps = 1000
	src.mu.Unlock()
	p.Retarget()
	if got := p.targetKbps.Load(); got != 1000 {
		t.Errorf("after the configured bitrate went to 1000: %d", got)
	}
}

func TestResolutionSteps(t *testing.T) {
	for _, c := range []struct{ kbps, step, w, h int }{
		{2500, 0, 1280, 720}, {1200, 0, 1280, 720}, {900, 1, 960, 540}, {600, 1, 960, 540}, {300, 2, 640, 360}, {150, 2, 640, 360},
	} {
		st := resolutionStep(c.kbps)
		w, h := scaledSize(1280, 720, st)
		if st != c.step || w != c.w || h != c.h {
			t.Errorf("%d kbit/s: step %d %dx%d, want step %d %dx%d", c.kbps, st, w, h, c.step, c.w, c.h)
		}
	}
	if w, h := scaledSize(1366, 767, 1); w%2 != 0 || h%2 != 0 {
		t.Errorf("odd size %dx%d", w, h)
	}
}
