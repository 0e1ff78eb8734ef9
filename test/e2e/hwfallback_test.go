package e2e

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// TestHardwareEncoderFallsBack: no GPU here, so the encoder plugin's
// test-only fake hardware encoder (libx264 underneath, reported as hardware)
// is what the session opens and what fails after 48 frames. The pipeline
// must go on in software on that very frame (a keyframe), report the
// fallback in the session snapshot, and the viewer's picture must not stop
// for longer than one keyframe interval.
func TestHardwareEncoderFallsBack(t *testing.T) {
	p := pages(t)
	dir := t.TempDir()
	okFile := filepath.Join(dir, "device")
	if err := os.WriteFile(okFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	a, err := harness.StartWith(ctx, t.TempDir(), harness.Options{Env: []string{"TCTEST_ENCODER_FAKE_HW=fail-after=48,ok-file=" + okFile}},
		"browser.startURL="+p.URL+"/anim", "video.capture=cdp", "input.allowLoopbackHosts=127.0.0.1", "video.keyframeInterval=2s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	s, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		encoders []string // the pipeline's encoder, sampled while the viewer watches
		fallback string
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			var out struct {
				Session harness.SessionSnapshot `json:"session"`
			}
			if err := a.Do(ctx, http.MethodGet, "/api/v1/sessions/"+s.ID, "", &out); err != nil {
				continue // not fatal off the test's goroutine; the checks below fail instead
			}
			for _, pl := range out.Session.Pipelines {
				if pl.Codec != "h264" {
					continue
				}
				mu.Lock()
				if pl.Encoder != "" && (len(encoders) == 0 || encoders[len(encoders)-1] != pl.Encoder) {
					encoders = append(encoders, pl.Encoder)
				}
				if pl.EncoderFallback != "" {
					fallback = pl.EncoderFallback
				}
				mu.Unlock()
			}
		}
	}()
	r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "h264", For: 6 * time.Second})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("watch: %v\n%s", err, a.LogTail(3000))
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("encoders over time %v; fallback %q; %d frames, %d keyframes, longest gap %v", encoders, fallback, r.Frames, r.Keyframes, r.MaxGap.Round(time.Millisecond))
	if len(encoders) < 2 || encoders[0] != "fake_hw_h264" || encoders[len(encoders)-1] != "libx264" {
		t.Errorf("the pipeline's encoder went %v, want fake_hw_h264 then libx264", encoders)
	}
	if !strings.HasPrefix(fallback, "fake_hw_h264: ") {
		t.Errorf("the session snapshot does not report the fallback: %q", fallback)
	}
	if r.Frames < 48 {
		t.Errorf("only %d frames: the picture stopped at the fallback", r.Frames)
	}
	if r.MaxGap > 2*time.Second {
		t.Errorf("the picture stopped for %v at the fallback, want under one keyframe interval (2 s)", r.MaxGap)
	}
	if !strings.Contains(a.LogTail(20000), "hardware encoder failed: software from here on") {
		t.Errorf("the fallback is not logged")
	}
}
