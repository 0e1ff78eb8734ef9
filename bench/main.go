// Command bench measures Tabcast's media path on this machine and prints
// the figures beside a baseline measured in the same run: the same JPEG
// frames through the ffmpeg CLI with the same encoder settings. Figures are
// written to bench/results/<name>.json too. Nothing here passes or fails.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/tabcast/tabcast/test/harness"
	"github.com/tabcast/tabcast/test/viewer"
)

const animPage = `<!doctype html><title>bench</title><style>html,body{margin:0;height:100%;overflow:hidden}
#b{position:absolute;top:35%;width:240px;height:240px;background:#fc0;border-radius:20px}
#n{font:72px monospace;color:#fff;position:absolute;top:20px;left:20px}</style>
<body><div id=b></div><div id=n></div><script>
let i=0;function f(){i++;document.body.style.background='hsl('+(i*3%360)+',55%,32%)';
document.getElementById('b').style.left=(i*6%1040)+'px';document.getElementById('n').textContent='frame '+i;requestAnimationFrame(f)}f();
</script>`

type codecResult struct {
	Codec string `json:"codec"`
	// Capture is tab (the browser's own VP8, no re-encode) or cdp
	// (screencast JPEGs encoded by encoder-ffmpeg).
	Capture         string  `json:"capture"`
	Encoder         string  `json:"encoder"`
	DeliveredFPS    float64 `json:"deliveredFps"`
	FirstFrameMs    float64 `json:"firstFrameMs"`
	BitrateKbps     float64 `json:"bitrateKbps"`
	FrameAgeP50Ms   float64 `json:"frameAgeP50Ms"`
	FrameAgeP95Ms   float64 `json:"frameAgeP95Ms"`
	EncodeP50Ms     float64 `json:"encodeP50Ms"`
	EncodeP95Ms     float64 `json:"encodeP95Ms"`
	CoreCPUPercent  float64 `json:"corePluginsCpuPercentOfOneCore"`
	ChromiumCPU     float64 `json:"chromiumCpuPercentOfOneCore"`
	CoreMemMB       float64 `json:"corePluginsPeakPssMB"`
	ChromiumMemMB   float64 `json:"chromiumPeakPssMB"`
	OwnMsPerFrame   float64 `json:"ownEncodeCpuMsPerFrame,omitempty"`
	CLIMsPerFrame   float64 `json:"ffmpegCliCpuMsPerFrame,omitempty"`
	OwnToCLIPercent float64 `json:"ownToCliPercent,omitempty"`
	// A still page watched for stillWatch: what a viewer receives when
	// nothing moves.
	StillKbps float64 `json:"stillPageKbps"`
	StillFPS  float64 `json:"stillPageFps"`
	// CPUToCDPVP8 is this path's CPU (all processes) over the CDP + VP8 path's.
	CPUToCDPVP8 float64 `json:"cpuToCdpVp8,omitempty"`
}

// stillWatch is how long the still page is watched.
const stillWatch = 30 * time.Second

const stillPage = `<!doctype html><title>still</title><body style="margin:0;background:#234;color:#fff;font:40px sans-serif"><p style="margin:40px">A still page: nothing moves.</p>`

type report struct {
	Name      string         `json:"name"`
	When      time.Time      `json:"when"`
	Machine   string         `json:"machine"`
	Size      string         `json:"size"`
	TargetFPS int            `json:"targetFps"`
	Duration  string         `json:"duration"`
	Codecs    []codecResult  `json:"codecs"`
	Latency   *latencyReport `json:"latency,omitempty"`
	Sessions  *sessionReport `json:"sessions,omitempty"`
	Agent     *agentReport   `json:"agent,omitempty"`
	Turn      *turnReport    `json:"turn,omitempty"`
	Capped    *cappedReport  `json:"capped,omitempty"`
	CDP       *cdpReport     `json:"cdp,omitempty"`
}

