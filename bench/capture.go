package main

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// tabCaptureMedia watches the animating page through tab capture (the
// default video.capture auto; the bench fails this part when the probe
// did not pick tab capture) and then a still page.
func tabCaptureMedia(ctx context.Context, pageURL string, dur time.Duration) (codecResult, error) {
	tmp, err := os.MkdirTemp("", "tabcast-bench-tab-")
	if err != nil {
		return codecResult{}, err
	}
	defer os.RemoveAll(tmp)
	a, err := harness.Start(ctx, tmp, "browser.startURL="+pageURL, "video.fps=24", "video.bitrateKbps=2500", "input.allowLoopbackHosts=127.0.0.1", "video.capture=auto")
	if err != nil {
		return codecResult{}, err
	}
	defer a.Stop(15 * time.Second)
	sess, err := a.DefaultSession(ctx)
	if err != nil {
		return codecResult{}, err
	}
	if sess.CaptureMode != "tab" {
		return codecResult{}, fmt.Errorf("the session captures by %q, not tab (probe failed?)", sess.CaptureMode)
	}
	r, err := watch(ctx, a, sess.ID, "vp8", dur)
	if err != nil {
		return r, err
	}
	r.Capture = "tab"
	rs := []codecResult{r}
	if err := stillBitrates(ctx, a, sess.ID, pageURL, rs); err != nil {
		fmt.Fprintln(os.Stderr, "bench: tab capture still page:", err)
	}
	return rs[0], nil
}

// stillBitrates navigates the session to a still page and watches it for
// stillWatch per result's codec, then goes back to the animating page.
func stillBitrates(ctx context.Context, a *harness.Appliance, id, animURL string, rs []codecResult) error {
	nav := func(u string) error {
		return a.Do(ctx, http.MethodPost, "/api/v1/sessions/"+id+"/navigate", fmt.Sprintf(`{"url":%q}`, u), nil)
	}
	if err := nav(strings.TrimSuffix(animURL, "/") + "/still"); err != nil {
		return fmt.Errorf("navigate to the still page: %w", err)
	}
	defer nav(animURL)
	time.Sleep(time.Second) // the page's first paint is not "still"
	for i := range rs {
		wctx, cancel := context.WithTimeout(ctx, stillWatch+30*time.Second)
		var (
			mu            sync.Mutex
			first         time.Time
			bytes, frames int
		)
		_, err := viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: id, Codec: rs[i].Codec, For: stillWatch,
			OnFrame: func(f viewer.Frame) {
				mu.Lock()
				defer mu.Unlock()
				// From the first frame (the joining keyframe) on: the rest
				// is what a still page costs.
				if first.IsZero() {
					first = f.Arrived
					return
				}
				bytes += f.Size
				frames++
			}})
		cancel()
		if err != nil {
			return fmt.Errorf("%s: %w", rs[i].Codec, err)
		}
		mu.Lock()
		if span := time.Since(first).Seconds(); !first.IsZero() && span > 0 {
			rs[i].StillKbps = r1(float64(bytes) * 8 / span / 1000)
			rs[i].StillFPS = r1(float64(frames) / span)
		}
		mu.Unlock()
	}
	return nil
}

// cpuRatios sets each result's CPU (core, plugins and Chromium together)
// relative to the CDP + VP8 path's.
func cpuRatios(rs []codecResult) {
	var ref float64
	for _, r := range rs {
		if r.Capture == "cdp" && r.Codec == "vp8" {
			ref = r.CoreCPUPercent + r.ChromiumCPU
		}
	}
	if ref == 0 {
		return
	}
	for i := range rs {
		rs[i].CPUToCDPVP8 = math.Round(100*(rs[i].CoreCPUPercent+rs[i].ChromiumCPU)/ref) / 100
	}
}
