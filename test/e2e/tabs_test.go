package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/test/harness"
)

// TestPictureFollowsTabs: a viewer of the panel sees the new tab's picture
// after an agent's tabs new, and the first tab's again after tabs switch,
// both with tab capture (vp8 as the browser encodes it) and with the CDP
// screencast (h264 through the encoder).
func TestPictureFollowsTabs(t *testing.T) {
	for _, c := range []struct{ name, capture, codec, mode string }{
		{"tab-vp8", "auto", "vp8", "tab"},
		{"cdp-h264", "cdp", "h264", "cdp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := pages(t)
			a, s := startWithSession(t, p.URL+"/solid?c=ff0000", "video.capture="+c.capture)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			bctx := viewerBrowser(t)
			if err := a.OpenPanel(bctx, "admin", a.AdminPassword, "/?codec="+c.codec); err != nil {
				t.Fatal(err)
			}
			red, blue := [3]int{255, 0, 0}, [3]int{0, 0, 255}
			if px, err := waitEval(bctx, centrePixel, near(red), 20*time.Second); err != nil {
				t.Fatalf("red page not shown: %v (pixel %v)\n%s", err, px, a.LogTail(3000))
			}
			start := time.Now()
			r := mustAgent(t, a, s.ID, map[string]any{"command": "tabs", "op": "new", "url": p.URL + "/solid?c=0000ff"})
			took := time.Since(start)
			if px, err := waitEval(bctx, centrePixel, near(blue), 10*time.Second); err != nil {
				t.Fatalf("picture did not follow to the new tab: %v (pixel %v)\n%s", err, px, a.LogTail(3000))
			}
			t.Logf("%s: tabs new answered after %v, blue picture after %v", c.name, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			var d struct {
				Tabs []struct {
					Index   int  `json:"index"`
					Current bool `json:"current"`
				} `json:"tabs"`
			}
			if err := json.Unmarshal(r.Data, &d); err != nil || len(d.Tabs) != 2 || !d.Tabs[1].Current {
				t.Fatalf("tabs after new: %s (%v)", r.Data, err)
			}
			snap := waitTitle(ctx, t, a, s.ID, "0000ff")
			if snap.Title != "0000ff" || snap.CaptureMode != c.mode || snap.CaptureFallback != "" {
				t.Errorf("snapshot after tabs new: title %q, capture %s (fallback %q); want 0000ff, %s", snap.Title, snap.CaptureMode, snap.CaptureFallback, c.mode)
			}

			start = time.Now()
			mustAgent(t, a, s.ID, map[string]any{"command": "tabs", "op": "switch", "index": 0})
			took = time.Since(start)
			if px, err := waitEval(bctx, centrePixel, near(red), 10*time.Second); err != nil {
				t.Fatalf("picture did not follow the switch back: %v (pixel %v)\n%s", err, px, a.LogTail(3000))
			}
			t.Logf("%s: tabs switch answered after %v, red picture after %v", c.name, took.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
			if snap := waitTitle(ctx, t, a, s.ID, "ff0000"); snap.Title != "ff0000" || snap.CaptureFallback != "" {
				t.Errorf("snapshot after the switch back: title %q, fallback %q", snap.Title, snap.CaptureFallback)
			}
			// The panel's own page state followed too.
			if got, err := waitEval(bctx, `(window.tabcast && window.tabcast.input && window.tabcast.input.page && window.tabcast.input.page.title) || ""`,
				func(s string) bool { return s == "ff0000" }, 5*time.Second); err != nil {
				t.Logf("panel page title %q: %v", got, err)
			}
		})
	}
}

// waitTitle reads the session's snapshot until its title is want (for at
// most 3 s: tab capture marks the title for a moment while it starts).
func waitTitle(ctx context.Context, t *testing.T, a *harness.Appliance, id, want string) harness.SessionSnapshot {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		snap := session(ctx, t, a, id)
		if snap.Title == want || time.Now().After(deadline) {
			return snap
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestPanelFollowsPopup: a person clicks a target=_blank link in the
// panel; the session follows the new tab, and when that tab closes itself
// (window.close() on the person's next click) the opener is back.
func TestPanelFollowsPopup(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/opener", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>opener</title><body style="margin:0">
<a href="/closer" target="_blank" style="display:block;position:fixed;inset:0;background:#f00"></a>`)
	})
	mux.HandleFunc("/closer", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>closer</title><body style="margin:0">
<button onclick="window.close()" style="position:fixed;inset:0;width:100%;height:100%;border:0;background:#00f"></button>`)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a, s := startWithSession(t, srv.URL+"/opener")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	bctx := viewerBrowser(t)
	if err := a.OpenPanel(bctx, "admin", a.AdminPassword, "/?codec=vp8"); err != nil {
		t.Fatal(err)
	}
	// click sends a click through the panel's input; a click sent before
	// the panel heard of a tab switch comes back stale_page: send again.
	click := func() {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, err := chromedp.Run(bctx, chromedp.Evaluate[string](`(async () => {
				const d = await window.tabcast.send('pointer_down', {x: 0.5, y: 0.5, button: 'left', clickCount: 1});
				const u = await window.tabcast.send('pointer_up', {x: 0.5, y: 0.5, button: 'left', clickCount: 1});
				return (d ? d.status + ':' + (d.code || '') : 'none') + ',' + (u ? u.status + ':' + (u.code || '') : 'none') })()`, chromedp.EvalAwaitPromise))
			if err == nil && st == "completed:,completed:" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("click through the panel: %q %v", st, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if px, err := waitEval(bctx, centrePixel, near([3]int{255, 0, 0}), 20*time.Second); err != nil {
		t.Fatalf("opener not shown: %v (pixel %v)\n%s", err, px, a.LogTail(3000))
	}
	start := time.Now()
	click()
	if px, err := waitEval(bctx, centrePixel, near([3]int{0, 0, 255}), 10*time.Second); err != nil {
		t.Fatalf("the new tab is not shown: %v (pixel %v)\n%s", err, px, a.LogTail(3000))
	}
	t.Logf("target=_blank click to the new tab's picture: %v", time.Since(start).Round(time.Millisecond))
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if snap := session(ctx, t, a, s.ID); snap.Title == "closer" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("snapshot title %q on the new tab", snap.Title)
		}
	}
	// The panel lists the two tabs; a person picks one there.
	pick := func(title string, want [3]int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`(() => {
				const s = document.querySelector('[data-testid="tabs"]');
				const o = s && !s.hidden && [...s.options].find((o) => o.textContent === `+strconv.Quote(title)+`);
				if (!o) return false;
				s.value = o.value;
				s.dispatchEvent(new Event('change'));
				return true })()`))
			if err == nil && ok {
				break
			}
			if time.Now().After(deadline) {
				opts, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`[...document.querySelector('[data-testid="tabs"]').options].map((o) => o.textContent).join('|')`))
				t.Fatalf("the panel's tab list has no %q (options %q, err %v)", title, opts, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if px, err := waitEval(bctx, centrePixel, near(want), 10*time.Second); err != nil {
			t.Fatalf("picking tab %q in the panel: %v (pixel %v)\n%s", title, err, px, a.LogTail(3000))
		}
	}
	pick("opener", [3]int{255, 0, 0})
	pick("closer", [3]int{0, 0, 255})

	start = time.Now()
	click()
	if px, err := waitEval(bctx, centrePixel, near([3]int{255, 0, 0}), 10*time.Second); err != nil {
		t.Fatalf("the opener is not back after window.close(): %v (pixel %v)\n%s", err, px, a.LogTail(3000))
	}
	t.Logf("window.close() click to the opener's picture: %v", time.Since(start).Round(time.Millisecond))
	// Tab capture marks the title while it starts (the plugin picks the
	// tab by title): the snapshot may show the marker for up to a second.
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		snap := session(ctx, t, a, s.ID)
		if snap.Title == "opener" && snap.State == "ready" {
			if snap.CaptureFallback != "" {
				t.Errorf("the session fell back from %s capture: %s", snap.CaptureMode, snap.CaptureFallback)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot after the tab closed: %q %s", snap.Title, snap.State)
		}
	}
}
