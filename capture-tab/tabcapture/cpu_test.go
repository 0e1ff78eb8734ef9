package tabcapture

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/capture-cdp/screencast"
	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/capture"
)

// TestCPUVersusScreencast measures Chromium's CPU during 5 s of capture of
// the same animated page by tab capture (VP8, encoded by Chromium) and by
// the CDP screencast (JPEG; the core still has to encode those). It only
// fails when a capture delivers nothing; the figures are logged.
func TestCPUVersusScreencast(t *testing.T) {
	testenv.NeedsChromium(t)
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

	measure := func(name string, cp capture.Capturer) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var n, size atomic.Int64
		done := make(chan error, 1)
		go func() {
			done <- cp.Stream(ctx, targetOf(b, p, name), func(f capture.Frame) error {
				n.Add(1)
				size.Add(int64(len(f.Data)))
				return nil
			})
		}()
		waitFor(t, 8*time.Second, name+" frames", func() bool { return n.Load() > 0 })
		time.Sleep(time.Second)
		n0, s0, cpu0, t0 := n.Load(), size.Load(), cpuTicks(b.PID()), time.Now()
		time.Sleep(5 * time.Second)
		n1, s1, cpu1, el := n.Load(), size.Load(), cpuTicks(b.PID()), time.Since(t0)
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if n1 == n0 {
			t.Fatalf("%s: no frames in 5 s", name)
		}
		t.Logf("%-16s %5.1f fps, mean frame %6d B, Chromium CPU %.2f s in %v (%.0f%% of a core)",
			name, float64(n1-n0)/el.Seconds(), (s1-s0)/(n1-n0), float64(cpu1-cpu0)/100, el.Round(time.Millisecond),
			float64(cpu1-cpu0)/el.Seconds())
	}
	measure("tab-capture/vp8", c)
	sc := screencast.New(nil)
	measure("cdp-screencast", sc)
	_ = sc.Shutdown(context.Background())
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	p.Close(pctx)
	b.Close()
}
