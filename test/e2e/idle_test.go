package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/viewer"
)

// TestIdleRepeatsAndWake (CDP path): after the picture's last change the
// encoder repeats it at video.idleFps for 3 s (the repeats let it sharpen
// the picture), then sends nothing; a click that changes the page brings
// frames back at once.
func TestIdleRepeatsAndWake(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/flip", "video.capture=cdp", "video.idleFps=2")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	arrivals := make(chan time.Time, 4096)
	type watched struct {
		r   viewer.Result
		err error
	}
	done := make(chan watched, 1)
	go func() {
		r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: 11 * time.Second,
			OnFrame: func(f viewer.Frame) {
				select {
				case arrivals <- f.Arrived:
				default:
				}
			}})
		done <- watched{r, err}
	}()
	select {
	case <-arrivals: // the first frame
	case w := <-done:
		t.Fatalf("watch: %v\n%s", w.err, a.LogTail(3000))
	}
	click := func() time.Time {
		at := time.Now()
		if st, r := agentDo(t, a, s.ID, map[string]any{"command": "click", "x": 200, "y": 200}); st != 200 || !r.OK {
			t.Fatalf("click: %d %+v", st, r)
		}
		return at
	}
	time.Sleep(time.Second)
	first := click()
	time.Sleep(6 * time.Second)
	var repeats uint64
	ss, err := a.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range ss {
		for _, pl := range x.Pipelines {
			if x.ID == s.ID {
				repeats += pl.IdleRepeats
			}
		}
	}
	second := click()
	w := <-done
	if w.err != nil {
		t.Fatalf("watch: %v\n%s", w.err, a.LogTail(3000))
	}
	close(arrivals)
	var refine, silent, afterSecond int
	var wake time.Duration
	for at := range arrivals {
		switch {
		case at.After(first.Add(500*time.Millisecond)) && at.Before(first.Add(3*time.Second)):
			refine++ // repeats (the flip's own frames come first)
		case at.After(first.Add(4500*time.Millisecond)) && at.Before(second):
			silent++
		case at.After(second):
			if afterSecond == 0 {
				wake = at.Sub(second)
			}
			afterSecond++
		}
	}
	t.Logf("idle: %d frames 0.5–3 s after a change, %d from 4.5 s to the next click, %d idle repeats in all; the next click's first frame after %v",
		refine, silent, repeats, wake.Round(time.Millisecond))
	// 2/s for 3 s after the change: about 5 in the window; a still page
	// must stay within 3 fps.
	if refine < 2 || refine > 8 {
		t.Errorf("%d frames in the 2.5 s after a change, want the idle repeats (about 5 at 2/s)", refine)
	}
	if silent > 1 {
		t.Errorf("%d frames on a page still for over 4.5 s, want none (the repeats end after 3 s)", silent)
	}
	if afterSecond == 0 || wake > 2*time.Second {
		t.Errorf("no frame within 2 s of a click that changed the page (%d after it)", afterSecond)
	}
	if repeats == 0 {
		t.Errorf("the pipeline counts no idle repeats")
	}
}
