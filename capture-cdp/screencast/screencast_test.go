package screencast

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/jpeg"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

var chromium *testChromium

func TestMain(m *testing.M) {
	flag.Parse()
	if testenv.ShortSkipsChromium() {
		// -short (make test-unit): start no Chromium; the tests that need it
		// skip in newPage (or up front).
		os.Exit(m.Run())
	}
	var err error
	chromium, err = startChromium()
	if err != nil {
		fmt.Fprintln(os.Stderr, "start chromium:", err)
		os.Exit(1)
	}
	code := m.Run()
	chromium.close()
	os.Exit(code)
}

// received is a frame and when send saw it.
type received struct {
	f  capture.Frame
	at time.Time
}

type collector struct {
	mu     sync.Mutex
	frames []received
	delay  time.Duration
}

func (c *collector) send(f capture.Frame) error {
	c.mu.Lock()
	c.frames = append(c.frames, received{f, time.Now()})
	c.mu.Unlock()
	time.Sleep(c.delay)
	return nil
}

func (c *collector) snapshot() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.frames)
}

func targetOf(p *testPage, w, h int) capture.Target {
	return capture.Target{SessionID: "s1", BrowserWSURL: chromium.wsURL, TargetID: string(p.id), Width: w, Height: h}
}

// streamFor runs Stream for d and returns the frames and Stream's result.
func streamFor(t *testing.T, c *Capturer, tg capture.Target, d time.Duration, col *collector) []received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := c.Stream(ctx, tg, col.send); err != nil {
		t.Fatalf("Stream: %v", err)
	}
	return col.snapshot()
}

func ages(fr []received) (median, worst time.Duration) {
	var a []time.Duration
	for _, r := range fr {
		a = append(a, r.at.Sub(r.f.CaptureTime))
	}
	if len(a) == 0 {
		return 0, 0
	}
	slices.Sort(a)
	return a[len(a)/2], a[len(a)-1]
}

// streamUntil runs Stream until enough(frames so far) or max elapses.
func streamUntil(t *testing.T, c *Capturer, tg capture.Target, max time.Duration, col *collector, enough func([]received) bool) ([]received, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), max)
	defer cancel()
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- c.Stream(ctx, tg, col.send) }()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Stream: %v", err)
			}
			return col.snapshot(), time.Since(start)
		case <-tick.C:
			if enough(col.snapshot()) {
				el := time.Since(start)
				cancel()
				if err := <-done; err != nil {
					t.Fatalf("Stream: %v", err)
				}
				return col.snapshot(), el
			}
		}
	}
}

func TestStreamAnimatingPage(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	// About 2 s; on a loaded machine (CI running everything at once) allow
	// up to 6 s to reach the 20 frames.
	start := time.Now()
	fr, elapsed := streamUntil(t, New(nil), targetOf(p, 1280, 720), 6*time.Second, &collector{}, func(fr []received) bool {
		return len(fr) >= 20 && time.Since(start) >= 2*time.Second
	})
	if len(fr) < 20 {
		t.Fatalf("%d frames in %v, want >= 20", len(fr), elapsed)
	}
	var prev uint64
	for i, r := range fr {
		f := r.f
		if f.Format != capture.FormatJPEG {
			t.Fatalf("frame %d format %v", i, f.Format)
		}
		if f.Seq <= prev {
			t.Fatalf("frame %d seq %d after %d", i, f.Seq, prev)
		}
		prev = f.Seq
		if f.Width != 1280 || f.Height != 720 {
			t.Fatalf("frame %d is %dx%d, want 1280x720", i, f.Width, f.Height)
		}
		if age := r.at.Sub(f.CaptureTime); age < -time.Second || age > 5*time.Second {
			t.Fatalf("frame %d capture time %v is %v off the receipt", i, f.CaptureTime, age)
		}
	}
	// Decode a few for real.
	for _, i := range []int{0, len(fr) / 2, len(fr) - 1} {
		img, err := jpeg.Decode(bytes.NewReader(fr[i].f.Data))
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if b := img.Bounds(); b.Dx() != 1280 || b.Dy() != 720 {
			t.Fatalf("frame %d decodes to %v", i, b)
		}
	}
	med, worst := ages(fr)
	last := fr[len(fr)-1].f
	t.Logf("animating 1280x720: %d frames in %v = %.1f fps; frame age at receipt median %v, max %v; seq %d, dropped %d, ~%d KiB/frame",
		len(fr), elapsed.Round(time.Millisecond), float64(len(fr))/elapsed.Seconds(), med, worst, last.Seq, last.Dropped, len(last.Data)/1024)
}

