package e2e

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/viewer"
)

// TestConfigReload: SIGHUP applies a new encoder bitrate and a capture
// plugin's config while a viewer watches (no dropped viewer, no plugin
// restart); an invalid edit, in the file or in a plugin's subtree, is
// refused with the key named and the running config stays.
func TestConfigReload(t *testing.T) {
	p := pages(t)
	a, s := startWithSession(t, p.URL+"/anim", "video.capture=cdp")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	done := make(chan viewer.Result, 1)
	go func() {
		r, err := viewer.Watch(ctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: s.ID, Codec: "vp8", For: 14 * time.Second})
		if err != nil {
			t.Errorf("viewer: %v", err)
		}
		done <- r
	}()
	target := func() int {
		for _, pl := range session(ctx, t, a, s.ID).Pipelines {
			if pl.Codec == "vp8" {
				return pl.TargetKbps
			}
		}
		return 0
	}
	waitTarget := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := target(); got != want; got = target() {
			if time.Now().After(deadline) {
				t.Fatalf("pipeline target %d kbit/s, want %d\n%s", got, want, a.LogTail(3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitTarget(2500)
	capturePID := pluginPID(a, "capture-cdp")

	reload := func(yaml string) {
		t.Helper()
		if err := os.WriteFile(a.ConfigFile, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := a.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	logged := func(what ...string) bool {
		for _, l := range strings.Split(a.LogTail(200000), "\n") {
			all := true
			for _, w := range what {
				all = all && strings.Contains(l, w)
			}
			if all {
				return true
			}
		}
		return false
	}
	waitLog := func(what ...string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !logged(what...) {
			if time.Now().After(deadline) {
				t.Fatalf("no log line with %q\n%s", what, a.LogTail(3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	// 1. A new bitrate and a new screencast quality.
	reload("video:\n  bitrateKbps: 800\nplugins:\n  config:\n    capture-cdp:\n      quality: 60\n")
	waitTarget(800)
	waitLog("config reloaded", "video.bitrateKbps", "plugins.config.capture-cdp")
	// 2. Out of range: refused, named; the target stays.
	reload("video:\n  bitrateKbps: 5\n")
	waitLog("config reload refused", "video.bitrateKbps")
	// 3. A subtree the plugin refuses: refused, named.
	reload("video:\n  bitrateKbps: 800\nplugins:\n  config:\n    capture-cdp:\n      quality: 500\n")
	waitLog("config reload refused", "plugins.config.capture-cdp", "quality")
	if got := target(); got != 800 {
		t.Errorf("after refused reloads the target is %d, want 800", got)
	}
	if pid := pluginPID(a, "capture-cdp"); pid != capturePID {
		t.Errorf("capture-cdp was restarted (pid %d → %d): a reload must reconfigure it live", capturePID, pid)
	}
	// 4. A key that needs a restart is reported, not taken.
	reload("video:\n  bitrateKbps: 800\n  codec: h264\nplugins:\n  config:\n    capture-cdp:\n      quality: 60\n")
	waitLog("config reloaded", "needsRestart", "video.codec")

	r := <-done
	t.Logf("viewer across four reloads: %d frames, longest gap %v", r.Frames, r.MaxGap.Round(time.Millisecond))
	if r.MaxGap > 2*time.Second {
		t.Errorf("the picture stopped for %v during the reloads", r.MaxGap)
	}
}