func main() {
	name := flag.String("name", "media-720p", "result name: bench/results/<name>.json")
	dur := flag.Duration("for", 10*time.Second, "how long each codec is watched")
	only := flag.String("only", "", "run only this part: latency, agent, cdp, turn, capped, media or floor (the paint floor alone, printed) (writes bench/results/<part>.json)")
	flag.IntVar(&latencyClicks, "clicks", latencyClicks, "clicks measured per latency mode")
	flag.Parse()
	var err error
	switch *only {
	case "agent":
		err = agentOnly()
	case "cdp":
		err = cdpOnly()
	case "turn":
		err = turnOnly()
	case "latency":
		err = latencyOnly()
	case "media":
		err = run("media", *dur, true)
	case "capped":
		err = cappedOnly()
	case "floor":
		err = floorOnly()
	default:
		err = run(*name, *dur, false)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run is the whole bench, or with mediaOnly the capture paths alone (CPU,
// delivery, still page) without the latency, agent, relay and session parts.
func run(name string, dur time.Duration, mediaOnly bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/still" {
			fmt.Fprint(w, stillPage)
			return
		}
		fmt.Fprint(w, animPage)
	}))
	defer page.Close()
	tmp, err := os.MkdirTemp("", "tabcast-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	rep := report{Name: name, When: time.Now().UTC(), Machine: machine(),
		Size: "1280x720", TargetFPS: 24, Duration: dur.String()}
	// First, while no other appliance runs: its own appliance and browsers.
	if !mediaOnly {
		if rep.Latency, err = latencyBench(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: latency:", err)
		}
		if rep.Agent, err = agentBench(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: agent:", err)
		}
		if rep.CDP, err = cdpBench(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: cdp:", err)
		}
		if rep.Turn, err = turnBench(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "bench: turn:", err)
		}
	}
	// Tab capture first, on an appliance of its own (video.capture auto),
	// then the screencast paths on the one the session bench uses after.
	if r, err := tabCaptureMedia(ctx, page.URL, dur); err != nil {
		fmt.Fprintln(os.Stderr, "bench: tab capture:", err)
	} else {
		rep.Codecs = append(rep.Codecs, r)
	}
	a, err := harness.Start(ctx, tmp, "browser.startURL="+page.URL, "video.fps=24", "video.bitrateKbps=2500", "input.allowLoopbackHosts=127.0.0.1", "video.capture=cdp")
	if err != nil {
		return err
	}
	defer a.Stop(15 * time.Second)
	sess, err := a.DefaultSession(ctx)
	if err != nil {
		return err
	}
	var cdpResults []codecResult
	for _, codec := range []string{"vp8", "h264"} {
		r, err := watch(ctx, a, sess.ID, codec, dur)
		if err != nil {
			return fmt.Errorf("%s: %w", codec, err)
		}
		r.Capture = "cdp"
		cdpResults = append(cdpResults, r)
	}
	if err := cliBaseline(ctx, page.URL, cdpResults); err != nil {
		fmt.Fprintln(os.Stderr, "bench: ffmpeg CLI baseline:", err)
	}
	if err := stillBitrates(ctx, a, sess.ID, page.URL, cdpResults); err != nil {
		fmt.Fprintln(os.Stderr, "bench: still page:", err)
	}
	rep.Codecs = append(rep.Codecs, cdpResults...)
	cpuRatios(rep.Codecs)
	if rep.Capped, err = cappedBench(ctx, page.URL); err != nil {
		fmt.Fprintln(os.Stderr, "bench: capped link:", err)
	}
	// Last: it kills Chromium on purpose (cold starts).
	if !mediaOnly {
		if rep.Sessions, err = sessionBench(ctx, a, page.URL); err != nil {
			fmt.Fprintln(os.Stderr, "bench: sessions:", err)
		}
	}
	printReport(rep)
	printCapped(rep.Capped)
	printSessions(rep.Sessions)
	out := filepath.Join("bench", "results", name+".json")
	b, _ := json.MarshalIndent(rep, "", "  ")
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return err
	}
	fmt.Println("written:", out)
	return nil
}

// watch runs one Go viewer for dur and samples the process tree meanwhile.
func watch(ctx context.Context, a *harness.Appliance, id, codec string, dur time.Duration) (codecResult, error) {
	res := codecResult{Codec: codec}
	var (
		mu         sync.Mutex
		firstAt    time.Time
		before     groups
		beforeTime time.Time
	)
	// The pipeline's own figures (frame age, encode time) are read from the
	// session snapshot shortly before the viewer leaves: the pipeline stops
	// with its last viewer.
	snapDone := make(chan struct{})
	var snap struct {
		Session harness.SessionSnapshot `json:"session"`
	}
	var snapErr error
	onFrame := func(f viewer.Frame) {
		mu.Lock()
		defer mu.Unlock()
		if firstAt.IsZero() {
			// Measure from the first frame: connection set-up is not steady state.
			firstAt = f.Arrived
			before, beforeTime = sampleTree(a.Cmd.Process.Pid), time.Now()
			time.AfterFunc(dur-500*time.Millisecond, func() {
				defer close(snapDone)
				snapErr = a.Do(ctx, http.MethodGet, "/api/v1/sessions/"+id, "", &snap)
			})
		}
	}
	wctx, cancel := context.WithTimeout(ctx, dur+30*time.Second)
	defer cancel()
	var peakCore, peakChromium int64
	stopPeak := make(chan struct{})
	peakDone := make(chan struct{})
	go func() {
		defer close(peakDone)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stopPeak:
				return
			case <-t.C:
				g := sampleTree(a.Cmd.Process.Pid)
				peakCore, peakChromium = max(peakCore, g.core.pss), max(peakChromium, g.chromium.pss)
			}
		}
	}()
	r, err := viewer.Watch(wctx, viewer.Options{BaseURL: a.URL, Token: a.Token, SessionID: id, Codec: codec, For: dur, OnFrame: onFrame})
	after, afterTime := sampleTree(a.Cmd.Process.Pid), time.Now()
	close(stopPeak)
	<-peakDone
	if err != nil {
		return res, err
	}
	mu.Lock()
	wall := afterTime.Sub(beforeTime)
	mu.Unlock()
	res.DeliveredFPS = float64(r.Frames-1) / dur.Seconds()
	res.FirstFrameMs = float64(r.FirstFrame.Microseconds()) / 1000
	res.BitrateKbps = float64(r.Bytes) * 8 / dur.Seconds() / 1000
	res.CoreCPUPercent = 100 * (after.core.cpu - before.core.cpu).Seconds() / wall.Seconds()
	res.ChromiumCPU = 100 * (after.chromium.cpu - before.chromium.cpu).Seconds() / wall.Seconds()
	res.CoreMemMB = float64(peakCore) / (1 << 20)
	res.ChromiumMemMB = float64(peakChromium) / (1 << 20)

	<-snapDone
	if snapErr != nil {
		return res, fmt.Errorf("session snapshot: %w", snapErr)
	}
	for _, p := range snap.Session.Pipelines {
		if p.Codec == codec {
			res.Encoder = p.Encoder
			res.FrameAgeP50Ms, res.FrameAgeP95Ms = p.FrameAge.P50, p.FrameAge.P95
			res.EncodeP50Ms, res.EncodeP95Ms = p.EncodeDuration.P50, p.EncodeDuration.P95
		}
	}
	return res, nil
}

