package ffenc

import (
	"context"
	"encoding/json"
	"github.com/tabcast/tabcast/plugins/plugintest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/encoder"
)

func TestHardwareProbe(t *testing.T) {
	p := New(testLog)
	probes, err := p.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pr := range probes {
		names = append(names, pr.Encoder)
		t.Logf("probe %+v", pr)
		if pr.OK == (pr.Error != "") || pr.Duration <= 0 {
			t.Fatalf("inconsistent probe %+v", pr)
		}
	}
	if strings.Join(names, ",") != "h264_vaapi,h264_nvenc,libx264,libvpx,vp8_vaapi" {
		t.Fatalf("probed %v", names)
	}
	if !probes[2].OK || !probes[3].OK || probes[2].Hardware || !probes[0].Hardware || !probes[1].Hardware || !probes[4].Hardware || probes[4].Codec != encoder.CodecVP8 {
		t.Fatalf("software encoders must probe ok: %+v", probes)
	}
	// Without a render node the VAAPI probe is not even tried; without an
	// NVIDIA device nvenc fails for real, with FFmpeg's own words.
	for _, i := range []int{0, 4} {
		if nodes, _ := filepath.Glob("/dev/dri/renderD*"); len(nodes) == 0 && (probes[i].OK || !strings.Contains(probes[i].Error, "no VAAPI render node")) {
			t.Fatalf("vaapi probe without a render node: %+v", probes[i])
		}
	}
	if _, err := os.Stat("/dev/nvidia0"); err != nil && (probes[1].OK || !strings.Contains(probes[1].Error, "ffmpeg:")) {
		t.Fatalf("nvenc probe without a GPU: %+v", probes[1])
	}
	info, err := p.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "encoder-ffmpeg" || info.Kind != "encoder" || info.APIVersion != 1 || info.Version != "0.1.0" || len(info.Capabilities) != 5 {
		t.Fatalf("info %+v", info)
	}
	for _, pr := range probes {
		want := pr.Error
		if pr.OK {
			want = "ok"
		}
		if info.Capabilities[pr.Encoder] != want {
			t.Fatalf("info capabilities %v disagree with probe %+v", info.Capabilities, pr)
		}
	}

	// auto takes the first hardware encoder that probed ok, else libx264.
	want := encoder.Opened{Encoder: EncoderX264, Codec: encoder.CodecH264}
	for _, pr := range probes[:2] {
		if pr.OK {
			want = encoder.Opened{Encoder: pr.Encoder, Codec: encoder.CodecH264, Hardware: true}
			break
		}
	}
	s := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 640, Height: 360, Hardware: HardwareAuto})
	if s.Opened() != want {
		t.Fatalf("auto opened %+v, want %+v", s.Opened(), want)
	}
	encodeOK(t, s, encoder.InputFrame{JPEG: smallFixtures(t)[0].jpeg})
	for i, hw := range []string{HardwareVAAPI, HardwareNVENC} {
		_, err := p.Open(context.Background(), encoder.OpenParams{Codec: encoder.CodecH264, Width: 640, Height: 360, Hardware: hw})
		if probes[i].OK != (err == nil) || (err != nil && errCode(err) != "open_failed") {
			t.Fatalf("hardware=%s: %v (probe %+v)", hw, err, probes[i])
		}
	}
	// VP8: vaapi only where vp8_vaapi probed ok, never nvenc; auto picks
	// vp8_vaapi or libvpx, never an H.264 encoder.
	if _, err := p.Open(context.Background(), encoder.OpenParams{Codec: encoder.CodecVP8, Width: 640, Height: 360, Hardware: HardwareVAAPI}); probes[4].OK != (err == nil) || (err != nil && errCode(err) != "open_failed") {
		t.Fatalf("vp8 on vaapi: %v (probe %+v)", err, probes[4])
	}
	if _, err := p.Open(context.Background(), encoder.OpenParams{Codec: encoder.CodecVP8, Width: 640, Height: 360, Hardware: HardwareNVENC}); errCode(err) != "open_failed" {
		t.Fatalf("vp8 on nvenc: %v", err)
	}
	s = open(t, p, encoder.OpenParams{Codec: encoder.CodecVP8, Width: 640, Height: 360, Hardware: HardwareAuto})
	wantVP8 := encoder.Opened{Encoder: EncoderVPX, Codec: encoder.CodecVP8}
	if probes[4].OK {
		wantVP8 = encoder.Opened{Encoder: EncoderVAAPIVP8, Codec: encoder.CodecVP8, Hardware: true}
	}
	if s.Opened() != wantVP8 {
		t.Fatalf("vp8 auto opened %+v, want %+v", s.Opened(), wantVP8)
	}
}

