package ffenc

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/encoder"
	"github.com/tabcast/tabcast/plugins/plugintest"
)

// The fake hardware encoder of these tests fails on its frame failAfter+1.
const failAfter = 5

// fallbackFrameGap is the capture spacing of the frames these tests encode:
// a whole number of 90 kHz ticks, so every sample's duration must be it
// exactly when no frame is lost.
const fallbackFrameGap = 40 * time.Millisecond

// fakeHWSetup writes the fake's ok-file (the fake "device" is present) and
// sets FakeHWEnv for plugins created or started after it.
func fakeHWSetup(t *testing.T, reprobeEvery time.Duration) (okFile string) {
	t.Helper()
	okFile = filepath.Join(t.TempDir(), "fake-hw-ok")
	if err := os.WriteFile(okFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(FakeHWEnv, "fail-after=5,reprobe-every="+reprobeEvery.String()+",ok-file="+okFile)
	return okFile
}

func openedOn(t *testing.T, s encoder.Stream, want string, hardware bool) {
	t.Helper()
	if o := s.Opened(); o != (encoder.Opened{Encoder: want, Codec: encoder.CodecH264, Hardware: hardware}) {
		t.Fatalf("opened %+v, want %s (hardware %v)", o, want, hardware)
	}
}

// encodeThroughFallback encodes n frames on a stream opened on the fake
// hardware encoder and checks the fallback on frame failAfter: every input
// answered by exactly one sample, that frame's sample a libx264 keyframe,
// the switch reported on its result, no gap in the timestamps, and the
// whole sequence (w×h) decodable.
func encodeThroughFallback(t *testing.T, s encoder.Stream, frames []frame, w, h int, base time.Time, n int) {
	t.Helper()
	openedOn(t, s, EncoderFakeHW, true)
	var samples []encoder.Sample
	var fallbackTook, others time.Duration
	for i := range n {
		at := base.Add(time.Duration(i) * fallbackFrameGap)
		r, err := s.Encode(encoder.InputFrame{JPEG: frames[i%len(frames)].jpeg, CaptureTime: at, Seq: uint64(i)})
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if r.Seq != uint64(i) || len(r.Samples) != 1 {
			t.Fatalf("frame %d: seq %d, %d samples; want one sample per input", i, r.Seq, len(r.Samples))
		}
		smp := r.Samples[0]
		if !smp.CaptureTime.Equal(at) || smp.Duration != fallbackFrameGap {
			t.Fatalf("frame %d: capture %v duration %v, want %v and %v (a gap means a lost frame)", i, smp.CaptureTime, smp.Duration, at, fallbackFrameGap)
		}
		if smp.Keyframe != (i == 0 || i == failAfter) {
			t.Fatalf("frame %d: keyframe %v", i, smp.Keyframe)
		}
		if i == failAfter {
			fallbackTook = r.EncodeTime
			if r.Opened == nil {
				t.Fatalf("frame %d: the fallback is not reported on its result", i)
			}
			o := *r.Opened
			if o.Encoder != EncoderX264 || o.Codec != encoder.CodecH264 || o.Hardware || o.FallbackFrom != EncoderFakeHW ||
				!strings.Contains(o.FallbackReason, "injected after 5 frames") {
				t.Fatalf("frame %d: reported %+v", i, o)
			}
			if s.Opened() != o {
				t.Fatalf("stream says %+v, its result %+v", s.Opened(), o)
			}
			// An IDR with its parameter sets: decodable on its own.
			types, _ := nalTypes(t, smp.Data)
			if !bytes.Contains(types, []byte{5}) || !bytes.Contains(types, []byte{7}) || !bytes.Contains(types, []byte{8}) {
				t.Fatalf("fallback keyframe NAL types %v", types)
			}
		} else {
			if r.Opened != nil {
				t.Fatalf("frame %d: unexpected encoder change %+v", i, r.Opened)
			}
			others += r.EncodeTime
		}
		samples = append(samples, smp)
	}
	if o := s.Opened(); o.Encoder != EncoderX264 || o.FallbackFrom != EncoderFakeHW {
		t.Fatalf("after the fallback the stream says %+v", o)
	}
	if d := decodeSamples(t, encoder.CodecH264, samples); d.frames != n || d.width != w || d.height != h {
		t.Fatalf("decoded %+v, want %d frames of %dx%d", d, n, w, h)
	}
	t.Logf("%dx%d: the failing frame took %v (hardware error, close, libx264 open, keyframe), other frames %v on average",
		w, h, fallbackTook.Round(time.Microsecond), (others / time.Duration(n-1)).Round(time.Microsecond))
}

// probeOf returns name's probe, failing when there is none.
func probeOf(t *testing.T, probes []encoder.Probe, name string) encoder.Probe {
	t.Helper()
	for _, pr := range probes {
		if pr.Encoder == name {
			return pr
		}
	}
	t.Fatalf("no probe of %s in %+v", name, probes)
	return encoder.Probe{}
}

func shutdownOK(t *testing.T, p *Plugin) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Shutdown(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown did not return: a re-probe does not stop")
	}
}

