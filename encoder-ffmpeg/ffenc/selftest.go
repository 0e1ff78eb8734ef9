package ffenc

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/jpeg"
	"math"
	"os"
	"time"

	"github.com/tabcast/tabcast/plugins/encoder"
)

// The self-test is the integration test of an encoder on the machine it
// runs on — the VAAPI device path above all, which no machine without a GPU
// can exercise: `encoder-ffmpeg selftest` on the appliance (its image's
// smoke test runs it), and TestSelfTestOnDevice where /dev/dri exists.
//
// It drives one stream the way the core does (screencast-like JPEGs in, the
// encoder's samples out, a keyframe requested mid-way), decodes the samples
// with libavcodec's own decoder and checks what a viewer would see: every
// frame decodes at the right size, the first and the requested frames are
// keyframes, each decoded picture is the picture that went in (luma
// correlation with its own source, not its neighbour's), the stream never
// left the encoder it opened on, and opening and closing it repeatedly
// leaks no file descriptors (device fds, DRM handles).

// Self-test picture and stream parameters: 360p like the smallest step the
// sessions use, long enough for the encoder's rate control to settle.
const (
	selfTestW, selfTestH = 640, 360
	selfTestFrames       = 24
	selfTestKeyAt        = 13 // a keyframe is requested on this frame
	selfTestCycles       = 3  // open/encode/close rounds for the fd check
	// minSelfTestCorr is the least luma correlation of a decoded frame with
	// its source; a frame shifted by one (or a broken upload: a green or
	// torn picture) correlates far lower — the source alternates its
	// checkerboard phase every frame.
	minSelfTestCorr = 0.9
)

// SelfTestResult is one encoder's self-test.
type SelfTestResult struct {
	Hardware string `json:"hardware"` // as asked: auto, off, vaapi, nvenc
	Codec    string `json:"codec"`
	Encoder  string `json:"encoder,omitempty"` // what opened
	// Available is false when the encoder could not be opened here (no
	// device, no driver): Error says why, in FFmpeg's words. That is not a
	// failure of the encoder, only of the machine's hardware.
	Available bool   `json:"available"`
	OK        bool   `json:"ok"`
	Error     string `json:"error,omitempty"`
	Frames    int    `json:"frames"`    // decoded, of selfTestFrames per cycle
	Keyframes int    `json:"keyframes"` // in the last cycle
	// MinCorr is the lowest luma correlation of a decoded frame with its
	// source over all cycles (0 before a frame decoded).
	MinCorr  float64       `json:"minCorrelation"`
	Bytes    int           `json:"bytes"` // encoded, last cycle
	Duration time.Duration `json:"durationNs"`
}

// SelfTest runs the self-test of the encoder hardware (auto, off, vaapi,
// nvenc) would open for codec, on p.
func SelfTest(ctx context.Context, p *Plugin, hardware, codec string) (r SelfTestResult) {
	r = SelfTestResult{Hardware: hardware, Codec: codec}
	start := time.Now()
	defer func() { r.Duration = time.Since(start) }()
	jpegs, lumas, err := selfTestPictures()
	if err != nil {
		r.Error = err.Error()
		return r
	}
	fdsBefore := openFDs()
	for cycle := 0; cycle < selfTestCycles; cycle++ {
		if err := ctx.Err(); err != nil {
			r.Error = err.Error()
			return r
		}
		if err := selfTestCycle(ctx, p, &r, jpegs, lumas); err != nil {
			r.Error = fmt.Sprintf("cycle %d: %v", cycle+1, err)
			return r
		}
		if !r.Available {
			return r
		}
	}
	// FFmpeg and the drivers may open a few descriptors once per process
	// (the first device open) and keep them; what must not happen is a
	// descriptor per stream.
	if after := openFDs(); fdsBefore >= 0 && after > fdsBefore+2 {
		r.Error = fmt.Sprintf("%d file descriptors open after %d streams, %d before: the stream leaks them", after, selfTestCycles, fdsBefore)
		return r
	}
	r.OK = true
	return r
}

