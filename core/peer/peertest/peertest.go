// Package peertest makes real encoded video for tests: it runs the ffmpeg
// CLI to encode a short test pattern (VP8 in IVF, H.264 baseline Annex-B),
// splits it into frames and feeds them to a Pion sample track at a fixed
// rate. It also holds a Pion receiver that counts depacketized frames.
package peertest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"
	"github.com/pion/webrtc/v4/pkg/media/h264reader"
	"github.com/pion/webrtc/v4/pkg/media/ivfreader"
)

// Clip geometry and rate of the encoded test pattern.
const (
	Width  = 640
	Height = 360
	FPS    = 30
	GOP    = 30 // frames between keyframes
)

// Frame is one encoded access unit.
type Frame struct {
	Data     []byte
	Keyframe bool
}

// Clip is an encoded test pattern.
type Clip struct {
	Codec  string // "vp8" or "h264"
	Frames []Frame
}

// Encode runs ffmpeg to encode seconds of the lavfi testsrc pattern into dir
// and returns its frames. codec is "vp8" or "h264".
func Encode(ctx context.Context, dir, codec string, seconds int) (*Clip, error) {
	src := fmt.Sprintf("testsrc=size=%dx%d:rate=%d", Width, Height, FPS)
	args := []string{"-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i", src,
		"-t", fmt.Sprint(seconds), "-pix_fmt", "yuv420p", "-g", fmt.Sprint(GOP)}
	var out string
	switch codec {
	case "vp8":
		out = filepath.Join(dir, "clip.ivf")
		args = append(args, "-c:v", "libvpx", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "1M", out)
	case "h264":
		out = filepath.Join(dir, "clip.h264")
		// One slice per frame keeps access units simple; baseline has no B-frames.
		args = append(args, "-c:v", "libx264", "-profile:v", "baseline", "-tune", "zerolatency",
			"-x264-params", "slices=1:sliced-threads=0", "-threads", "1",
			"-bsf:v", "h264_mp4toannexb", "-f", "h264", out)
	default:
		return nil, fmt.Errorf("encode: unknown codec %q", codec)
	}
	cmd := exec.CommandContext(ctx, "ffmpeg", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("ffmpeg %s: %w: %s", codec, err, stderr.String())
	}
	data, err := os.ReadFile(out)
	if err != nil {
		return nil, fmt.Errorf("read clip: %w", err)
	}
	if codec == "vp8" {
		return splitIVF(data)
	}
	return splitAnnexB(data)
}

func splitIVF(data []byte) (*Clip, error) {
	r, _, err := ivfreader.NewWith(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("ivf header: %w", err)
	}
	c := &Clip{Codec: "vp8"}
	for {
		frame, _, err := r.ParseNextFrame()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("ivf frame: %w", err)
		}
		// VP8 frame tag: bit 0 clear means keyframe.
		c.Frames = append(c.Frames, Frame{Data: frame, Keyframe: len(frame) > 0 && frame[0]&1 == 0})
	}
	if len(c.Frames) == 0 {
		return nil, errors.New("ivf: no frames")
	}
	return c, nil
}

// splitAnnexB groups NAL units into access units: a new one starts at an
// AUD/SPS/PPS/SEI or at a slice whose first_mb_in_slice is 0, once the
// current unit holds a slice.
func splitAnnexB(data []byte) (*Clip, error) {
	r, err := h264reader.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("h264 reader: %w", err)
	}
	c := &Clip{Codec: "h264"}
	var cur bytes.Buffer
	hasSlice, key := false, false
	flush := func() {
		if hasSlice {
			c.Frames = append(c.Frames, Frame{Data: bytes.Clone(cur.Bytes()), Keyframe: key})
		}
		cur.Reset()
		hasSlice, key = false, false
	}
	for {
		nal, err := r.NextNAL()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("h264 nal: %w", err)
		}
		if len(nal.Data) == 0 {
			continue
		}
		t := nal.Data[0] & 0x1f
		switch {
		case t == 9 || t == 7 || t == 8 || t == 6:
			if hasSlice {
				flush()
			}
		case t == 1 || t == 5:
			firstMB0 := len(nal.Data) > 1 && nal.Data[1]&0x80 != 0
			if hasSlice && firstMB0 {
				flush()
			}
			hasSlice = true
			key = key || t == 5
		}
		cur.Write([]byte{0, 0, 0, 1})
		cur.Write(nal.Data)
	}
	flush()
	if len(c.Frames) == 0 {
		return nil, errors.New("h264: no frames")
	}
	return c, nil
}

// Capability returns the track codec for a clip codec.
func Capability(codec string) webrtc.RTPCodecCapability {
	if codec == "h264" {
		return webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeH264, ClockRate: 90000,
			SDPFmtpLine: "level-asymmetry-allowed=1;packetization-mode=1;profile-level-id=42e01f"}
	}
	return webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeVP8, ClockRate: 90000}
}

// Source plays a clip in a loop into a shared sample track at FPS, like a
// session's encoder would. RequestKeyframe makes the next frame the next
// keyframe of the clip (it skips ahead to it).
type Source struct {
	Track *webrtc.TrackLocalStaticSample
	clip  *Clip

	mu        sync.Mutex
	keyframes int
	skip      bool

	cancel context.CancelFunc
	done   chan struct{}
}

// Start begins playing clip; Stop ends it.
func Start(clip *Clip) (*Source, error) {
	track, err := webrtc.NewTrackLocalStaticSample(Capability(clip.Codec), "video", "tabcast-"+clip.Codec)
	if err != nil {
		return nil, fmt.Errorf("new track: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Source{Track: track, clip: clip, cancel: cancel, done: make(chan struct{})}
	go s.run(ctx)
	return s, nil
}

func (s *Source) run(ctx context.Context) {
	defer close(s.done)
	tick := time.NewTicker(time.Second / FPS)
	defer tick.Stop()
	i := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		if s.skip {
			s.skip = false
			for n := 0; n < len(s.clip.Frames) && !s.clip.Frames[i].Keyframe; n++ {
				i = (i + 1) % len(s.clip.Frames)
			}
		}
		s.mu.Unlock()
		f := s.clip.Frames[i]
		// Errors only mean no viewer is bound yet.
		_ = s.Track.WriteSample(media.Sample{Data: f.Data, Duration: time.Second / FPS})
		i = (i + 1) % len(s.clip.Frames)
	}
}

// RequestKeyframe counts the request and skips to the next keyframe.
func (s *Source) RequestKeyframe() {
	s.mu.Lock()
	s.keyframes++
	s.skip = true
	s.mu.Unlock()
}

// Keyframes returns how many keyframe requests arrived.
func (s *Source) Keyframes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keyframes
}

// Stop ends playback and waits for the feeding goroutine.
func (s *Source) Stop() {
	s.cancel()
	<-s.done
}

// EncodeAll makes one clip of seconds per codec in a temporary directory
// that is removed again (the clips are held in memory): what the test
// packages' TestMain functions need.
func EncodeAll(seconds int, codecs ...string) (map[string]*Clip, error) {
	dir, err := os.MkdirTemp("", "peertest-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out := map[string]*Clip{}
	for _, c := range codecs {
		clip, err := Encode(ctx, dir, c, seconds)
		if err != nil {
			return nil, err
		}
		out[c] = clip
	}
	return out, nil
}
