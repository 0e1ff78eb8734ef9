package ffenc

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins/encoder"
)

// TestSelfTestSoftware: the self-test passes on the software encoders, with
// the figures it reports.
func TestSelfTestSoftware(t *testing.T) {
	p := New(testLog)
	defer shutdownOK(t, p)
	for _, codec := range []string{encoder.CodecH264, encoder.CodecVP8} {
		r := SelfTest(context.Background(), p, HardwareOff, codec)
		t.Logf("%s: %+v", codec, r)
		want := map[string]string{encoder.CodecH264: EncoderX264, encoder.CodecVP8: EncoderVPX}[codec]
		if !r.OK || !r.Available || r.Encoder != want || r.Error != "" {
			t.Fatalf("%s: %+v", codec, r)
		}
		if r.Frames != selfTestFrames || r.Keyframes < 2 || r.MinCorr < minSelfTestCorr || r.Bytes == 0 {
			t.Fatalf("%s: figures %+v", codec, r)
		}
	}
}

// TestSelfTestPicturesTellFramesApart: the correlation check can fail — a
// frame decoded in place of its neighbour (or a blank one) is far below
// the bound, while a picture against itself is 1.
func TestSelfTestPicturesTellFramesApart(t *testing.T) {
	_, lumas, err := selfTestPictures()
	if err != nil {
		t.Fatal(err)
	}
	if c := correlation(lumas[3], lumas[3]); c < 0.999 {
		t.Fatalf("a picture against itself: %.3f", c)
	}
	worst := -1.0
	for i := 1; i < len(lumas); i++ {
		worst = max(worst, correlation(lumas[i], lumas[i-1]))
	}
	if worst >= minSelfTestCorr-0.2 {
		t.Fatalf("neighbouring pictures correlate up to %.3f: a shifted frame would pass", worst)
	}
	if c := correlation(lumas[0], make([]byte, len(lumas[0]))); c != 0 {
		t.Fatalf("against a blank plane: %.3f", c)
	}
	t.Logf("neighbours correlate at most %.3f (bound %.2f)", worst, minSelfTestCorr)
}

// TestSelfTestCatchesFallback: an encoder that fails while encoding (the
// test fake, failing on its 6th frame) fails the self-test, naming the
// switch — the run-time fallback hides such a failure from viewers, the
// self-test must not.
func TestSelfTestCatchesFallback(t *testing.T) {
	fakeHWSetup(t, time.Hour)
	p := New(testLog)
	defer shutdownOK(t, p)
	r := SelfTest(context.Background(), p, HardwareAuto, encoder.CodecH264)
	t.Logf("%+v", r)
	if r.OK || !r.Available || r.Encoder != EncoderFakeHW || !strings.Contains(r.Error, "left "+EncoderFakeHW+" for "+EncoderX264) {
		t.Fatalf("%+v", r)
	}
}

// TestSelfTestUnavailable: no render node → unavailable (not a failure of
// the encoder) with the probe's reason; a node that is no VAAPI device →
// unavailable with FFmpeg's own error.
func TestSelfTestUnavailable(t *testing.T) {
	p := New(testLog)
	defer shutdownOK(t, p)
	p.renderNodes = filepath.Join(t.TempDir(), "renderD*")
	r := SelfTest(context.Background(), p, HardwareVAAPI, encoder.CodecH264)
	t.Logf("%+v", r)
	if r.OK || r.Available || !strings.Contains(r.Error, "no VAAPI render node") {
		t.Fatalf("%+v", r)
	}
}

// TestSelfTestOnDevice is the VAAPI integration test: it runs where a
// render node exists (the appliance image's smoke test runs the same
// self-test through `encoder-ffmpeg selftest`). A node whose driver cannot
// encode must be reported unavailable with the driver's own error, and auto
// must then pass on software; a node that probes ok must pass the whole
// self-test through the cgo shim (device and frames contexts, NV12 upload).
func TestSelfTestOnDevice(t *testing.T) {
	nodes, _ := filepath.Glob("/dev/dri/renderD*")
	if len(nodes) == 0 {
		t.Skip("no /dev/dri/renderD* on this machine: the VAAPI integration test runs where one exists (the image's smoke test)")
	}
	p := New(testLog)
	defer shutdownOK(t, p)
	probe := probeOf(t, p.probeResults(), EncoderVAAPI)
	r := SelfTest(context.Background(), p, HardwareVAAPI, encoder.CodecH264)
	t.Logf("render nodes %v; probe %+v; self-test %+v", nodes, probe, r)
	if probe.OK != r.Available {
		t.Fatalf("probe ok %v but self-test available %v: %+v", probe.OK, r.Available, r)
	}
	if probe.OK {
		if !r.OK || r.Encoder != EncoderVAAPI {
			t.Fatalf("VAAPI probes ok on %s but fails its self-test: %s", nodes[0], r.Error)
		}
		return
	}
	if strings.Contains(r.Error, "no VAAPI render node") || !strings.Contains(r.Error, "ffmpeg") && !strings.Contains(r.Error, "opening h264_vaapi") {
		t.Fatalf("unavailable without the driver's error: %q", r.Error)
	}
	if a := SelfTest(context.Background(), p, HardwareAuto, encoder.CodecH264); !a.OK || a.Encoder != EncoderX264 {
		t.Fatalf("auto with a VAAPI node that cannot encode: %+v", a)
	}
}
