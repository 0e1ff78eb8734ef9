package tabcapture

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/plugintest"
)

// TestThroughPluginProcess drives the real plugin binary the way the core
// does (go-plugin, gRPC, AutoMTLS): flags, stream, keyframe control.
func TestThroughPluginProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := fixtures(t)
	defer srv.Close()
	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/capture-tab", plugins.KindCapture, capture.PluginSets(nil))
	defer client.Kill()
	cc, ok := raw.(*capture.Client)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	info, err := cc.Info(ctx)
	if err != nil || info.Name != Name || info.Capabilities["format"] != "vp8" || info.Capabilities["transport"] != "tab-capture" {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	if err := cc.SetConfig(ctx, []byte(`{"codec": "av1"}`)); err == nil {
		t.Fatal("SetConfig accepted codec av1")
	}
	flags, err := cc.ChromiumFlags(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var extDir string
	for _, f := range flags {
		if v, ok := strings.CutPrefix(f, "--load-extension="); ok {
			extDir = v
		}
	}
	for _, want := range []string{"--disable-extensions-except=" + extDir, "--allowlisted-extension-id=" + ExtensionID,
		"--auto-accept-this-tab-capture", "--autoplay-policy=no-user-gesture-required"} {
		if extDir == "" || !strings.Contains(strings.Join(flags, " "), want) {
			t.Fatalf("flags %q lack %q", flags, want)
		}
	}
	b := launch(t, flags)
	defer b.Close()
	p := newPage(t, b, srv.URL+"/")

	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- cc.Stream(sctx, targetOf(b, p, "p1"), rec.send) }()
	waitFor(t, 8*time.Second, "frames through the plugin", func() bool { return rec.count() >= 10 })
	time.Sleep(500 * time.Millisecond)
	k0 := rec.count()
	if err := cc.Control(ctx, "p1", capture.StreamControl{Keyframe: true}); err != nil {
		t.Fatalf("Control: %v", err)
	}
	waitFor(t, time.Second, "a keyframe through the plugin", func() bool {
		fs, _ := rec.snapshot()
		for _, f := range fs[k0:] {
			if f.Keyframe {
				return true
			}
		}
		return false
	})
	scancel()
	if err := <-done; err != nil && status.Code(err) != codes.Canceled && !errors.Is(err, context.Canceled) {
		t.Fatalf("Stream: %v", err)
	}
	fs, _ := rec.snapshot()
	if !fs[0].Keyframe || fs[0].Format != capture.FormatVP8 {
		t.Fatalf("first frame: %+v", fs[0].Format)
	}
	t.Logf("%d frames through the plugin process", len(fs))
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	p.Close(pctx)
	b.Close()
	if err := cc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
}

// TestRebind: when the offscreen document dies the stream rebinds once and
// frames flow again; when it dies again Stream returns an error.
func TestRebind(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := fixtures(t)
	defer srv.Close()
	c := New(nil)
	defer c.Shutdown(context.Background())
	flags, err := c.ChromiumFlags(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	b := launch(t, flags)
	defer b.Close()
	p := newPage(t, b, srv.URL+"/")
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	rec := &recorder{}
	done := make(chan error, 1)
	go func() { done <- c.Stream(ctx, targetOf(b, p, "r1"), rec.send) }()
	waitFor(t, 8*time.Second, "the first frames", func() bool { return rec.count() >= 5 })

	conn, err := dialCDP(ctx, b.WSURL(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.close()
	kill := func() {
		ts, err := conn.targets(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ts {
			if strings.HasSuffix(x.URL, offscreenPath) {
				if err := conn.call(ctx, "", "Target.closeTarget", map[string]any{"targetId": x.TargetID}, nil); err != nil {
					t.Fatal(err)
				}
				return
			}
		}
		t.Fatal("no offscreen document")
	}
	kill()
	killed := time.Now()
	n := rec.count()
	waitFor(t, 10*time.Second, "frames after the rebind", func() bool {
		select {
		case err := <-done:
			t.Fatalf("Stream ended instead of rebinding: %v", err)
		default:
		}
		return rec.count() >= n+10
	})
	t.Logf("frames again %v after the offscreen document was closed", time.Since(killed).Round(time.Millisecond))
	kill()
	select {
	case err := <-done:
		t.Logf("Stream after the second loss: %v", err)
		if err == nil {
			t.Fatal("Stream returned nil after the second loss")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Stream did not end after the second loss")
	}
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	p.Close(pctx)
	b.Close()
}
