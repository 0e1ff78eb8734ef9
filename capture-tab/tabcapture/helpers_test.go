package tabcapture

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/capture"
)

// animatedHTML changes a colour box and a counter on every animation frame.
const animatedHTML = `<!doctype html><html><head><title>anim</title></head><body style="margin:0;background:#fff;font:64px monospace">
<div id="box" style="width:640px;height:360px"></div><div id="n">0</div>
<script>
let i = 0;
function f() {
  i++;
  document.getElementById('box').style.background = 'hsl(' + (i * 7 % 360) + ',80%,50%)';
  document.getElementById('n').textContent = i;
  requestAnimationFrame(f);
}
requestAnimationFrame(f);
</script></body></html>`

// fixtures serves the animated page at / and at /other (a second page for
// navigation) on 127.0.0.1. Close it before the leak check.
func fixtures(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, animatedHTML)
	})
	mux.HandleFunc("/other", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, strings.Replace(animatedHTML, "#fff", "#000", 1))
	})
	srv := httptest.NewServer(mux)
	return srv
}

func launch(t *testing.T, flags []string) *browser.Browser {
	t.Helper()
	testenv.NeedsChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := browser.Launch(ctx, browser.Options{Headless: true, ExtraFlags: flags})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newPage(t *testing.T, b *browser.Browser, url string) *browser.Page {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, browser.PageOptions{URL: url, Width: 1280, Height: 720})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func targetOf(b *browser.Browser, p *browser.Page, session string) capture.Target {
	return capture.Target{SessionID: session, BrowserWSURL: b.WSURL(), TargetID: p.TargetID(), Width: 1280, Height: 720}
}

// ivf writes VP8 frames into an IVF file.
func ivf(t *testing.T, frames []capture.Frame) string {
	var buf bytes.Buffer
	hdr := make([]byte, 32)
	copy(hdr, "DKIF")
	binary.LittleEndian.PutUint16(hdr[6:], 32)
	copy(hdr[8:], "VP80")
	binary.LittleEndian.PutUint16(hdr[12:], uint16(frames[0].Width))
	binary.LittleEndian.PutUint16(hdr[14:], uint16(frames[0].Height))
	binary.LittleEndian.PutUint32(hdr[16:], 30)
	binary.LittleEndian.PutUint32(hdr[20:], 1)
	binary.LittleEndian.PutUint32(hdr[24:], uint32(len(frames)))
	buf.Write(hdr)
	for i, f := range frames {
		var fh [12]byte
		binary.LittleEndian.PutUint32(fh[:], uint32(len(f.Data)))
		binary.LittleEndian.PutUint64(fh[4:], uint64(i))
		buf.Write(fh[:])
		buf.Write(f.Data)
	}
	name := filepath.Join(t.TempDir(), "x.ivf")
	if err := os.WriteFile(name, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return name
}

// decode runs ffmpeg on the IVF and returns the number of decoded frames.
func decode(t *testing.T, name string) int {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", name, "-f", "null", "-").CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Fatalf("ffmpeg decode: %v\n%s", err, out)
	}
	out, err = exec.Command("ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", name).CombinedOutput()
	if err != nil {
		t.Fatalf("ffprobe: %v\n%s", err, out)
	}
	var n int
	fmt.Sscan(strings.TrimSpace(string(out)), &n)
	return n
}

// cpuTicks sums utime+stime (clock ticks) of the browser's process group.
func cpuTicks(pgid int) int64 {
	var sum int64
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(raw)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 13 {
			continue
		}
		var pg, ut, st int64
		fmt.Sscan(f[2], &pg)
		if int(pg) != pgid {
			continue
		}
		fmt.Sscan(f[11], &ut)
		fmt.Sscan(f[12], &st)
		sum += ut + st
	}
	return sum
}

// lastLuma decodes the frames and returns the mean luma (0-255) of the
// last decoded picture.
func lastLuma(t *testing.T, frames []capture.Frame) float64 {
	t.Helper()
	out, err := exec.Command("ffmpeg", "-v", "error", "-i", ivf(t, frames), "-vf", "scale=64:36",
		"-f", "rawvideo", "-pix_fmt", "gray", "-").Output()
	if err != nil || len(out) < 64*36 {
		t.Fatalf("ffmpeg raw decode: %v (%d bytes)", err, len(out))
	}
	var sum int
	for _, v := range out[len(out)-64*36:] {
		sum += int(v)
	}
	return float64(sum) / (64 * 36)
}