func printReport(r report) {
	fmt.Printf("\nTabcast media bench — %s, %s, target %d fps, %s per codec (%s)\n\n", r.Size, r.Machine, r.TargetFPS, r.Duration, r.When.Format(time.RFC3339))
	row := func(label string, f func(codecResult) string) {
		fmt.Printf("  %-44s", label)
		for _, c := range r.Codecs {
			fmt.Printf(" %16s", f(c))
		}
		fmt.Println()
	}
	row("", func(c codecResult) string { return c.Codec + " (" + c.Capture + ")" })
	row("encoder", func(c codecResult) string { return c.Encoder })
	f1 := func(v float64) string { return fmt.Sprintf("%.1f", v) }
	row("delivered fps at the viewer", func(c codecResult) string { return f1(c.DeliveredFPS) })
	row("first frame after dial (ms)", func(c codecResult) string { return f1(c.FirstFrameMs) })
	row("bitrate at the viewer (kbit/s)", func(c codecResult) string { return fmt.Sprintf("%.0f", c.BitrateKbps) })
	row("frame age capture→sent p50 / p95 (ms)", func(c codecResult) string { return f1(c.FrameAgeP50Ms) + " / " + f1(c.FrameAgeP95Ms) })
	row("encode ms/frame p50 / p95 (wall)", func(c codecResult) string { return f1(c.EncodeP50Ms) + " / " + f1(c.EncodeP95Ms) })
	row("CPU % of one core: core+plugins", func(c codecResult) string { return f1(c.CoreCPUPercent) })
	row("CPU % of one core: Chromium", func(c codecResult) string { return f1(c.ChromiumCPU) })
	row("peak memory (PSS) MB: core+plugins", func(c codecResult) string { return f1(c.CoreMemMB) })
	row("peak memory (PSS) MB: Chromium", func(c codecResult) string { return f1(c.ChromiumMemMB) })
	row("encode CPU ms/frame: ours (in-process)", func(c codecResult) string { return fmt.Sprintf("%.2f", c.OwnMsPerFrame) })
	row("encode CPU ms/frame: ffmpeg CLI baseline", func(c codecResult) string { return fmt.Sprintf("%.2f", c.CLIMsPerFrame) })
	row("ours / CLI (%)", func(c codecResult) string { return fmt.Sprintf("%.0f", c.OwnToCLIPercent) })
	row("CPU (all processes) / CDP+VP8's", func(c codecResult) string { return fmt.Sprintf("%.2f×", c.CPUToCDPVP8) })
	row("still page, 30 s: kbit/s / fps", func(c codecResult) string { return fmt.Sprintf("%.1f / %.1f", c.StillKbps, c.StillFPS) })
	fmt.Println("  targets: tab capture CPU <= 0.7× the CDP path's; a still page <= 100 kbit/s")
	fmt.Println()
	printLatency(r.Latency)
}

// latencyOnly runs the input-to-picture part alone (direct and relayed,
// against the CDP-over-WebSocket baseline).
func latencyOnly() error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	r, err := latencyBench(ctx)
	if err != nil {
		return err
	}
	printLatency(r)
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join("bench", "results", "latency.json"), b, 0o644)
}

// cappedOnly runs the 1 Mbit/s link part alone.
func cappedOnly() error {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, animPage) }))
	defer page.Close()
	r, err := cappedBench(ctx, page.URL)
	printCapped(r)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join("bench", "results", "capped.json"), append(b, '\n'), 0o644)
}

// floorOnly measures the paint floor alone (the latency part includes it).
func floorOnly() error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, latencyPage) }))
	defer page.Close()
	f, err := measurePaintFloor(ctx, page.URL, latencyClicks)
	if err != nil {
		return err
	}
	printLatency(&latencyReport{Clicks: latencyClicks, Floor: f})
	return nil
}
