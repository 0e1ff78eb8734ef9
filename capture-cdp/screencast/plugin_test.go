package screencast

import (
	"bytes"
	"context"
	"errors"
	"image/jpeg"
	"slices"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins/plugintest"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

// TestThroughPluginProcess builds the real plugin binary and drives it the
// way the core does: go-plugin, gRPC, AutoMTLS.
func TestThroughPluginProcess(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/capture-cdp", plugins.KindCapture, capture.PluginSets(nil))
	defer client.Kill()
	cc, ok := raw.(*capture.Client)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := cc.Info(ctx)
	if err != nil || info.Name != "capture-cdp" || info.Kind != "capture" || info.APIVersion != 1 || info.Capabilities["format"] != "jpeg" {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	err = cc.SetConfig(ctx, []byte(`{"quality": 60, "maxWidht": 640}`))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "maxWidht" {
		t.Fatalf("SetConfig with a typo = %v, want a ConfigError for maxWidht", err)
	}
	err = cc.SetConfig(ctx, []byte(`{"quality": 101}`))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "quality" {
		t.Fatalf("SetConfig out of range = %v, want a ConfigError for quality", err)
	}
	if err := cc.SetConfig(ctx, []byte(`{"quality": 60}`)); err != nil {
		t.Fatal(err)
	}
	if f, err := cc.ChromiumFlags(ctx); err != nil || len(f) != 0 {
		t.Fatalf("ChromiumFlags = %v, %v", f, err)
	}

	// About 2 s, up to 6 s on a loaded machine to get 10 frames.
	sctx, scancel := context.WithTimeout(ctx, 6*time.Second)
	defer scancel()
	var frames []capture.Frame
	var got []time.Time
	start := time.Now()
	err = cc.Stream(sctx, targetOf(p, 1280, 720), func(f capture.Frame) error {
		frames = append(frames, f)
		got = append(got, time.Now())
		if len(frames) >= 10 && time.Since(start) >= 2*time.Second {
			scancel()
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) && status.Code(err) != codes.DeadlineExceeded && status.Code(err) != codes.Canceled {
		t.Fatalf("Stream: %v", err)
	}
	if len(frames) < 10 {
		t.Fatalf("%d frames through the plugin in %v, want >= 10", len(frames), elapsed)
	}
	var prev uint64
	var ages []time.Duration
	for i, f := range frames {
		if f.Seq <= prev || f.Format != capture.FormatJPEG || f.Width != 1280 || f.Height != 720 {
			t.Fatalf("frame %d: seq %d (prev %d), %v %dx%d", i, f.Seq, prev, f.Format, f.Width, f.Height)
		}
		prev = f.Seq
		ages = append(ages, got[i].Sub(f.CaptureTime))
	}
	img, err := jpeg.Decode(bytes.NewReader(frames[len(frames)-1].Data))
	if err != nil || img.Bounds().Dx() != 1280 || img.Bounds().Dy() != 720 {
		t.Fatalf("last frame: %v %v", err, img.Bounds())
	}
	slices.Sort(ages)
	t.Logf("through the plugin process: %d frames in %v = %.1f fps; age at receipt median %v, max %v",
		len(frames), elapsed.Round(time.Millisecond), float64(len(frames))/elapsed.Seconds(), ages[len(ages)/2], ages[len(ages)-1])

	if err := cc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
}
