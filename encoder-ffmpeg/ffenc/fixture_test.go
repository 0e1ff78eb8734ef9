package ffenc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/tabcast/tabcast/internal/testenv"
)

// frame is one screencast picture as Chromium sent it.
type frame struct {
	jpeg []byte
	at   time.Time
}

const fixtureFrames = 100

// fx holds the package run's fixtures: captured once, cached in a temp dir
// that TestMain removes.
var fx struct {
	once   sync.Once
	dir    string
	frames []frame
	small  []frame // the same pictures at 640x360
	err    error
}

// animatedPage is a busy but ordinary page: static text on a gradient, a
// box that moves and spins across it, and a block of text that changes on
// every animation frame, so the encoders get real motion and detail.
const animatedPage = `<!doctype html><html><head><style>
html,body{margin:0;width:1280px;height:720px;overflow:hidden;font:16px sans-serif}
body{background:linear-gradient(135deg,#1d3557,#457b9d 40%,#f1faee)}
p{margin:0 40px 12px;width:700px;color:#f1faee;line-height:1.4}
#box{position:absolute;left:0;top:380px;width:160px;height:160px;background:#ffb703;font:bold 28px sans-serif;
  display:flex;align-items:center;justify-content:center;animation:move 3s ease-in-out infinite alternate}
@keyframes move{from{transform:translateX(40px) rotate(0)}to{transform:translateX(1060px) rotate(360deg)}}
#txt{margin:20px 40px;width:560px;height:150px;color:#000;background:#f1faee;font:15px monospace;white-space:pre}
</style></head><body><div id="txt"></div><div id="box">tabcast</div>
<p>Tabcast streams isolated headless browser sessions to a web panel. Each session renders off-screen; the
appliance captures its frames, encodes them and sends them over WebRTC to whoever watches.</p>
<p>This page moves a box across static text and rewrites a block of characters on every animation frame,
which is what a busy dashboard or a page that is loading looks like to an encoder.</p>
<script>
let n=0;const t=document.getElementById('txt');
function tick(){n++;let s='frame '+n+'  '+new Date().toISOString()+'\n';
for(let r=0;r<4;r++){for(let c=0;c<48;c++){s+=String.fromCharCode(33+((n*7+r*61+c*13+(n*c*r))%90));}s+='\n';}
t.textContent=s;requestAnimationFrame(tick);}
requestAnimationFrame(tick);
</script></body></html>`

// fixtures returns the 100 screencast JPEGs, capturing them on first use.
func fixtures(t testing.TB) []frame {
	t.Helper()
	testenv.NeedsChromium(t) // the frames are a real Chromium's screencast
	fx.once.Do(func() { fx.err = captureFixtures() })
	if fx.err != nil {
		t.Fatalf("screencast fixtures: %v", fx.err)
	}
	return fx.frames
}

// smallFixtures returns the same pictures at 640x360.
func smallFixtures(t testing.TB) []frame {
	fixtures(t)
	return fx.small
}

func captureFixtures() error {
	dir, err := os.MkdirTemp("", "ffenc-fixtures-")
	if err != nil {
		return err
	}
	fx.dir = dir
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	frames, err := screencast(ctx, filepath.Join(dir, "profile"), fixtureFrames)
	if err != nil {
		return err
	}
	for i, f := range frames {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("frame%03d.jpg", i)), f.jpeg, 0o600); err != nil {
			return err
		}
		small, err := halve(f.jpeg)
		if err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		fx.small = append(fx.small, frame{jpeg: small, at: f.at})
	}
	fx.frames = frames
	return nil
}