// TestVAAPIProbeFailsCleanly points the probe at a render node that is not
// one: the cgo VAAPI path runs and fails with FFmpeg's error, no crash.
func TestVAAPIProbeFailsCleanly(t *testing.T) {
	node := filepath.Join(t.TempDir(), "renderD128")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := New(testLog)
	p.renderNodes = filepath.Join(filepath.Dir(node), "renderD*")
	pr := p.probeOne(EncoderVAAPI, true)
	t.Logf("%+v", pr)
	if pr.OK || !strings.Contains(pr.Error, "opening h264_vaapi on "+node) {
		t.Fatalf("probe %+v", pr)
	}
	if _, err := openVAAPI(EncoderVAAPI, node, 320, 240, 24, timeBase, "bf=0"); err == nil {
		t.Fatal("VAAPI opened on a regular file")
	}
}

func TestConfig(t *testing.T) {
	p := New(testLog)
	for _, tc := range []struct{ json, key string }{
		{``, ""},
		{`{}`, ""},
		{`{"hardware":"off","threads":4,"h264Preset":"veryfast","vp8CpuUsed":-12}`, ""},
		{`{"bogus":1}`, "bogus"},
		{`{"threads":"two"}`, "threads"},
		{`{"threads":0}`, "threads"},
		{`{"threads":17}`, "threads"},
		{`{"hardware":"gpu"}`, "hardware"},
		{`{"hardware":1}`, "hardware"},
		{`{"h264Preset":"slow"}`, "h264Preset"},
		{`{"vp8CpuUsed":-3}`, "vp8CpuUsed"},
		{`{"vp8CpuUsed":-17}`, "vp8CpuUsed"},
	} {
		err := p.SetConfig(context.Background(), []byte(tc.json))
		ce, ok := base.AsConfigError(err)
		switch {
		case tc.key == "" && err != nil:
			t.Fatalf("%s: %v", tc.json, err)
		case tc.key != "" && (!ok || ce.Key != tc.key):
			t.Fatalf("%s: %v, want a ConfigError for %q", tc.json, err, tc.key)
		}
	}
	// Absent keys keep their defaults.
	if err := p.SetConfig(context.Background(), []byte(`{"threads":2}`)); err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Threads = 2
	if p.cfg != want {
		t.Fatalf("config %+v, want %+v", p.cfg, want)
	}
	sc, err := p.ConfigSchema(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Default any `json:"default"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(sc.JSONSchema, &schema); err != nil || len(schema.Properties) != 4 {
		t.Fatalf("schema %v: %s", err, sc.JSONSchema)
	}
	defaults, err := ParseConfig(sc.DefaultsJSON)
	if err != nil || defaults != DefaultConfig() {
		t.Fatalf("defaults %+v %v", defaults, err)
	}
	var m map[string]any
	_ = json.Unmarshal(sc.DefaultsJSON, &m)
	for k, v := range m {
		if d := schema.Properties[k].Default; d != v {
			t.Fatalf("schema default of %s is %v, defaults JSON says %v", k, d, v)
		}
	}
	// The config reaches new streams.
	if err := p.SetConfig(context.Background(), []byte(`{"hardware":"off","h264Preset":"veryfast","threads":2}`)); err != nil {
		t.Fatal(err)
	}
	s := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180})
	if st := s.(*stream); st.set.h264Preset != "veryfast" || st.set.threads != 2 || st.Opened().Encoder != EncoderX264 {
		t.Fatalf("stream settings %+v", st.set)
	}
}

// TestRSSFlat encodes 3000 frames (H.264 and VP8 in turn, with bad frames
// and encoder reopens mixed in) and checks the resident set does not grow.
func TestRSSFlat(t *testing.T) {
	frames := smallFixtures(t)
	p := New(testLog)
	h := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 640, Height: 360, FPS: 25, BitrateKbps: 1000, Hardware: HardwareOff})
	v := open(t, p, encoder.OpenParams{Codec: encoder.CodecVP8, Width: 640, Height: 360, FPS: 25, BitrateKbps: 1000})
	start := time.Now()
	var warm, mid int64
	sample := func() int64 {
		// Go's own garbage out of the way: what is left is C's or ours.
		runtime.GC()
		debug.FreeOSMemory()
		return rss(t)
	}
	for i := range 3000 {
		s := h
		if i%2 == 1 {
			s = v
		}
		at := start.Add(time.Duration(i/2) * 40 * time.Millisecond)
		switch {
		case i%250 == 7:
			if _, err := s.Encode(encoder.InputFrame{JPEG: []byte("garbage"), CaptureTime: at}); errCode(err) != "bad_frame" {
				t.Fatalf("garbage: %v", err)
			}
		case i%500 == 11:
			if err := s.Control(encoder.Control{BitrateKbps: 800 + i%3*100}); err != nil {
				t.Fatal(err)
			}
		}
		encodeOK(t, s, encoder.InputFrame{JPEG: frames[i%len(frames)].jpeg, CaptureTime: at, Seq: uint64(i)})
		switch i + 1 {
		case 300:
			warm = sample()
		case 1650:
			mid = sample()
		}
	}
	end := sample()
	t.Logf("RSS %d KiB after 300 frames, %d after 1650, %d after 3000 (%+d KiB), %v; %s", warm, mid, end, end-warm, time.Since(start).Round(time.Millisecond), threads())
	// A leak grows with every frame, in both halves; a one-off (an allocator
	// arena opened by a busy machine's extra thread) does not.
	if end-warm > 10<<10 && mid-warm > 4<<10 && end-mid > 4<<10 {
		t.Fatalf("RSS grew %d KiB over 2700 frames (%+d, then %+d)", end-warm, mid-warm, end-mid)
	}
}

func threads() string {
	b, _ := os.ReadFile("/proc/self/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Threads:") {
			return l
		}
	}
	return ""
}

// rss is VmRSS in KiB after a full GC.
func rss(t *testing.T) int64 {
	runtime.GC()
	debug.FreeOSMemory()
	trimHeap()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			n, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestPluginProcess builds the plugin binary and drives it over go-plugin
// gRPC, as the host does.
func TestPluginProcess(t *testing.T) {
	frames := fixtures(t)
	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/encoder-ffmpeg", plugins.KindEncoder, encoder.PluginSets(nil))
	defer client.Kill()
	enc := raw.(encoder.Encoder)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	info, err := enc.Info(ctx)
	if err != nil || info.Name != "encoder-ffmpeg" || info.Capabilities["libx264"] != "ok" {
		t.Fatalf("info %+v %v", info, err)
	}
	err = enc.SetConfig(ctx, []byte(`{"threads":2,"colour":"blue"}`))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "colour" {
		t.Fatalf("set config with an unknown key: %v", err)
	}
	if err := enc.SetConfig(ctx, []byte(`{"hardware":"auto"}`)); err != nil {
		t.Fatal(err)
	}
	probes, err := enc.Capabilities(ctx)
	if err != nil || len(probes) != 5 {
		t.Fatalf("capabilities %+v %v", probes, err)
	}
	s, err := enc.Open(ctx, encoder.OpenParams{Codec: encoder.CodecH264, Width: 1280, Height: 720, FPS: 25, BitrateKbps: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if o := s.Opened(); o.Encoder != EncoderX264 && !o.Hardware {
		t.Fatalf("opened %+v", o)
	}
	var samples []encoder.Sample
	for i := range 10 {
		r, err := s.Encode(encoder.InputFrame{JPEG: frames[i].jpeg, CaptureTime: frames[i].at, Seq: uint64(i), ForceKeyframe: i == 6})
		if err != nil || r.Seq != uint64(i) || len(r.Samples) != 1 {
			t.Fatalf("frame %d: %+v %v", i, r, err)
		}
		if k := r.Samples[0].Keyframe; !r.Samples[0].CaptureTime.Equal(frames[i].at) || k != (i == 0 || i == 6) {
			t.Fatalf("frame %d: sample capture %v keyframe %v", i, r.Samples[0].CaptureTime, r.Samples[0].Keyframe)
		}
		samples = append(samples, r.Samples...)
	}
	if _, err := s.Encode(encoder.InputFrame{JPEG: []byte("nope"), Seq: 10}); errCode(err) != "bad_frame" {
		t.Fatalf("garbage over gRPC: %v", err)
	}
	if _, err := enc.Open(ctx, encoder.OpenParams{Codec: "h265", Width: 640, Height: 360}); errCode(err) != "bad_request" {
		t.Fatalf("bad open over gRPC: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if d := decodeSamples(t, encoder.CodecH264, samples); d.frames != 10 || d.width != 1280 {
		t.Fatalf("decoded %+v", d)
	}
	if err := enc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
	if !client.Exited() {
		t.Fatal("plugin process still running after Kill")
	}
}
