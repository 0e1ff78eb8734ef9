package session

import (
	"testing"
	"time"
)

func TestViewCorrection(t *testing.T) {
	for _, c := range []struct {
		w, h, fw, fh, dw, dh int
	}{
		{1280, 720, 1280, 720, 0, 0},
		{1280, 720, 1279, 721, 0, 0},   // rounding
		{1280, 720, 1280, 576, 0, 144}, // the browser's UI takes room
		{1280, 720, 1138, 720, 0, -90}, // too tall: scaled down to fit, real height 810
		{1280, 720, 1000, 600, 280, 120},
		{1280, 720, 0, 0, 0, 0},      // size not known
		{1280, 720, 1400, 800, 0, 0}, // larger than the limits: not from a capture
	} {
		dw, dh := viewCorrection(c.w, c.h, c.fw, c.fh)
		if dw != c.dw || dh != c.dh {
			t.Errorf("viewCorrection(%d,%d, %d,%d) = %+d,%+d; want %+d,%+d", c.w, c.h, c.fw, c.fh, dw, dh, c.dw, c.dh)
		}
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
	m := &Manager{}
	m.vid.Store(&Video{BitrateKbps: 2500})
	s := &Session{m: m}
	p := &pipeline{s: s, rates: map[string]viewerRate{}}
	p.targetKbps.Store(2500)
	p.setViewerRate("a", 3_000_000, 0)
	if got := p.targetKbps.Load(); got != 2500 {
		t.Errorf("one fast viewer: %d, want the configured 2500", got)
	}
	p.setViewerRate("b", 900_000, 0)
	if got := p.targetKbps.Load(); got != 900 {
		t.Errorf("a slow viewer joins: %d, want 900", got)
	}
	p.setViewerRate("c", 20_000, 0)
	if got := p.targetKbps.Load(); got != minTargetKbps {
		t.Errorf("a hopeless viewer: %d, want the floor %d", got, minTargetKbps)
	}
	p.setViewerRate("c", 0, 0)
	p.setViewerRate("b", 0, 0)
	if got := p.targetKbps.Load(); got != 2500 {
		t.Errorf("slow viewers left: %d, want 2500", got)
	}
	// A viewer whose estimate is boosted (fast recovery): the steady target
	// stays at what GCC alone estimates.
	p.setViewerRate("d", 2_000_000, 700_000)
	if got, steady := p.targetKbps.Load(), p.steadyKbps.Load(); got != 2000 || steady != 700 {
		t.Errorf("boosted viewer: target %d steady %d, want 2000 and 700", got, steady)
	}
	p.setViewerRate("d", 0, 0)
	// A config reload lowers the ceiling (SetVideo → retarget).
	m.vid.Store(&Video{BitrateKbps: 1000})
	p.retarget()
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
