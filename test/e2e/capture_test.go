package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

// session reads one session's snapshot.
func session(ctx context.Context, t *testing.T, a *harness.Appliance, id string) harness.SessionSnapshot {
	t.Helper()
	var out struct {
		Session harness.SessionSnapshot `json:"session"`
	}
	if err := a.Do(ctx, http.MethodGet, "/api/v1/sessions/"+id, "", &out); err != nil {
		t.Fatal(err)
	}
	return out.Session
}

// captureStatus is the tab-capture probe as /api/v1/status shows it.
type captureStatus struct {
	Mode       string `json:"mode"`
	Tried      bool   `json:"tried"`
	OK         bool   `json:"ok"`
	Reason     string `json:"reason"`
	FirstFrame int64  `json:"firstFrameNs"`
	Fallbacks  uint64 `json:"fallbacks"`
}

func probeStatus(ctx context.Context, t *testing.T, a *harness.Appliance) captureStatus {
	t.Helper()
	var out struct {
		Status struct {
			Capture captureStatus `json:"capture"`
		} `json:"status"`
	}
	if err := a.Do(ctx, http.MethodGet, "/api/v1/status", "", &out); err != nil {
		t.Fatal(err)
	}
	return out.Status.Capture
}

// devtools finds the appliance's Chromium DevTools HTTP endpoint from the
// DevToolsActivePort file in its profile (under the appliance's TMPDIR).
func devtools(t *testing.T, a *harness.Appliance) string {
	t.Helper()
	var port string
	_ = filepath.WalkDir(a.TempDir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == "DevToolsActivePort" {
			if b, err := os.ReadFile(path); err == nil {
				port = strings.SplitN(string(b), "\n", 2)[0]
				return fs.SkipAll
			}
		}
		return nil
	})
	if port == "" {
		t.Fatal("no DevToolsActivePort under the appliance's temp dir")
	}
	return "http://127.0.0.1:" + port
}

// closeOffscreen closes the capture extension's offscreen document, as a
// crash of it would.
func closeOffscreen(t *testing.T, base string) {
	t.Helper()
	resp, err := http.Get(base + "/json/list")
	if err != nil {
		t.Fatal(err)
	}
	var targets []struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		URL  string `json:"url"`
	}
	err = json.NewDecoder(resp.Body).Decode(&targets)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, tg := range targets {
		if strings.HasPrefix(tg.URL, "chrome-extension://") && strings.HasSuffix(tg.URL, "/offscreen.html") {
			resp, err := http.Get(base + "/json/close/" + tg.ID)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("close the offscreen document: %s", resp.Status)
			}
			return
		}
	}
	t.Fatalf("no offscreen document among %d targets", len(targets))
}

// breakWatch is a viewer watching across a break (mark): it reports its last
// frame and the longest pause between frames that ended after the break.
type breakWatch struct {
	mu          sync.Mutex
	last, broke time.Time
	gap         time.Duration
	done        chan error
}

func watchAcross(ctx context.Context, a *harness.Appliance, id string, d time.Duration) *breakWatch {
	w := &breakWatch{done: make(chan error, 1)}
	go func() {
		_, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: id, Codec: "vp8", For: d,
			OnFrame: func(f viewer.Frame) {
				w.mu.Lock()
				defer w.mu.Unlock()
				if !w.broke.IsZero() && !w.last.IsZero() && f.Arrived.After(w.broke) {
					w.gap = max(w.gap, f.Arrived.Sub(w.last))
				}
				w.last = f.Arrived
			}})
		w.done <- err
	}()
	return w
}

func (w *breakWatch) mark() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.broke = time.Now()
}

// wait ends the watch: the last frame, the longest pause after the break
// and when the break was.
func (w *breakWatch) wait() (last time.Time, gap time.Duration, broke time.Time, err error) {
	err = <-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last, w.gap, w.broke, err
}