func TestSlowConsumerDropsNotQueues(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	col := &collector{delay: 200 * time.Millisecond}
	fr := streamFor(t, New(nil), targetOf(p, 1280, 720), 3*time.Second, col)
	if len(fr) < 5 {
		t.Fatalf("%d frames, want >= 5", len(fr))
	}
	if len(fr) > 16 {
		t.Fatalf("%d frames in 3 s with a 200 ms consumer: send was not serialized", len(fr))
	}
	last := fr[len(fr)-1].f
	if last.Dropped == 0 {
		t.Fatalf("nothing dropped with a 200 ms consumer (seq %d, %d frames)", last.Seq, len(fr))
	}
	// Exact accounting: every frame Chromium sent up to a send was either
	// sent or replaced in the slot (and counted).
	for i, r := range fr {
		if r.f.Seq != uint64(i+1)+r.f.Dropped {
			t.Fatalf("frame %d: seq %d != %d sent + %d dropped", i, r.f.Seq, i+1, r.f.Dropped)
		}
	}
	// No queue: a slow consumer gets fresh frames. A queue would age them by
	// 200 ms per frame of backlog, seconds by the end; 1.2 s is a
	// generous bound for a loaded 2-core machine (typically 50-350 ms, up to
	// ~700 ms seen with -race at load 16).
	// The first frame is skipped: it can predate the stream by a page render.
	med, worst := ages(fr[1:])
	if worst > 1200*time.Millisecond {
		t.Fatalf("frame age at receipt: median %v, max %v; want < 1.2 s (frames are queueing)", med, worst)
	}
	t.Logf("slow consumer (200 ms/send): %d frames, dropped %d, seq %d; age at receipt median %v, max %v",
		len(fr), last.Dropped, last.Seq, med, worst)
}

// finalHTML animates for 40 frames, then turns green and stays still.
const finalHTML = `<!doctype html><html><body style="margin:0;background:#fff;font:64px monospace">
<div id="box" style="width:640px;height:360px"></div><div id="n">0</div>
<script>
let i = 0;
function f() {
  i++;
  document.getElementById('box').style.background = 'hsl(' + (i * 7 % 360) + ',80%,50%)';
  document.getElementById('n').textContent = i;
  if (i < 40) { requestAnimationFrame(f); return; }
  document.body.innerHTML = '';
  document.body.style.background = 'rgb(0,255,0)';
}
setTimeout(() => requestAnimationFrame(f), 300);
</script></body></html>`