func TestFakeHWHook(t *testing.T) {
	for _, v := range []string{"fail-after=3", "fail-after=1,reprobe-every=250ms,ok-file=/x"} {
		if _, err := parseFakeHW(v); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
	}
	for _, v := range []string{"", "on", "fail-after=0", "fail-after=x", "reprobe-every=1s", "fail-after=2,reprobe-every=-1s", "fail-after=2,colour=red"} {
		if _, err := parseFakeHW(v); err == nil {
			t.Fatalf("%q accepted", v)
		}
	}
	// A malformed hook is ignored: the plugin is what it is without it.
	t.Setenv(FakeHWEnv, "fail-after=0")
	if p := New(testLog); p.fakeHW != nil || p.reprobeEvery != DefaultReprobeEvery {
		t.Fatalf("malformed hook enabled the fake: %+v %v", p.fakeHW, p.reprobeEvery)
	}
	t.Setenv(FakeHWEnv, "fail-after=2")
	p := New(testLog)
	probes, _ := p.Capabilities(context.Background())
	if len(probes) != 6 || probes[0].Encoder != EncoderFakeHW || !probes[0].OK || !probes[0].Hardware || probes[0].Codec != encoder.CodecH264 {
		t.Fatalf("probes with the fake: %+v", probes)
	}
	// Explicit modes never take the fake; off is software.
	s := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180, Hardware: HardwareOff})
	openedOn(t, s, EncoderX264, false)
	if _, err := p.Open(context.Background(), encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180, Hardware: HardwareVAAPI}); errCode(err) != "open_failed" {
		t.Fatalf("vaapi with the fake enabled: %v", err)
	}
}

