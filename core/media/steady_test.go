package media

import (
	"testing"
	"time"
)

// TestSteadyWindow: the step down is judged on the mean of the last
// rescaleAfter. An estimate swinging around a 1 Mbit/s cap (as GCC's does)
// calls for three quarters once the window is full, where the old rule (every
// sample under 1200) never did; the window holds only rescaleAfter of
// samples, at most one per steadySampleEvery.
func TestSteadyWindow(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var w steadyWindow
	swing := []int{590, 945, 1417, 688, 743, 593, 642, 1558, 738} // kbit/s, one per second's half (measured)
	var at time.Time
	for i := 0; i < 2*len(swing)*5; i++ {
		at = t0.Add(time.Duration(i) * 100 * time.Millisecond)
		w.add(at, swing[(i/5)%len(swing)])
		if mean, full := w.mean(at); full != (at.Sub(t0) >= rescaleAfter) {
			t.Fatalf("at %v: full %v", at.Sub(t0), full)
		} else if full && resolutionStep(mean) != 1 {
			t.Fatalf("at %v: mean %d kbit/s calls for step %d, want 1 (three quarters)", at.Sub(t0), mean, resolutionStep(mean))
		}
	}
	if max := int(rescaleAfter/steadySampleEvery) + 1; len(w.samples) > max {
		t.Errorf("the window holds %d samples, want at most %d", len(w.samples), max)
	}
	// Samples closer than steadySampleEvery are one.
	n := len(w.samples)
	w.add(at.Add(time.Millisecond), 1)
	if len(w.samples) != n {
		t.Errorf("a sample 1 ms after the last was kept")
	}
	// Empty: nothing to judge.
	var e steadyWindow
	if _, full := e.mean(t0); full {
		t.Error("an empty window is full")
	}
}