func selfTestCycle(ctx context.Context, p *Plugin, r *SelfTestResult, jpegs [][]byte, lumas [][]byte) error {
	s, err := p.Open(ctx, encoder.OpenParams{Codec: r.Codec, Width: selfTestW, Height: selfTestH, FPS: 24,
		BitrateKbps: 1500, KeyframeInterval: time.Minute, Hardware: r.Hardware})
	if err != nil {
		if r.Encoder == "" { // first cycle: the machine has no such encoder
			r.Error = err.Error()
			return nil
		}
		return fmt.Errorf("reopening %s: %w", r.Encoder, err)
	}
	defer s.Close()
	opened := s.Opened()
	if r.Encoder != "" && opened.Encoder != r.Encoder {
		return fmt.Errorf("opened %s, the first cycle opened %s", opened.Encoder, r.Encoder)
	}
	r.Encoder, r.Available = opened.Encoder, true
	var samples []encoder.Sample
	keyOf := map[int]bool{} // frame → its sample was a keyframe
	base := time.Now()
	for i, j := range jpegs {
		res, err := s.Encode(encoder.InputFrame{JPEG: j, Seq: uint64(i + 1), ForceKeyframe: i == selfTestKeyAt,
			CaptureTime: base.Add(time.Duration(i) * time.Second / 24)})
		if err != nil {
			return fmt.Errorf("frame %d: %w", i, err)
		}
		if res.Opened != nil {
			return fmt.Errorf("frame %d: the stream left %s for %s: %s", i, opened.Encoder, res.Opened.Encoder, res.Opened.FallbackReason)
		}
		for _, smp := range res.Samples {
			keyOf[len(samples)] = smp.Keyframe
			samples = append(samples, smp)
		}
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("closing: %w", err)
	}
	r.Keyframes, r.Bytes = 0, 0
	for i, smp := range samples {
		r.Bytes += len(smp.Data)
		if keyOf[i] {
			r.Keyframes++
		}
	}
	// No B-frames and no frame dropping: one sample per frame, in order.
	if len(samples) != len(jpegs) {
		return fmt.Errorf("%d samples for %d frames", len(samples), len(jpegs))
	}
	if !keyOf[0] || !keyOf[selfTestKeyAt] {
		return fmt.Errorf("keyframes: first %v, requested (frame %d) %v", keyOf[0], selfTestKeyAt, keyOf[selfTestKeyAt])
	}
	n := 0
	var bad error
	d, err := decode(r.Codec, samples, func(luma []byte, w, h int) {
		defer func() { n++ }()
		if bad != nil || n >= len(lumas) {
			return
		}
		if w != selfTestW || h != selfTestH {
			bad = fmt.Errorf("frame %d decoded at %dx%d, want %dx%d", n, w, h, selfTestW, selfTestH)
			return
		}
		c := correlation(luma, lumas[n])
		if r.MinCorr == 0 || c < r.MinCorr {
			r.MinCorr = c
		}
		if c < minSelfTestCorr {
			prev := math.NaN()
			if n > 0 {
				prev = correlation(luma, lumas[n-1])
			}
			bad = fmt.Errorf("frame %d is not the picture that went in: luma correlation %.3f (with the frame before %.3f)", n, c, prev)
		}
	})
	if err != nil {
		return err
	}
	r.Frames = d.frames
	if bad != nil {
		return bad
	}
	if d.frames != len(jpegs) {
		return fmt.Errorf("decoded %d of %d frames", d.frames, len(jpegs))
	}
	return nil
}

// selfTestPictures makes the input: full-range 4:2:0 JPEGs like Chromium's
// screencast, and their luma planes. A horizontal gradient under a
// checkerboard whose phase flips every frame, and a bright box moving
// across: consecutive frames differ everywhere, so a decoded frame matches
// only its own source.
func selfTestPictures() (jpegs [][]byte, lumas [][]byte, err error) {
	for i := 0; i < selfTestFrames; i++ {
		img := image.NewYCbCr(image.Rect(0, 0, selfTestW, selfTestH), image.YCbCrSubsampleRatio420)
		boxX := 40 + i*20
		for y := 0; y < selfTestH; y++ {
			for x := 0; x < selfTestW; x++ {
				v := 30 + x*100/selfTestW
				if ((x/40)+(y/40)+i)%2 == 0 {
					v += 90
				}
				if x >= boxX && x < boxX+80 && y >= 140 && y < 220 {
					v = 245
				}
				img.Y[y*img.YStride+x] = uint8(v)
			}
		}
		for y := 0; y < selfTestH/2; y++ {
			for x := 0; x < selfTestW/2; x++ {
				img.Cb[y*img.CStride+x] = uint8(128 + (x-selfTestW/4)/4)
				img.Cr[y*img.CStride+x] = uint8(128 + (y-selfTestH/4)/4)
			}
		}
		var b bytes.Buffer
		if err := jpeg.Encode(&b, img, &jpeg.Options{Quality: 90}); err != nil {
			return nil, nil, fmt.Errorf("self-test picture: %w", err)
		}
		jpegs = append(jpegs, b.Bytes())
		lumas = append(lumas, img.Y)
	}
	return jpegs, lumas, nil
}

// correlation is the Pearson correlation of two equally sized planes:
// blind to the luma range (full or limited) the encoder converted to.
func correlation(a, b []byte) float64 {
	if len(a) != len(b) || len(a) == 0 {
		return 0
	}
	var sa, sb, saa, sbb, sab float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		sa, sb = sa+x, sb+y
		saa, sbb, sab = saa+x*x, sbb+y*y, sab+x*y
	}
	n := float64(len(a))
	cov := sab - sa*sb/n
	va, vb := saa-sa*sa/n, sbb-sb*sb/n
	if va <= 0 || vb <= 0 {
		return 0
	}
	return cov / math.Sqrt(va*vb)
}

// openFDs counts this process's open file descriptors (-1 if unknown).
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}
