package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/viewer"
)

// TestPLIStormAndStillPage, for both capture paths: a viewer that sends 100
// PLIs a second gets at most 2 keyframes a second (one per 500 ms), and a
// still page costs at most 3 frames a second.
func TestPLIStormAndStillPage(t *testing.T) {
	p := pages(t)
	for _, capture := range []string{"cdp", "tab"} {
		t.Run(capture, func(t *testing.T) {
			a, s := startWithSession(t, p.URL+"/anim", "video.capture="+capture)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			if s.CaptureMode != capture {
				t.Fatalf("captureMode %q, want %s", s.CaptureMode, capture)
			}
			const watch = 6 * time.Second
			r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: watch, PLIEvery: 10 * time.Millisecond})
			if err != nil {
				t.Fatalf("%v\n%s", err, a.LogTail(3000))
			}
			// From the third second on: the start has keyframes of its own
			// (the first frame; tab capture's window fitting changes the
			// picture size, and each size starts with a keyframe).
			var kf, secs int
			for i, sec := range r.Seconds {
				if i >= 2 && i < len(r.Seconds)-1 {
					kf += sec.Keyframes
					secs++
				}
			}
			perSec := float64(kf) / float64(max(secs, 1))
			t.Logf("%s: PLI storm (100/s): %d frames, %d keyframes in %v; %.1f keyframes/s from the third second on", capture, r.Frames, r.Keyframes, watch, perSec)
			if perSec > 2.25 {
				t.Errorf("%.1f keyframes a second under a PLI storm, want <= 2", perSec)
			}
			if r.Frames < 10 {
				t.Errorf("only %d frames under a PLI storm", r.Frames)
			}

			if err := a.Do(ctx, http.MethodPost, "/api/v1/sessions/"+s.ID+"/navigate", `{"url":"`+p.URL+`/solid?c=336699"}`, nil); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the page's first paints are not "still"
			const still = 5 * time.Second
			r, err = viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: still})
			if err != nil {
				t.Fatal(err)
			}
			fps := float64(r.Frames-1) / still.Seconds()
			t.Logf("%s: still page: %d frames in %v (%.1f fps beyond the first), %d bytes", capture, r.Frames, still, fps, r.Bytes)
			if fps > 3 {
				t.Errorf("a still page sends %.1f fps, want <= 3", fps)
			}
		})
	}
}
