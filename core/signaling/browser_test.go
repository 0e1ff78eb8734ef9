package signaling_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"

	"github.com/tabcast/tabcast/appliance/web"
	"github.com/tabcast/tabcast/internal/testenv"
)

const chromiumPath = "/usr/lib/chromium/chromium"

// startChromium runs headless Chromium with CDP on loopback and returns a
// chromedp context attached to it. WebRTC may use loopback candidates and
// real host addresses (no mDNS names) so it pairs with Pion on 127.0.0.1.
func startChromium(t *testing.T) context.Context {
	t.Helper()
	testenv.NeedsChromium(t)
	// Not t.TempDir: Chromium's helpers may write to the profile while they
	// exit, so removal waits for the process group and retries.
	dir, err := os.MkdirTemp("", "tabcast-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	profile := filepath.Join(dir, "profile")
	args := []string{
		"--headless=new", "--disable-gpu", "--disable-background-networking",
		"--disable-component-update", "--disable-sync", "--no-first-run",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile,
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
		"--allow-loopback-in-peer-connection",
		"--disable-features=WebRtcHideLocalIpsWithMdns",
		"--autoplay-policy=no-user-gesture-required",
		"--window-size=1280,800",
		"about:blank",
	}
	if os.Geteuid() == 0 {
		args = append([]string{"--no-sandbox"}, args...)
	}
	cmd := exec.Command(chromiumPath, args...)
	// Its own process group, so the renderer and GPU helpers end with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Crash reports and caches stay in the temp dir, not in $HOME.
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg-config"),
		"XDG_CACHE_HOME="+filepath.Join(dir, "xdg-cache"))
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		pgid := cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			_ = cmd.Wait()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-done
		}
		// Helpers outside the leader may still be exiting.
		for i := 0; i < 50 && syscall.Kill(-pgid, 0) == nil; i++ {
			time.Sleep(20 * time.Millisecond)
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		for i := 0; i < 20; i++ {
			if err := os.RemoveAll(dir); err == nil {
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Errorf("could not remove %s", dir)
	})
	var wsURL string
	deadline := time.Now().Add(15 * time.Second)
	for wsURL == "" {
		b, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort"))
		if lines := strings.Split(strings.TrimSpace(string(b)), "\n"); err == nil && len(lines) == 2 {
			wsURL = "ws://127.0.0.1:" + lines[0] + lines[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("chromium wrote no DevToolsActivePort")
		}
		time.Sleep(50 * time.Millisecond)
	}
	actx, acancel := remote.NewAllocator(context.Background(), wsURL)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	return ctx
}

type pageState struct {
	State      string   `json:"state"`
	Frames     int      `json:"frames"`
	Width      int      `json:"width"`
	Codec      string   `json:"codec"`
	StatCodec  string   `json:"statCodec"`
	Resolution string   `json:"resolution"`
	FPS        string   `json:"fps"`
	Bitrate    string   `json:"bitrate"`
	RTT        string   `json:"rtt"`
	Candidate  string   `json:"candidate"`
	Status     string   `json:"status"`
	Errors     []string `json:"errors"`
}

const pageStateJS = `(() => {
  const q = (id) => document.querySelector('[data-testid="' + id + '"]');
  const v = q('session-video');
  const t = window.tabcast || {};
  return {
    state: q('conn-state').textContent,
    frames: v && v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality().totalVideoFrames : 0,
    width: v ? v.videoWidth : 0,
    codec: t.codec || '',
    statCodec: q('stat-codec').textContent,
    resolution: q('stat-resolution').textContent,
    fps: q('stat-fps').textContent,
    bitrate: q('stat-bitrate').textContent,
    rtt: q('stat-rtt').textContent,
    candidate: q('stat-candidate').textContent,
    status: q('status-line').textContent,
    errors: (t.errors || []).map(e => e.code),
  };
})()`

// TestPanelInChromium serves the embedded panel, the session list and the
// signaling handler, and checks that headless Chromium plays the stream in
// both codecs with live stats.
func TestPanelInChromium(t *testing.T) {
	e := newEnv(t)
	servePanel(e)
	ctx := startChromium(t)
	if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/welcome")); err != nil {
		t.Fatalf("open welcome page: %v", err)
	}
	clock1, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('clock').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	caps, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](
		`RTCRtpReceiver.getCapabilities('video').codecs.map(c => c.mimeType)`))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("chromium decodes: %v", caps)
	shots := os.Getenv("TABCAST_SCREENSHOT_DIR")
	if shots != "" {
		screenshot(t, ctx, filepath.Join(shots, "welcome.png"))
	}
	time.Sleep(1100 * time.Millisecond)
	clock2, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('clock').textContent`))
	if err != nil {
		t.Fatal(err)
	}
	if clock1 == clock2 || !strings.Contains(clock2, ":") {
		t.Fatalf("welcome clock does not tick: %q then %q", clock1, clock2)
	}

	for _, codec := range []string{"vp8", "h264"} {
		t.Run(codec, func(t *testing.T) {
			if err := chromedp.Do(ctx, chromedp.Navigate(e.srv.URL+"/?codec="+codec)); err != nil {
				t.Fatalf("open panel: %v", err)
			}
			var st pageState
			deadline := time.Now().Add(20 * time.Second)
			for {
				st, err = chromedp.Run(ctx, chromedp.Evaluate[pageState](pageStateJS))
				if err != nil {
					t.Fatal(err)
				}
				ready := st.State == "connected" && st.Frames > 0 && st.Resolution != "–" &&
					st.Bitrate != "–" && st.Candidate != "–"
				if ready {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("panel not playing after 20 s: %+v", st)
				}
				time.Sleep(200 * time.Millisecond)
			}
			t.Logf("panel: %+v", st)
			if st.Codec != codec || !strings.EqualFold(st.StatCodec, codec) {
				t.Fatalf("codec %q / stat %q, want %s", st.Codec, st.StatCodec, codec)
			}
			if st.Width != 640 || st.Resolution != "640×360" {
				t.Fatalf("resolution %q (video width %d)", st.Resolution, st.Width)
			}
			// On loopback Chromium often learns its own side as
			// peer-reflexive; any real candidate type is fine.
			// The stat is "type/transport", e.g. prflx/udp or relay/tcp.
			typ, transport, _ := strings.Cut(st.Candidate, "/")
			switch typ {
			case "host", "prflx", "srflx", "relay":
			default:
				t.Fatalf("candidate type %q", st.Candidate)
			}
			if transport != "udp" {
				t.Fatalf("transport %q on loopback, want udp", st.Candidate)
			}
			if !strings.HasSuffix(st.RTT, " ms") || !strings.Contains(st.Bitrate, "bit/s") || st.FPS == "–" {
				t.Fatalf("stats not live: %+v", st)
			}
			if len(st.Errors) > 0 {
				t.Fatalf("error frames: %v", st.Errors)
			}
			if shots != "" {
				screenshot(t, ctx, filepath.Join(shots, "panel-"+codec+".png"))
			}
		})
	}
	// The panel reconnects by itself when the server drops its socket.
	before := e.media.subs.Load()
	e.restartHandler()
	sawOverlay := false
	deadline := time.Now().Add(15 * time.Second)
	for {
		r, err := chromedp.Run(ctx, chromedp.Evaluate[struct {
			Overlay bool   `json:"overlay"`
			Text    string `json:"text"`
			State   string `json:"state"`
			Frames  int    `json:"frames"`
		}](`({overlay: !document.querySelector('[data-testid="overlay"]').hidden,
			text: document.querySelector('[data-testid="reconnect"]').textContent,
			state: window.tabcast.state,
			frames: document.querySelector('video').getVideoPlaybackQuality().totalVideoFrames})`))
		if err != nil {
			t.Fatal(err)
		}
		if r.Overlay && strings.Contains(r.Text, "reconnecting") {
			if !sawOverlay && shots != "" {
				screenshot(t, ctx, filepath.Join(shots, "panel-reconnecting.png"))
			}
			sawOverlay = true
		}
		if sawOverlay && r.State == "connected" && e.media.subs.Load() > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("panel did not reconnect (overlay seen %v): %+v", sawOverlay, r)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Navigating away closed the last socket: every subscription is released.
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "releases", func() bool { return e.media.releases.Load() == e.media.subs.Load() })
	t.Logf("subscriptions %d, releases %d, keyframe requests %d", e.media.subs.Load(), e.media.releases.Load(), e.media.keyReqs.Load())
}

// servePanel serves the embedded panel, the welcome page and a session
// list naming "s1".
func servePanel(e *env) {
	e.mux.Handle("GET /", http.FileServerFS(web.FS))
	e.mux.HandleFunc("GET /welcome", func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, web.FS, "welcome.html")
	})
	// The panel asks who it is before anything else (auth is off here).
	e.mux.HandleFunc("GET /api/v1/auth/me", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "user": "local", "role": "admin", "method": "none"})
	})
	e.mux.HandleFunc("GET /api/v1/sessions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "sessions": []map[string]string{
			{"id": "s1", "state": "ready", "title": "Test pattern", "url": "tabcast://test-pattern"},
		}})
	})
}

func screenshot(t *testing.T, ctx context.Context, path string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(fmt.Errorf("write screenshot: %w", err))
	}
}