// TestHardwareFallback: a hardware encoder failing mid-stream hands the
// stream to libx264 without losing a frame, reports it on the result, and
// is marked failed for new streams until a re-probe passes.
func TestHardwareFallback(t *testing.T) {
	frames := smallFixtures(t)
	// Re-probes are far off here (TestHardwareFallbackPluginProcess runs
	// them): this test sees the failed state only, and Shutdown must stop
	// a re-probe that is still waiting.
	okFile := fakeHWSetup(t, time.Hour)
	p := New(testLog)
	op := encoder.OpenParams{Codec: encoder.CodecH264, Width: 640, Height: 360, FPS: 25, BitrateKbps: 800, KeyframeInterval: 2 * time.Second, Hardware: HardwareAuto}

	s := open(t, p, op)
	encodeThroughFallback(t, s, frames, 640, 360, time.Now(), 12)

	pr := probeOf(t, p.probeResults(), EncoderFakeHW)
	if pr.OK || !pr.Hardware || pr.Codec != encoder.CodecH264 || !strings.Contains(pr.Error, "failed at run time: sending a frame") ||
		!strings.Contains(pr.Error, "injected after 5 frames") {
		t.Fatalf("fake probe after the failure: %+v", pr)
	}
	info, _ := p.Info(context.Background())
	if info.Capabilities[EncoderFakeHW] != pr.Error {
		t.Fatalf("info capabilities %v", info.Capabilities)
	}
	// New streams take software until a re-probe passes.
	openedOn(t, open(t, p, op), EncoderX264, false)

	// A hardware encoder that cannot reopen for a new bitrate (the device
	// is gone) hands over the same way, on the frame after the control.
	p2 := New(testLog)
	s2 := open(t, p2, op)
	openedOn(t, s2, EncoderFakeHW, true)
	base := time.Now()
	encodeOK(t, s2, encoder.InputFrame{JPEG: frames[0].jpeg, CaptureTime: base})
	if err := os.Remove(okFile); err != nil {
		t.Fatal(err)
	}
	if err := s2.Control(encoder.Control{BitrateKbps: 600}); err != nil {
		t.Fatal(err)
	}
	r := encodeOK(t, s2, encoder.InputFrame{JPEG: frames[1].jpeg, CaptureTime: base.Add(fallbackFrameGap), Seq: 1})
	if len(r.Samples) != 1 || !r.Samples[0].Keyframe || r.Opened == nil || r.Opened.Encoder != EncoderX264 ||
		r.Opened.FallbackFrom != EncoderFakeHW || !strings.Contains(r.Opened.FallbackReason, "device gone") {
		t.Fatalf("after a failed reopen: %+v (opened %+v)", r, r.Opened)
	}
	if st := s2.(*stream); st.set.bitrateKbps != 600 || st.set.encoder != EncoderX264 {
		t.Fatalf("software took %+v, want the new bitrate", st.set)
	}
	if pr := probeOf(t, p2.probeResults(), EncoderFakeHW); pr.OK || !strings.Contains(pr.Error, "device gone") {
		t.Fatalf("fake probe after a failed reopen: %+v", pr)
	}
	// The device is back, but the stream stays on software.
	if err := os.WriteFile(okFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = encodeOK(t, s2, encoder.InputFrame{JPEG: frames[2].jpeg, CaptureTime: base.Add(2 * fallbackFrameGap), Seq: 2})
	if r.Opened != nil || s2.Opened().Encoder != EncoderX264 || r.Samples[0].Keyframe {
		t.Fatalf("frame after the fallback: %+v, stream %+v", r, s2.Opened())
	}

	shutdownOK(t, p)
	shutdownOK(t, p2)
}

// TestReprobeBounded: streams failing on the same hardware encoder share
// one re-probe loop, which probes at most once per interval and ends when
// a probe passes.
func TestReprobeBounded(t *testing.T) {
	frames := smallFixtures(t)
	const every = 100 * time.Millisecond
	okFile := fakeHWSetup(t, every)
	p := New(testLog)
	defer shutdownOK(t, p)
	op := encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180, FPS: 25, Hardware: HardwareAuto}
	var streams []encoder.Stream
	for range 3 {
		s := open(t, p, op)
		openedOn(t, s, EncoderFakeHW, true)
		streams = append(streams, s)
	}
	if err := os.Remove(okFile); err != nil {
		t.Fatal(err)
	}
	failedAt := time.Now()
	base := time.Now()
	for i := range failAfter + 1 {
		for _, s := range streams {
			r := encodeOK(t, s, encoder.InputFrame{JPEG: frames[i].jpeg, CaptureTime: base.Add(time.Duration(i) * fallbackFrameGap), Seq: uint64(i)})
			if (r.Opened != nil) != (i == failAfter) {
				t.Fatalf("frame %d: opened %+v", i, r.Opened)
			}
		}
	}
	health := func() hwHealth {
		p.mu.Lock()
		defer p.mu.Unlock()
		return *p.hw[EncoderFakeHW]
	}
	deadline := time.Now().Add(30 * time.Second)
	for health().reprobes < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("no re-probes: %+v", health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	h, elapsed := health(), time.Since(failedAt)
	// One loop for the three failures, waiting a whole interval before
	// each probe: never more probes than intervals elapsed.
	if h.failures != 3 || !h.reprobing || h.reprobes > int(elapsed/every) {
		t.Fatalf("after %v: %+v, want 3 failures and at most %d re-probes", elapsed, h, int(elapsed/every))
	}
	if pr := probeOf(t, p.probeResults(), EncoderFakeHW); pr.OK || !strings.Contains(pr.Error, "; re-probe: opening fake_hw_h264: device gone") {
		t.Fatalf("probe while the device is gone: %+v", pr)
	}
	if err := os.WriteFile(okFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for !probeOf(t, p.probeResults(), EncoderFakeHW).OK {
		if time.Now().After(deadline) {
			t.Fatalf("the fake never passed a re-probe: %+v", health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h := health(); h.reprobing {
		t.Fatalf("the re-probe loop goes on after passing: %+v", h)
	}
	openedOn(t, open(t, p, op), EncoderFakeHW, true)
}

// TestHardwareFallbackPluginProcess drives the fallback through the real
// plugin process as the core does, then the re-probe: failing while the
// fake device is gone, passing once it is back, and new streams on it
// again.
func TestHardwareFallbackPluginProcess(t *testing.T) {
	frames := fixtures(t)
	okFile := fakeHWSetup(t, 200*time.Millisecond)
	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/encoder-ffmpeg", plugins.KindEncoder, encoder.PluginSets(nil))
	defer client.Kill()
	enc := raw.(encoder.Encoder)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	probes, err := enc.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pr := probes[0]; pr.Encoder != EncoderFakeHW || !pr.OK || !pr.Hardware {
		t.Fatalf("the fake is not probed first and ok: %+v", probes)
	}
	op := encoder.OpenParams{Codec: encoder.CodecH264, Width: 1280, Height: 720, FPS: 25, BitrateKbps: 2000, KeyframeInterval: 2 * time.Second}
	s, err := enc.Open(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The "device" goes away: re-probes fail until it is back.
	if err := os.Remove(okFile); err != nil {
		t.Fatal(err)
	}
	base := time.Now()
	const n = 12
	encodeThroughFallback(t, s, frames, 1280, 720, base, n)

	probes, err = enc.Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if pr := probeOf(t, probes, EncoderFakeHW); pr.OK || !strings.Contains(pr.Error, "failed at run time") || !strings.Contains(pr.Error, "injected after 5 frames") {
		t.Fatalf("fake probe after the failure: %+v", pr)
	}
	s2, err := enc.Open(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	openedOn(t, s2, EncoderX264, false)
	_ = s2.Close()

	// Back: the next re-probe passes and new streams use it again.
	if err := os.WriteFile(okFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for {
		probes, err = enc.Capabilities(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if probeOf(t, probes, EncoderFakeHW).OK {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the fake never passed a re-probe: %+v", probeOf(t, probes, EncoderFakeHW))
		case <-time.After(50 * time.Millisecond):
		}
	}
	s3, err := enc.Open(ctx, op)
	if err != nil {
		t.Fatal(err)
	}
	openedOn(t, s3, EncoderFakeHW, true)
	if r, err := s3.Encode(encoder.InputFrame{JPEG: frames[0].jpeg, Seq: 1}); err != nil || len(r.Samples) != 1 || !r.Samples[0].Keyframe {
		t.Fatalf("a new stream on the recovered fake: %+v %v", r, err)
	}
	_ = s3.Close()
	// The stream that fell back stays on software.
	r, err := s.Encode(encoder.InputFrame{JPEG: frames[0].jpeg, CaptureTime: base.Add(n * fallbackFrameGap), Seq: n})
	if err != nil || r.Opened != nil || s.Opened().Encoder != EncoderX264 || s.Opened().FallbackFrom != EncoderFakeHW {
		t.Fatalf("the fallen-back stream after the recovery: %+v %v, opened %+v", r, err, s.Opened())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
	if !client.Exited() {
		t.Fatal("plugin process still running after Kill")
	}
}

// TestVAAPIOpenErrors: the cgo VAAPI shim fails cleanly without a device,
// whatever the render node is, and keeps no file descriptor or crash
// behind (its context is freed on every error path).
func TestVAAPIOpenErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "renderD128")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, encoder, device, want string }{
		{"missing node", EncoderVAAPI, filepath.Join(dir, "renderD129"), "opening h264_vaapi on " + filepath.Join(dir, "renderD129")},
		{"directory", EncoderVAAPI, dir, "opening h264_vaapi on " + dir},
		{"regular file", EncoderVAAPI, file, "opening h264_vaapi on " + file},
		{"not a device", EncoderVAAPI, "/dev/null", "opening h264_vaapi on /dev/null"},
		{"vp8 on a regular file", EncoderVAAPIVP8, file, "opening vp8_vaapi on " + file},
		{"unknown encoder", "h264_nonexistent", "/dev/null", "Encoder not found"},
	}
	fds := func() int {
		n := openFDs()
		if n < 0 {
			t.Fatal("cannot read /proc/self/fd")
		}
		return n
	}
	for _, tc := range cases {
		if _, err := openVAAPI(tc.encoder, tc.device, 320, 240, 24, timeBase, "bf=0"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%s: %v, want an error with %q", tc.name, err, tc.want)
		}
	}
	before := fds()
	for range 50 {
		for _, tc := range cases {
			if v, err := openVAAPI(tc.encoder, tc.device, 320, 240, 24, timeBase, "bf=0"); err == nil {
				v.close()
				t.Fatalf("%s: opened", tc.name)
			}
		}
	}
	if after := fds(); after > before {
		t.Fatalf("%d file descriptors before %d failed opens, %d after", before, 50*len(cases), after)
	}
}
