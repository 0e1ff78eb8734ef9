package ffenc

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"math"
	"testing"
	"time"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// captureRate is the fixtures' mean frame rate, the fps a capture plugin
// delivering them would announce.
func captureRate(frames []frame) int {
	span := frames[len(frames)-1].at.Sub(frames[0].at)
	return min(MaxFPS, max(MinFPS, int(math.Round(float64(len(frames)-1)/span.Seconds()))))
}

func open(t testing.TB, p *Plugin, op encoder.OpenParams) encoder.Stream {
	t.Helper()
	s, err := p.Open(context.Background(), op)
	if err != nil {
		t.Fatalf("open %+v: %v", op, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func encodeOK(t testing.TB, s encoder.Stream, f encoder.InputFrame) encoder.Result {
	t.Helper()
	r, err := s.Encode(f)
	if err != nil {
		t.Fatalf("frame %d: %v", f.Seq, err)
	}
	return r
}

func errCode(err error) string {
	var ee *encoder.Error
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ""
}

// nalTypes lists the NAL unit types of an Annex-B access unit, failing
// when it does not start with a start code.
func nalTypes(t *testing.T, au []byte) (types []byte, sps []byte) {
	t.Helper()
	if !bytes.HasPrefix(au, []byte{0, 0, 0, 1}) && !bytes.HasPrefix(au, []byte{0, 0, 1}) {
		t.Fatalf("access unit does not start with an Annex-B start code: % x", au[:min(8, len(au))])
	}
	for i := 0; i+3 < len(au); i++ {
		if au[i] == 0 && au[i+1] == 0 && au[i+2] == 1 {
			nal := au[i+3:]
			types = append(types, nal[0]&0x1f)
			if nal[0]&0x1f == 7 && len(nal) >= 4 {
				sps = nal[:4]
			}
			i += 2
		}
	}
	return types, sps
}

func TestEncodeScreencast(t *testing.T) {
	frames := fixtures(t)
	fps := captureRate(frames)
	const kbps, forced = 1500, 37
	for _, codec := range []string{encoder.CodecH264, encoder.CodecVP8} {
		t.Run(codec, func(t *testing.T) {
			p := New(testLog)
			s := open(t, p, encoder.OpenParams{Codec: codec, Width: 1280, Height: 720, FPS: fps, BitrateKbps: kbps,
				KeyframeInterval: 2 * time.Second, Hardware: HardwareOff})
			want := EncoderX264
			if codec == encoder.CodecVP8 {
				want = EncoderVPX
			}
			if o := s.Opened(); o != (encoder.Opened{Encoder: want, Codec: codec}) {
				t.Fatalf("opened %+v", o)
			}
			var samples []encoder.Sample
			var keys []int
			total := 0
			lastKey := frames[0].at
			for i, f := range frames {
				r := encodeOK(t, s, encoder.InputFrame{JPEG: f.jpeg, CaptureTime: f.at, Seq: uint64(i), ForceKeyframe: i == forced})
				if r.Seq != uint64(i) || len(r.Samples) != 1 {
					t.Fatalf("frame %d: seq %d, %d samples; want one sample per frame (no delay)", i, r.Seq, len(r.Samples))
				}
				smp := r.Samples[0]
				if !smp.CaptureTime.Equal(f.at) || smp.Duration <= 0 {
					t.Fatalf("frame %d: capture %v duration %v", i, smp.CaptureTime, smp.Duration)
				}
				if i == 0 && smp.Duration != time.Second/time.Duration(fps) {
					t.Fatalf("first duration %v, want 1/fps", smp.Duration)
				}
				// Every 2 s of capture time, a keyframe.
				if i == 0 || f.at.Sub(lastKey) >= 2*time.Second {
					if !smp.Keyframe {
						t.Fatalf("frame %d, %v after the last keyframe, is not a keyframe", i, f.at.Sub(lastKey))
					}
				}
				if smp.Keyframe {
					keys = append(keys, i)
					lastKey = f.at
				}
				if codec == encoder.CodecVP8 {
					// VP8 frame tag: bit 0 clear on keyframes, which carry
					// the start code 9d 01 2a.
					isKey := smp.Data[0]&1 == 0
					if isKey != smp.Keyframe || (isKey && !bytes.Equal(smp.Data[3:6], []byte{0x9d, 0x01, 0x2a})) {
						t.Fatalf("frame %d: keyframe flag %v disagrees with the VP8 frame tag", i, smp.Keyframe)
					}
				} else {
					types, sps := nalTypes(t, smp.Data)
					hasIDR := bytes.IndexByte(types, 5) >= 0
					if hasIDR != smp.Keyframe {
						t.Fatalf("frame %d: keyframe flag %v, NAL types %v", i, smp.Keyframe, types)
					}
					if smp.Keyframe {
						if bytes.IndexByte(types, 7) < 0 || bytes.IndexByte(types, 8) < 0 {
							t.Fatalf("keyframe %d without SPS/PPS: NAL types %v", i, types)
						}
						// Constrained baseline: profile_idc 66 with
						// constraint_set1_flag.
						if sps[1] != 66 || sps[2]&0x40 == 0 {
							t.Fatalf("SPS profile %d constraints %08b, want constrained baseline", sps[1], sps[2])
						}
					}
				}
				total += len(smp.Data)
				samples = append(samples, smp)
			}
			if keys[0] != 0 || (!contains(keys, forced) && !contains(keys, forced+1)) {
				t.Fatalf("keyframes at %v, want 0 and the forced %d", keys, forced)
			}
			if contains(keys, forced) == false {
				t.Logf("forced keyframe came one frame late")
			}
			span := frames[len(frames)-1].at.Sub(frames[0].at) + time.Second/time.Duration(fps)
			got := float64(total*8) / span.Seconds() / 1000
			t.Logf("%s: %d frames at %d fps over %v, %.0f kbps for a %d kbps target, keyframes at %v",
				codec, len(frames), fps, span.Round(time.Millisecond), got, kbps, keys)
			// 1.7 s with two keyframes (the first and the forced one): VP8's
			// rate control evens out over ~2 s windows and overshoots a
			// short one by a third (2.0–2.1 Mbit/s for 1.5 measured with
			// Chromium 156's frames); a real miss is a factor, not that.
			if got < 0.6*kbps || got > 1.5*kbps {
				t.Fatalf("bitrate %.0f kbps, want %d -40%%/+50%%", got, kbps)
			}

			d := decodeSamples(t, codec, samples)
			if d.frames != len(frames) || d.width != 1280 || d.height != 720 {
				t.Fatalf("decoded %d frames of %dx%d, want %d of 1280x720", d.frames, d.width, d.height, len(frames))
			}
			// Limited range, and H.264 says so in its VUI.
			if codec == encoder.CodecH264 && (d.colorRange != astiav.ColorRangeMpeg || d.colorSpace != astiav.ColorSpaceSmpte170M) {
				t.Fatalf("H.264 colour range %v space %v, want limited BT.601", d.colorRange, d.colorSpace)
			}
		})
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// solidJPEG is a w×h JPEG of one grey level (Go writes full-range YCbCr,
// like Chromium).
func solidJPEG(t testing.TB, w, h int, y uint8) []byte {
	t.Helper()
	img := image.NewGray(image.Rect(0, 0, w, h))
	for i := range img.Pix {
		img.Pix[i] = y
	}
	rgba := image.NewRGBA(img.Rect)
	for yy := 0; yy < h; yy++ {
		for x := 0; x < w; x++ {
			rgba.Set(x, yy, color.Gray{Y: y})
		}
	}
	var b bytes.Buffer
	if err := jpeg.Encode(&b, rgba, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestColourRange checks the full → limited range conversion with black
// and white pictures.
func TestColourRange(t *testing.T) {
	p := New(testLog)
	for _, tc := range []struct {
		codec         string
		grey          uint8
		want          float64
		wantFullRange bool
	}{
		{encoder.CodecVP8, 255, 235, false},
		{encoder.CodecVP8, 0, 16, false},
		{encoder.CodecH264, 255, 235, false},
		{encoder.CodecH264, 0, 16, false},
	} {
		s := open(t, p, encoder.OpenParams{Codec: tc.codec, Width: 128, Height: 96, FPS: 10, BitrateKbps: 500, Hardware: HardwareOff})
		var samples []encoder.Sample
		at := time.Now()
		for i := range 3 {
			r := encodeOK(t, s, encoder.InputFrame{JPEG: solidJPEG(t, 128, 96, tc.grey), CaptureTime: at.Add(time.Duration(i) * 100 * time.Millisecond), Seq: uint64(i)})
			samples = append(samples, r.Samples...)
		}
		d := decodeSamples(t, tc.codec, samples)
		if math.Abs(d.lumaAvg-tc.want) > 3 {
			t.Fatalf("%s grey %d: decoded luma %.1f, want %.0f", tc.codec, tc.grey, d.lumaAvg, tc.want)
		}
		if (d.colorRange == astiav.ColorRangeJpeg) != tc.wantFullRange {
			t.Fatalf("%s: colour range %v", tc.codec, d.colorRange)
		}
	}
}

func TestBadFrame(t *testing.T) {
	frames := smallFixtures(t)
	full := fixtures(t)[0].jpeg
	p := New(testLog)
	// A header Go accepts but FFmpeg cannot decode: the scan is cut off
	// right after its header.
	sos := bytes.Index(full, []byte{0xff, 0xda})
	headerOnly := append(append([]byte(nil), full[:sos+14]...), 0xff, 0xd9)
	huge := solidJPEG(t, 16, 16, 128)
	if i := bytes.Index(huge, []byte{0xff, 0xc0}); i >= 0 {
		huge = append([]byte(nil), huge...)
		huge[i+5], huge[i+6], huge[i+7], huge[i+8] = 0x4e, 0x20, 0x4e, 0x20 // 20000x20000
	}
	for _, codec := range []string{encoder.CodecH264, encoder.CodecVP8} {
		s := open(t, p, encoder.OpenParams{Codec: codec, Width: 640, Height: 360, FPS: 25, BitrateKbps: 800, Hardware: HardwareOff})
		var samples []encoder.Sample
		at := time.Now()
		seq := uint64(0)
		next := func(j []byte) (encoder.Result, error) {
			seq++
			return s.Encode(encoder.InputFrame{JPEG: j, CaptureTime: at.Add(time.Duration(seq) * 40 * time.Millisecond), Seq: seq})
		}
		for i := range 5 {
			r, err := next(frames[i].jpeg)
			if err != nil {
				t.Fatal(err)
			}
			samples = append(samples, r.Samples...)
		}
		for name, bad := range map[string][]byte{
			"garbage": []byte("definitely not a jpeg, just some bytes"), "empty": nil,
			"truncated header": full[:100], "no scan data": headerOnly, "huge": huge,
		} {
			_, err := next(bad)
			if errCode(err) != "bad_frame" {
				t.Fatalf("%s %s: err %v, want bad_frame", codec, name, err)
			}
		}
		for i := 5; i < 10; i++ {
			r, err := next(frames[i].jpeg)
			if err != nil {
				t.Fatalf("%s: a good frame after bad ones: %v", codec, err)
			}
			if len(r.Samples) != 1 {
				t.Fatalf("%s: %d samples", codec, len(r.Samples))
			}
			samples = append(samples, r.Samples...)
		}
		if d := decodeSamples(t, codec, samples); d.frames != 10 || d.width != 640 {
			t.Fatalf("%s: decoded %+v", codec, d)
		}
	}
}

func TestControl(t *testing.T) {
	frames := smallFixtures(t)
	p := New(testLog)
	for _, codec := range []string{encoder.CodecH264, encoder.CodecVP8} {
		s := open(t, p, encoder.OpenParams{Codec: codec, Width: 640, Height: 360, FPS: 25, BitrateKbps: 3000,
			KeyframeInterval: time.Minute, Hardware: HardwareOff})
		at := frames[0].at
		var samples []encoder.Sample
		bytesIn := func(from, to int) int {
			n := 0
			for i := from; i < to; i++ {
				f := encoder.InputFrame{JPEG: frames[i].jpeg, CaptureTime: at.Add(time.Duration(i) * 40 * time.Millisecond), Seq: uint64(i)}
				r := encodeOK(t, s, f)
				if i == from && from > 0 {
					if want := from == 30 || from == 70; r.Samples[0].Keyframe != want {
						t.Fatalf("%s frame %d after a control: keyframe %v, want %v", codec, i, r.Samples[0].Keyframe, want)
					}
				}
				if i > 0 && i != from && r.Samples[0].Keyframe {
					t.Fatalf("%s: unexpected keyframe at %d", codec, i)
				}
				n += len(r.Samples[0].Data)
				samples = append(samples, r.Samples...)
			}
			return n
		}
		high := bytesIn(0, 30)
		for _, bad := range []encoder.Control{{BitrateKbps: 99}, {BitrateKbps: 20001}, {FPS: 61}, {FPS: -1}} {
			if err := s.Control(bad); errCode(err) != "bad_request" {
				t.Fatalf("%s control %+v: %v, want bad_request", codec, bad, err)
			}
		}
		if err := s.Control(encoder.Control{BitrateKbps: 300}); err != nil {
			t.Fatal(err)
		}
		low := bytesIn(30, 60)
		// Nothing changes: no reopen, no keyframe.
		if err := s.Control(encoder.Control{}); err != nil {
			t.Fatal(err)
		}
		bytesIn(60, 70)
		if err := s.Control(encoder.Control{FPS: 12}); err != nil {
			t.Fatal(err)
		}
		bytesIn(70, 80)
		t.Logf("%s: %d bytes/frame at 3000 kbps, %d at 300 kbps", codec, high/30, low/30)
		if low*2 > high {
			t.Fatalf("%s: lowering the bitrate tenfold left %d → %d bytes per frame", codec, high/30, low/30)
		}
		if d := decodeSamples(t, codec, samples); d.frames != 80 {
			t.Fatalf("%s: decoded %d frames", codec, d.frames)
		}
	}
}

func TestResolutionChange(t *testing.T) {
	full, small := fixtures(t), smallFixtures(t)
	odd := solidJPEG(t, 333, 187, 90)
	p := New(testLog)
	for _, codec := range []string{encoder.CodecH264, encoder.CodecVP8} {
		s := open(t, p, encoder.OpenParams{Codec: codec, Width: 640, Height: 360, FPS: 25, BitrateKbps: 800, Hardware: HardwareOff})
		var samples []encoder.Sample
		at := time.Now()
		inputs := [][]byte{}
		for i := range 5 {
			inputs = append(inputs, small[i].jpeg, full[i].jpeg)
		}
		inputs = append(inputs, odd, small[9].jpeg)
		for i, j := range inputs {
			r := encodeOK(t, s, encoder.InputFrame{JPEG: j, CaptureTime: at.Add(time.Duration(i) * 40 * time.Millisecond), Seq: uint64(i)})
			samples = append(samples, r.Samples...)
		}
		if d := decodeSamples(t, codec, samples); d.frames != len(inputs) || d.width != 640 || d.height != 360 {
			t.Fatalf("%s: decoded %+v, want %d frames of 640x360", codec, d, len(inputs))
		}
	}
}

// TestTimestamps feeds capture times that stall, repeat and go backwards
// (Chromium's screencast timestamps do): pts stay strictly increasing.
func TestTimestamps(t *testing.T) {
	frames := smallFixtures(t)
	p := New(testLog)
	s := open(t, p, encoder.OpenParams{Codec: encoder.CodecVP8, Width: 640, Height: 360, FPS: 20, BitrateKbps: 800, Hardware: HardwareOff})
	base := time.Now()
	offsets := []time.Duration{0, 50, 100, 100, 80, 5000, 5001, 5050} // ms
	var samples []encoder.Sample
	for i, off := range offsets {
		r := encodeOK(t, s, encoder.InputFrame{JPEG: frames[i].jpeg, CaptureTime: base.Add(off * time.Millisecond), Seq: uint64(i)})
		smp := r.Samples[0]
		if smp.Duration <= 0 {
			t.Fatalf("frame %d: duration %v", i, smp.Duration)
		}
		if i == 5 && (smp.Duration < 4*time.Second || !smp.Keyframe) {
			t.Fatalf("after a 5 s pause: duration %v keyframe %v; want the gap and a keyframe", smp.Duration, smp.Keyframe)
		}
		samples = append(samples, smp)
	}
	if d := decodeSamples(t, encoder.CodecVP8, samples); d.frames != len(offsets) {
		t.Fatalf("decoded %d frames", d.frames)
	}
}

func TestOpenParams(t *testing.T) {
	p := New(testLog)
	for _, op := range []encoder.OpenParams{
		{Codec: "av1", Width: 640, Height: 360},
		{Codec: encoder.CodecH264, Width: 641, Height: 360},
		{Codec: encoder.CodecH264, Width: 8, Height: 8},
		{Codec: encoder.CodecH264, Width: 640, Height: 360, FPS: 61},
		{Codec: encoder.CodecH264, Width: 640, Height: 360, BitrateKbps: 50},
		{Codec: encoder.CodecH264, Width: 640, Height: 360, Hardware: "gpu"},
	} {
		if _, err := p.Open(context.Background(), op); errCode(err) != "bad_request" {
			t.Fatalf("open %+v: %v, want bad_request", op, err)
		}
	}
	// Zero values take the defaults.
	s := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 640, Height: 360, Hardware: HardwareOff})
	st := s.(*stream)
	if st.set.fps != DefaultFPS || st.set.bitrateKbps != DefaultBitrateKbps || st.kfInt != DefaultKeyframeInterval || st.set.keyint != 48 {
		t.Fatalf("defaults not applied: %+v %v", st.set, st.kfInt)
	}
}

// TestEncoderOptionsConsumed: every option we pass is one the encoder
// knows (FFmpeg leaves unknown ones in the dictionary).
func TestEncoderOptionsConsumed(t *testing.T) {
	for _, set := range []settings{
		{encoder: EncoderX264, h264Preset: "ultrafast"},
		{encoder: EncoderX264, h264Preset: "superfast", threads: 4},
		{encoder: EncoderX264, h264Preset: "veryfast"},
		{encoder: EncoderVPX, vp8CPUUsed: -16},
		{encoder: EncoderVPX, vp8CPUUsed: -4, threads: 2},
	} {
		set.width, set.height, set.fps, set.bitrateKbps, set.keyint = 320, 240, 24, 500, 48
		set.threads = max(1, set.threads)
		enc, unused, err := openEncoder(set)
		if err != nil {
			t.Fatalf("%+v: %v", set, err)
		}
		enc.close()
		if len(unused) > 0 {
			t.Fatalf("%s: options not consumed: %v", set.encoder, unused)
		}
	}
}

func TestShutdownAndContext(t *testing.T) {
	frames := smallFixtures(t)
	p := New(testLog)
	ctx, cancel := context.WithCancel(context.Background())
	s1 := open(t, p, encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180, Hardware: HardwareOff})
	s2, err := p.Open(ctx, encoder.OpenParams{Codec: encoder.CodecVP8, Width: 320, Height: 180})
	if err != nil {
		t.Fatal(err)
	}
	encodeOK(t, s2, encoder.InputFrame{JPEG: frames[0].jpeg})
	if n := p.OpenStreams(); n != 2 {
		t.Fatalf("%d open streams", n)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for p.OpenStreams() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("a stream outlived its context")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := s2.Encode(encoder.InputFrame{JPEG: frames[0].jpeg}); err == nil {
		t.Fatal("encode on a closed stream succeeded")
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := p.OpenStreams(); n != 0 {
		t.Fatalf("%d streams open after shutdown", n)
	}
	if _, err := s1.Encode(encoder.InputFrame{JPEG: frames[0].jpeg}); err == nil {
		t.Fatal("encode after shutdown succeeded")
	}
	if _, err := p.Open(context.Background(), encoder.OpenParams{Codec: encoder.CodecH264, Width: 320, Height: 180}); errCode(err) != "open_failed" {
		t.Fatalf("open after shutdown: %v", err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
}