// screencast runs a headless Chromium, screencasts the animated page and
// returns n frames. Chromium is killed before it returns.
func screencast(ctx context.Context, profile string, n int) (_ []frame, err error) {
	if err := os.MkdirAll(profile, 0o700); err != nil {
		return nil, err
	}
	args := []string{
		"--headless=new", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--user-data-dir=" + profile,
		"--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank",
	}
	if os.Geteuid() == 0 {
		args = append([]string{"--no-sandbox"}, args...)
	}
	var out bytes.Buffer
	cmd := exec.Command("/usr/lib/chromium/chromium", args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting chromium: %w", err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err != nil {
			err = fmt.Errorf("%w (chromium output: %.2000s)", err, out.String())
		}
	}()
	wsURL, err := devToolsURL(ctx, filepath.Join(profile, "DevToolsActivePort"))
	if err != nil {
		return nil, err
	}
	actx, acancel := remote.NewAllocator(ctx, wsURL, remote.NoModifyURL)
	defer acancel()
	cctx, ccancel := chromedp.NewContext(actx)
	defer ccancel()

	if _, err := chromedp.Call(cctx, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: 1280, Height: 720, DeviceScaleFactor: 1,
	}); err != nil {
		return nil, fmt.Errorf("device metrics: %w", err)
	}
	if err := chromedp.Do(cctx, chromedp.Navigate("data:text/html,"+url.PathEscape(animatedPage))); err != nil {
		return nil, fmt.Errorf("navigating: %w", err)
	}
	ectx, ecancel := context.WithCancel(cctx)
	defer ecancel()
	events := chromedp.Events(ectx, page.ScreencastFrame)
	q := int64(80)
	if _, err := chromedp.Call(cctx, page.StartScreencast, page.StartScreencastParams{
		Format: page.StartScreencastFormatJpeg, Quality: &q, MaxWidth: 1280, MaxHeight: 720,
	}); err != nil {
		return nil, fmt.Errorf("starting the screencast: %w", err)
	}
	var frames []frame
	for ev, err := range events {
		if err != nil {
			return nil, fmt.Errorf("screencast events: %w", err)
		}
		if _, err := chromedp.Call(cctx, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: ev.SessionID}); err != nil {
			return nil, fmt.Errorf("ack: %w", err)
		}
		at := time.Now()
		if ev.Metadata != nil && ev.Metadata.Timestamp > 0 {
			ts := float64(ev.Metadata.Timestamp)
			at = time.Unix(0, int64(ts*1e9))
		}
		if len(ev.Data) < 4 || ev.Data[0] != 0xff || ev.Data[1] != 0xd8 {
			return nil, errors.New("screencast frame is not a JPEG")
		}
		frames = append(frames, frame{jpeg: ev.Data, at: at})
		if len(frames) == n {
			break
		}
	}
	_, _ = chromedp.Call(cctx, page.StopScreencast, struct{}{})
	if len(frames) < n {
		return nil, fmt.Errorf("got %d of %d frames", len(frames), n)
	}
	return frames, nil
}

// devToolsURL waits for Chromium to write its DevTools port file.
func devToolsURL(ctx context.Context, path string) (string, error) {
	for {
		b, err := os.ReadFile(path)
		if err == nil {
			sc := bufio.NewScanner(bytes.NewReader(b))
			var lines []string
			for sc.Scan() {
				lines = append(lines, strings.TrimSpace(sc.Text()))
			}
			if len(lines) >= 2 && lines[0] != "" {
				return "ws://127.0.0.1:" + lines[0] + lines[1], nil
			}
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("waiting for %s: %w", path, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// halve re-encodes a JPEG at half size (a 2x2 box filter on each plane).
func halve(b []byte) ([]byte, error) {
	img, err := jpeg.Decode(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	src, ok := img.(*image.YCbCr)
	if !ok || src.SubsampleRatio != image.YCbCrSubsampleRatio420 {
		return nil, fmt.Errorf("unexpected JPEG layout %T", img)
	}
	w, h := src.Rect.Dx()/2, src.Rect.Dy()/2
	dst := image.NewYCbCr(image.Rect(0, 0, w, h), image.YCbCrSubsampleRatio420)
	box := func(s []byte, ss, sw, sh int, d []byte, ds int) {
		for y := 0; y < sh/2; y++ {
			for x := 0; x < sw/2; x++ {
				i := 2*y*ss + 2*x
				d[y*ds+x] = byte((int(s[i]) + int(s[i+1]) + int(s[i+ss]) + int(s[i+ss+1]) + 2) / 4)
			}
		}
	}
	box(src.Y, src.YStride, src.Rect.Dx(), src.Rect.Dy(), dst.Y, dst.YStride)
	box(src.Cb, src.CStride, (src.Rect.Dx()+1)/2, (src.Rect.Dy()+1)/2, dst.Cb, dst.CStride)
	box(src.Cr, src.CStride, (src.Rect.Dx()+1)/2, (src.Rect.Dy()+1)/2, dst.Cr, dst.CStride)
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, &jpeg.Options{Quality: 80}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}