// TestTabCapture: with the default video.capture auto, the start-up probe
// finds tab capture working, the session captures its tab, an auto viewer
// gets the browser's own VP8 (no encoder), and H.264 viewers still get a
// picture from the screencast. Killing the extension's offscreen document
// costs a watching viewer at most 3 s of picture.
func TestTabCapture(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/anim")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	st := probeStatus(ctx, t, a)
	t.Logf("probe: %+v (first frame after %v)", st, time.Duration(st.FirstFrame).Round(time.Millisecond))
	if st.Mode != "auto" || !st.Tried || !st.OK {
		t.Fatalf("tab capture probe: %+v, want mode auto, tried and ok\n%s", st, a.LogTail(3000))
	}
	if snap := session(ctx, t, a, s.ID); snap.CaptureMode != "tab" {
		t.Fatalf("captureMode %q, want tab", snap.CaptureMode)
	}

	r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: s.ID, Codec: "auto", For: 3 * time.Second})
	if err != nil {
		t.Fatalf("%v\n%s", err, a.LogTail(3000))
	}
	t.Logf("auto viewer: %s, %d frames (%d keyframes) in 3 s, first after %v", r.Codec, r.Frames, r.Keyframes, r.FirstFrame.Round(time.Millisecond))
	if r.Codec != "vp8" || r.Frames < 10 || r.Keyframes < 1 {
		t.Errorf("auto viewer got %s with %d frames (%d keyframes); want vp8, >= 10 frames, a keyframe", r.Codec, r.Frames, r.Keyframes)
	}
	r, err = viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: s.ID, Codec: "h264", For: 2 * time.Second})
	if err != nil {
		t.Fatalf("h264 viewer: %v", err)
	}
	if r.Codec != "h264" || r.Frames < 5 {
		t.Errorf("h264 viewer of a tab-capture session: %s, %d frames; want h264 and a live picture", r.Codec, r.Frames)
	}

	// A viewer watches while the offscreen document dies.
	w := watchAcross(ctx, a, s.ID, 9*time.Second)
	time.Sleep(3 * time.Second)
	snap := session(ctx, t, a, s.ID)
	var encoder string
	for _, pl := range snap.Pipelines {
		if pl.Codec == "vp8" {
			encoder = pl.Encoder
		}
	}
	if !strings.Contains(encoder, "tab capture") {
		t.Errorf("vp8 pipeline encoder %q: want the browser's own (tab capture)", encoder)
	}
	base := devtools(t, a)
	w.mark()
	closeOffscreen(t, base)
	lastFrame, worst, killed, err := w.wait()
	if err != nil {
		t.Fatal(err)
	}
	snap = session(ctx, t, a, s.ID)
	t.Logf("after the offscreen document was closed: longest gap %v, captureMode %s (fallback %q)", worst.Round(time.Millisecond), snap.CaptureMode, snap.CaptureFallback)
	if lastFrame.Before(killed.Add(time.Second)) {
		t.Fatalf("no frame after the offscreen document was closed\n%s", a.LogTail(4000))
	}
	if worst > 3*time.Second {
		t.Errorf("picture stopped for %v after the offscreen document was closed, want <= 3 s", worst)
	}
	if snap.CaptureMode == "cdp" && snap.CaptureFallback != "tab_capture_failed" {
		t.Errorf("fell back to cdp with reason %q, want tab_capture_failed", snap.CaptureFallback)
	}
	if snap.CaptureMode == "cdp" {
		return // the crash below is the fallback this already was
	}

	// The capture-tab plugin crashes: the session goes over to the
	// screencast at once, and the viewer's picture resumes within 3 s.
	w = watchAcross(ctx, a, s.ID, 8*time.Second)
	time.Sleep(2 * time.Second)
	pid := pluginPID(a, "capture-tab")
	if pid == 0 {
		t.Fatal("no capture-tab process under the core")
	}
	w.mark()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	lastFrame, worst, killed, err = w.wait()
	if err != nil {
		t.Fatal(err)
	}
	snap = session(ctx, t, a, s.ID)
	t.Logf("after capture-tab was killed: longest gap %v, captureMode %s (fallback %q)", worst.Round(time.Millisecond), snap.CaptureMode, snap.CaptureFallback)
	if snap.CaptureMode != "cdp" || snap.CaptureFallback != "tab_capture_failed" {
		t.Errorf("captureMode %q, fallback %q; want cdp, tab_capture_failed", snap.CaptureMode, snap.CaptureFallback)
	}
	if lastFrame.Before(killed.Add(time.Second)) {
		t.Fatalf("no frame after capture-tab was killed\n%s", a.LogTail(4000))
	}
	if worst > 3*time.Second {
		t.Errorf("picture stopped for %v after capture-tab was killed, want <= 3 s", worst)
	}
	if st := probeStatus(ctx, t, a); st.Fallbacks != 1 {
		t.Errorf("status counts %d fallbacks, want 1", st.Fallbacks)
	}
}

// TestTabCaptureProbeFallsBack: auto on a Chromium started without the
// capture extension's flags falls back to the screencast, with the reason.
func TestTabCaptureProbeFallsBack(t *testing.T) {
	p := pages(t)
	// A Chromium wrapper that drops the extension flags the plugin asks for.
	wrapper := filepath.Join(t.TempDir(), "chromium-no-ext")
	script := `#!/bin/sh
for a; do shift; case "$a" in --load-extension=*|--disable-extensions-except=*|--allowlisted-extension-id=*) ;; *) set -- "$@" "$a";; esac; done
exec /usr/lib/chromium/chromium "$@"
`
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a, s := startWithSession(t, p.URL+"/anim", "browser.path="+wrapper)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st := probeStatus(ctx, t, a)
	t.Logf("probe: %+v", st)
	if !st.Tried || st.OK || st.Reason == "" {
		t.Fatalf("probe %+v: want tried, not ok, with a reason", st)
	}
	if snap := session(ctx, t, a, s.ID); snap.CaptureMode != "cdp" {
		t.Fatalf("captureMode %q, want cdp", snap.CaptureMode)
	}
	r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, HTTPClient: a.Client, SessionID: s.ID, Codec: "vp8", For: 2 * time.Second})
	if err != nil {
		t.Fatalf("%v\n%s", err, a.LogTail(3000))
	}
	if r.Frames < 5 {
		t.Errorf("%d frames from the screencast fallback in 2 s", r.Frames)
	}
	if !strings.Contains(a.LogTail(20000), "tab capture probe failed") {
		t.Error(fmt.Sprintf("the log does not say the probe failed:\n%s", a.LogTail(3000)))
	}
}