// The last change before a page goes still must reach the viewer (Chromium
// drops frames beyond its in-flight limit unless told to keep the last one).
func TestLastChangeIsDelivered(t *testing.T) {
	p := chromium.newPage(t, finalHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	isGreen := func(r received) bool {
		img, err := jpeg.Decode(bytes.NewReader(r.f.Data))
		if err != nil {
			return false
		}
		cr, cg, cb, _ := img.At(640, 600).RGBA()
		return cr>>8 < 40 && cg>>8 > 210 && cb>>8 < 40
	}
	fr, el := streamUntil(t, New(nil), targetOf(p, 1280, 720), 10*time.Second, &collector{}, func(fr []received) bool {
		return len(fr) > 0 && isGreen(fr[len(fr)-1])
	})
	if len(fr) == 0 || !isGreen(fr[len(fr)-1]) {
		t.Fatalf("the final (green) state never arrived: %d frames in %v", len(fr), el)
	}
}

func TestStaticPageSendsNothingMore(t *testing.T) {
	p := chromium.newPage(t, staticHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	col := &collector{}
	done := make(chan error, 1)
	go func() { done <- New(nil).Stream(ctx, targetOf(p, 1280, 720), col.send) }()

	deadline := time.Now().Add(5 * time.Second)
	for len(col.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no first frame from a static page within 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the first paint settle
	before := len(col.snapshot())
	time.Sleep(time.Second)
	after := len(col.snapshot())
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Fatalf("static page: %d more frames in 1 s (had %d)", after-before, before)
	}
	t.Logf("static page: %d frame(s), then none for 1 s", after)
}

func TestCancelReturnsPromptly(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	ctx, cancel := context.WithCancel(context.Background())
	col := &collector{}
	done := make(chan error, 1)
	go func() { done <- New(nil).Stream(ctx, targetOf(p, 1280, 720), col.send) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(col.snapshot()) < 3 {
		if time.Now().After(deadline) {
			t.Fatal("no frames")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	start := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stream after cancel: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not return within 5 s of cancel")
	}
	n := len(col.snapshot())
	t.Logf("Stream returned %v after cancel", time.Since(start))
	time.Sleep(200 * time.Millisecond)
	if m := len(col.snapshot()); m != n {
		t.Fatalf("send called %d times after Stream returned", m-n)
	}
	// The page is the core's: it must still be there.
	var ok bool
	if err := chromedpEval(p, "document.getElementById('n') !== null", &ok); err != nil || !ok {
		t.Fatalf("page gone after the stream ended: %v", err)
	}
}

func chromedpEval(p *testPage, expr string, out *bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	yes := true
	res, err := cdp.Call(ctx, p.t, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: &yes})
	if err != nil {
		return err
	}
	return json.Unmarshal(res.Result.Value, out)
}

func TestShutdownEndsStreams(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	c := New(nil)
	col := &collector{}
	done := make(chan error, 1)
	go func() { done <- c.Stream(context.Background(), targetOf(p, 1280, 720), col.send) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(col.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no frames")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Stream after Shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not end on Shutdown")
	}
	if err := c.Stream(context.Background(), targetOf(p, 1280, 720), col.send); err == nil {
		t.Fatal("Stream after Shutdown: no error")
	}
	if err := c.Ping(context.Background()); err == nil {
		t.Fatal("Ping after Shutdown: no error")
	}
}

func TestTargetClosedIsAnError(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	col := &collector{}
	done := make(chan error, 1)
	go func() { done <- New(nil).Stream(context.Background(), targetOf(p, 1280, 720), col.send) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(col.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no frames")
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := cdp.Call(ctx, chromium.browser, target.CloseTarget, target.CloseTargetParams{TargetID: p.id}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Fatalf("Stream after the target closed = %v, want an error saying so", err)
		}
		t.Logf("closed target: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not notice the closed target")
	}
}

func TestTargetCrashIsAnError(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	col := &collector{}
	done := make(chan error, 1)
	go func() { done <- New(nil).Stream(context.Background(), targetOf(p, 1280, 720), col.send) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(col.snapshot()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no frames")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Page.crash never answers; a short deadline is enough to send it.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, _ = cdp.Call(ctx, p.t, page.Crash, cdp.Empty{})
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "crash") {
			t.Fatalf("Stream after a renderer crash = %v, want an error saying so", err)
		}
		t.Logf("crashed target: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Stream did not notice the crash")
	}
}

func TestConfigAppliesToFrames(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	c := New(nil)
	if err := c.SetConfig(context.Background(), []byte(`{"quality": 40, "maxWidth": 640, "maxHeight": 360, "everyNthFrame": 2}`)); err != nil {
		t.Fatal(err)
	}
	fr := streamFor(t, c, targetOf(p, 1280, 720), 1500*time.Millisecond, &collector{})
	if len(fr) < 5 {
		t.Fatalf("%d frames", len(fr))
	}
	for i, r := range fr {
		if r.f.Width != 640 || r.f.Height != 360 {
			t.Fatalf("frame %d is %dx%d, want 640x360", i, r.f.Width, r.f.Height)
		}
	}
	t.Logf("maxWidth 640, everyNthFrame 2: %d frames in 1.5 s, ~%d KiB/frame", len(fr), len(fr[len(fr)-1].f.Data)/1024)
}

func TestBadTargets(t *testing.T) {
	testenv.NeedsChromium(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	c := New(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	noop := func(capture.Frame) error { return nil }
	for name, tg := range map[string]capture.Target{
		"no target id":  {BrowserWSURL: chromium.wsURL},
		"not loopback":  {BrowserWSURL: "ws://10.1.2.3:9222/devtools/browser/x", TargetID: "T"},
		"not ws":        {BrowserWSURL: "http://127.0.0.1:9222/", TargetID: "T"},
		"hostname":      {BrowserWSURL: "ws://example.com:9222/devtools/browser/x", TargetID: "T"},
		"negative size": {BrowserWSURL: chromium.wsURL, TargetID: "T", Width: -1},
		"unknown id":    {BrowserWSURL: chromium.wsURL, TargetID: "0123456789ABCDEF0123456789ABCDEF"},
	} {
		if err := c.Stream(ctx, tg, noop); err == nil {
			t.Errorf("%s: Stream accepted %+v", name, tg)
		}
	}
}

func TestSendErrorEndsStream(t *testing.T) {
	p := chromium.newPage(t, animatedHTML, 1280, 720)
	defer p.close()
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	boom := errors.New("consumer gone")
	n := 0
	err := New(nil).Stream(context.Background(), targetOf(p, 1280, 720), func(capture.Frame) error {
		n++
		if n == 3 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || n != 3 {
		t.Fatalf("Stream = %v after %d sends, want the send error after 3", err, n)
	}
}

func TestConfig(t *testing.T) {
	c := New(nil)
	ctx := context.Background()
	for in, key := range map[string]string{
		`{"qualty": 50}`:           "qualty",
		`{"quality": 0}`:           "quality",
		`{"quality": 101}`:         "quality",
		`{"quality": "high"}`:      "quality",
		`{"everyNthFrame": 11}`:    "everyNthFrame",
		`{"everyNthFrame": 0}`:     "everyNthFrame",
		`{"maxWidth": 15}`:         "maxWidth",
		`{"maxWidth": 3841}`:       "maxWidth",
		`{"maxHeight": 2161}`:      "maxHeight",
		`{"maxHeight": -1}`:        "maxHeight",
		`{"maxWidth": 640.5}`:      "maxWidth",
		`{"jpeg": {"quality": 1}}`: "jpeg",
	} {
		err := c.SetConfig(ctx, []byte(in))
		ce, ok := base.AsConfigError(err)
		if !ok || ce.Key != key {
			t.Errorf("SetConfig(%s) = %v, want a ConfigError for %q", in, err, key)
		}
	}
	if c.Config() != DefaultConfig() {
		t.Errorf("a refused config changed the config: %+v", c.Config())
	}
	if err := c.SetConfig(ctx, []byte(`{"quality": 55, "maxWidth": 0, "maxHeight": 2160}`)); err != nil {
		t.Fatal(err)
	}
	if got := c.Config(); got != (Config{Quality: 55, EveryNthFrame: 1, MaxHeight: 2160}) {
		t.Errorf("config = %+v", got)
	}
	// Absent keys go back to defaults; an empty subtree is all defaults.
	for _, in := range []string{``, `{}`, `null`} {
		if err := c.SetConfig(ctx, []byte(in)); err != nil {
			t.Fatalf("SetConfig(%q): %v", in, err)
		}
		if c.Config() != DefaultConfig() {
			t.Errorf("SetConfig(%q) gave %+v", in, c.Config())
		}
	}

	sc, err := c.ConfigSchema(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(sc.JSONSchema, &schema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	props, _ := schema["properties"].(map[string]any)
	for _, k := range []string{"quality", "everyNthFrame", "maxWidth", "maxHeight"} {
		if props[k] == nil {
			t.Errorf("schema lacks %s", k)
		}
	}
	if err := c.SetConfig(ctx, sc.DefaultsJSON); err != nil {
		t.Errorf("the defaults are refused: %v", err)
	}
	var def Config
	if err := json.Unmarshal(sc.DefaultsJSON, &def); err != nil || def != DefaultConfig() {
		t.Errorf("defaults %s: %v", sc.DefaultsJSON, err)
	}

	info, err := c.Info(ctx)
	if err != nil || info.Name != "capture-cdp" || info.Kind != "capture" || info.APIVersion != 1 || info.Version != "0.1.0" || info.Capabilities["format"] != "jpeg" {
		t.Errorf("Info = %+v, %v", info, err)
	}
	if f, err := c.ChromiumFlags(ctx); f != nil || err != nil {
		t.Errorf("ChromiumFlags = %v, %v", f, err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Error(err)
	}
}
