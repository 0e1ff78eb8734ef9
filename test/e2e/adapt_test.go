package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/netns"
)

// TestBitrateFollowsTheLink: a viewer on another network behind a 1 Mbit/s
// link. The appliance's bandwidth estimate for it (GCC over the viewer's
// transport-wide-cc feedback) brings the encoder's target under the cap and
// the picture keeps coming; when the cap is lifted the target climbs back.
// For both capture paths: the screencast's encoder and the browser's own.
func TestBitrateFollowsTheLink(t *testing.T) {
	bin := tcviewerBin(t)
	p := pages(t)
	for _, capture := range []string{"cdp", "tab"} {
		t.Run(capture, func(t *testing.T) {
			ns := netns.Create(t, "adapt")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			a, s := startOnNetns(ctx, t, ns, "webrtc.interfaces="+ns.HostIf, "video.capture="+capture, "video.bitrateKbps=2500",
				"browser.startURL="+p.URL+"/anim", "input.allowLoopbackHosts=127.0.0.1")
			if s.CaptureMode != capture {
				t.Fatalf("captureMode %q, want %s", s.CaptureMode, capture)
			}
			const capKbit = 1000
			ns.ShapeDir(t, netns.Down, capKbit, 0)
			// How long the cap holds. Tab capture first goes over to the
			// screencast (6–9 s into the watch), and the screencast's
			// picture steps down only after its steady estimate has called
			// for it for 5 s: with the cap lifted at 14 s that left 5 s, and
			// one probe above 1200 kbit/s restarted the wait (the quiet full
			// run of stop 15 failed "never stepped down" so), hence 20 s.
			liftAfter, watchFor := 14*time.Second, "34s"
			if capture == "tab" {
				liftAfter, watchFor = 20*time.Second, "40s"
			}

			// The pipeline's target, sampled every 500 ms while the viewer
			// watches (the pipeline exists only then).
			type sample struct {
				at     time.Duration
				target int
				size   string
			}
			var (
				mu      sync.Mutex
				samples []sample
			)
			start := time.Now()
			lifted := make(chan time.Time, 1)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				tick := time.NewTicker(500 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					snap := session(ctx, t, a, s.ID)
					for _, pl := range snap.Pipelines {
						if pl.Codec == "vp8" {
							mu.Lock()
							samples = append(samples, sample{time.Since(start), pl.TargetKbps, pl.Size})
							mu.Unlock()
						}
					}
					if time.Since(start) > liftAfter && len(lifted) == 0 {
						ns.ShapeDir(t, netns.Down, 0, 0)
						lifted <- time.Now()
					}
				}
			}()
			r, err := watchFromNetns(ctx, t, ns, bin, a, s, "--for", watchFor, "--timeout", "60s")
			close(stop)
			wg.Wait()
			if err != nil {
				t.Fatalf("tcviewer: %v\n%s", err, a.LogTail(3000))
			}
			liftedAt := (<-lifted).Sub(start)
			mu.Lock()
			defer mu.Unlock()
			var kbps []int
			var gaps []string
			for _, sec := range r.Seconds {
				kbps = append(kbps, sec.Bytes*8/1000)
				gaps = append(gaps, fmt.Sprintf("%.1f", sec.MaxGap.Seconds()))
			}
			t.Logf("%s: %d frames, longest gap %v; delivered kbit/s per second: %v; longest gap (s) per second: %v", capture, r.Frames, r.MaxGap.Round(time.Millisecond), kbps, strings.Join(gaps, " "))
			var trace []string
			for _, sm := range samples {
				trace = append(trace, fmt.Sprintf("%.1fs:%d@%s", sm.at.Seconds(), sm.target, sm.size))
			}
			t.Logf("%s: targets (kbit/s), cap lifted at %.1fs: %s", capture, liftedAt.Seconds(), strings.Join(trace, " "))

			// A tab-capture session goes over to the screencast for a poor
			// link (the browser's encoder cannot serve one).
			if capture == "tab" {
				snap := session(ctx, t, a, s.ID)
				if snap.CaptureMode != "cdp" || snap.CaptureFallback != "low_bandwidth" {
					t.Errorf("tab capture behind 1 Mbit/s: captureMode %q, fallback %q; want cdp, low_bandwidth", snap.CaptureMode, snap.CaptureFallback)
				}
			}
			// Under the cap: the target is below it within 8 s of the start.
			settled := time.Duration(0)
			for _, sm := range samples {
				if sm.target > 0 && sm.target <= capKbit && sm.at < liftedAt {
					settled = sm.at
					break
				}
			}
			if settled == 0 || settled > 8*time.Second {
				t.Errorf("the target never went under the %d kbit/s cap within 8 s (settled %v)", capKbit, settled)
			}
			// Frames keep flowing once the target has settled: every second
			// from the 5th on has frames (from the 8th for tab capture,
			// which sends at full rate until the session has gone over to
			// the screencast).
			settledSec := 5
			if capture == "tab" {
				settledSec = 8
			}
			for i, sec := range r.Seconds {
				if i >= settledSec && sec.Frames == 0 && i < len(r.Seconds)-1 {
					t.Errorf("second %d had no frame (a freeze)", i)
				}
				// No freeze over 1 s once settled (measured: ≤ 0.5 s after
				// the second in which the target went under the cap; the
				// congestion onset before it, 1.5–5.5 s into the watch, and the
				// tab capture → screencast switch cost up to 1.8 s).
				if i >= max(5, int(settled/time.Second)+2) && sec.MaxGap > time.Second {
					t.Errorf("second %d: a %v wait for a frame (a freeze over 1 s)", i, sec.MaxGap.Round(time.Millisecond))
				}
			}
			// Under the cap the picture steps down (smaller keyframes).
			stepped := false
			for _, sm := range samples {
				if sm.at < liftedAt && sm.size != "" && sm.size != "1280x720" {
					stepped = true
				}
			}
			if !stepped {
				t.Errorf("the picture never stepped down from 1280x720 behind the cap")
			}
			// After the cap is lifted the target is back near the configured
			// rate: GCC alone takes 16–20 s or more (its loss average decays,
			// then it grows ≤ 8 %/s); the estimator's fast recovery
			// (core/peer/bwe_recover.go) boosts it once the path is clean.
			// The goal is 10 s: measured 6.5–8.5 s in 5 of 5 runs once a
			// climb raises the encoder every 2 s and the picture steps back
			// up after 3 s (before: 6.5–10.5 s, 9 of 12 within 10 s); the
			// test leaves room for a loaded CI machine.
			const full = 2500
			recovered := time.Duration(0)
			for _, sm := range samples {
				if sm.at > liftedAt && sm.target*10 >= full*9 {
					recovered = sm.at - liftedAt
					break
				}
			}
			// Delivered kbit/s, mean over viewer seconds [from, to).
			mean := func(from, to int) int {
				sum, n := 0, 0
				for i := from; i < min(to, len(kbps)); i++ {
					sum, n = sum+kbps[i], n+1
				}
				return sum / max(n, 1)
			}
			t.Logf("%s: under the cap after %v; target at ≥ 90 %% of %d kbit/s %v after the cap was lifted; longest gap %v; delivered %d kbit/s under the cap (s%d–12), %d at the end (last 5 s)",
				capture, settled.Round(100*time.Millisecond), full, recovered.Round(100*time.Millisecond), r.MaxGap.Round(time.Millisecond),
				mean(settledSec, 13), settledSec, mean(len(kbps)-6, len(kbps)-1))
			if recovered == 0 || recovered > 12*time.Second {
				t.Errorf("the target was not back at 90 %% of %d kbit/s within 12 s of lifting the cap (took %v)", full, recovered)
			}
		})
	}
}
