package ffenc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asticode/go-astiav"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// Limits of a stream.
const (
	MinBitrateKbps = 100
	MaxBitrateKbps = 20000
	MinFPS         = 1
	MaxFPS         = 60
	// maxJPEGSide refuses pictures whose decode alone would be a memory
	// hazard; screencasts are at most a few thousand pixels wide.
	maxJPEGSide = 8192
	// inputPadding is AV_INPUT_BUFFER_PADDING_SIZE: decoders read past the
	// data, so packets need that many zero bytes after it.
	inputPadding = 64
)

var zeroPadding [inputPadding]byte

// stream is one open encode stream: mjpeg decode, swscale when needed,
// encode. Encode and Control may be called from different goroutines.
type stream struct {
	mu  sync.Mutex
	log *slog.Logger
	// opened is read without mu: Opened must not wait for an encode.
	opened atomic.Pointer[encoder.Opened]
	// switched: opened changed since the last result, which must carry it.
	switched bool
	set      settings
	kfInt    time.Duration
	onDone   func() // unregisters the stream from its plugin
	// onHWFail reports a hardware encoder's failure to the plugin (nil for
	// streams opened without one).
	onHWFail func(name string, err error)
	stop     func() bool

	pending   *encoder.Control // applied on the next Encode
	forceNext bool

	dec      *astiav.CodecContext
	decFrame *astiav.Frame
	inPkt    *astiav.Packet
	pad      []byte

	sws            *astiav.SoftwareScaleContext
	swsW, swsH     int
	swsFmt         astiav.PixelFormat
	scaled         *astiav.Frame
	enc            videoEncoder
	started        bool
	first, lastKey time.Time
	lastPts        int64
	closed         bool
}

func newStream(log *slog.Logger, set settings, kfInt time.Duration) (*stream, error) {
	installFFmpegLog(nil) // streams opened without a Plugin (benchmarks)
	s := &stream{log: log, set: set, kfInt: kfInt}
	s.opened.Store(&encoder.Opened{Encoder: set.encoder, Codec: set.codec(), Hardware: set.hardware()})
	if err := s.openDecoder(); err != nil {
		s.free()
		return nil, err
	}
	if err := s.openEncoder(); err != nil {
		s.free()
		return nil, err
	}
	s.inPkt = astiav.AllocPacket()
	return s, nil
}

// closeWith closes the stream when ctx ends (a gone client) as well as on
// Close.
func (s *stream) closeWith(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() { _ = s.Close() })
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		stop()
		return
	}
	s.stop = stop
}

func (s *stream) openDecoder() error {
	codec := astiav.FindDecoder(astiav.CodecIDMjpeg)
	if codec == nil {
		return errors.New("no mjpeg decoder in this FFmpeg build")
	}
	dec := astiav.AllocCodecContext(codec)
	if dec == nil {
		return errors.New("allocating the mjpeg decoder failed")
	}
	dec.SetThreadCount(1)
	if err := dec.Open(codec, nil); err != nil {
		dec.Free()
		return fmt.Errorf("opening the mjpeg decoder: %w", err)
	}
	s.dec = dec
	if s.decFrame == nil {
		s.decFrame = astiav.AllocFrame()
	}
	return nil
}

// openEncoder (re)creates the encoder and the frame the scaler writes into,
// both at the stream's output size.
func (s *stream) openEncoder() error {
	enc, unused, err := openEncoder(s.set)
	if err != nil {
		return err
	}
	if len(unused) > 0 {
		s.log.Warn("encoder options not consumed", "encoder", s.set.encoder, "options", unused)
	}
	if s.enc != nil {
		s.enc.close()
	}
	s.enc = enc
	if s.scaled == nil {
		f := astiav.AllocFrame()
		f.SetWidth(s.set.width)
		f.SetHeight(s.set.height)
		f.SetPixelFormat(s.set.pixelFormat())
		f.SetColorRange(astiav.ColorRangeMpeg)
		if err := f.AllocBuffer(0); err != nil {
			f.Free()
			return fmt.Errorf("allocating the scaled frame: %w", err)
		}
		s.scaled = f
	}
	return nil
}

func (s *stream) Opened() encoder.Opened { return *s.opened.Load() }

// fallback replaces the failed hardware encoder with the software one for
// the rest of the stream and reports the failure to the plugin, which
// re-probes the hardware encoder for new streams. The caller encodes the
// next frame as a keyframe: it is the new encoder's first.
func (s *stream) fallback(hwErr error) error {
	from := s.set.encoder
	start := time.Now()
	if s.onHWFail != nil {
		s.onHWFail(from, hwErr)
	}
	if s.enc != nil {
		s.enc.close()
		s.enc = nil
	}
	sw := s.set.software()
	if sw.pixelFormat() != s.set.pixelFormat() {
		// VAAPI is fed NV12, libx264 yuv420p: the scaled frame and the
		// scaler are remade for the new format.
		if s.scaled != nil {
			s.scaled.Free()
			s.scaled = nil
		}
		if s.sws != nil {
			s.sws.Free()
			s.sws = nil
		}
	}
	s.set = sw
	if err := s.openEncoder(); err != nil {
		// Nothing left to encode with: the host reopens the stream.
		s.closeLocked()
		return fmt.Errorf("%s failed (%v) and %s did not open: %w", from, hwErr, sw.encoder, err)
	}
	s.opened.Store(&encoder.Opened{Encoder: sw.encoder, Codec: sw.codec(), FallbackFrom: from, FallbackReason: hwErr.Error()})
	s.switched = true
	s.log.Warn("hardware encoder failed, the stream continues in software", "from", from, "to", sw.encoder,
		"error", hwErr, "reopen", time.Since(start))
	return nil
}

func badFrame(format string, args ...any) error {
	return &encoder.Error{Code: "bad_frame", Message: fmt.Sprintf(format, args...)}
}

// Encode encodes one JPEG. A bad_frame error leaves the stream as it was.
func (s *stream) Encode(f encoder.InputFrame) (encoder.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	start := time.Now()
	if s.closed {
		return encoder.Result{}, &encoder.Error{Code: "encode_failed", Message: "stream closed"}
	}
	if err := s.decode(f.JPEG); err != nil {
		return encoder.Result{}, err
	}
	defer func() {
		if s.decFrame != nil { // nil once a failed fallback closed the stream
			s.decFrame.Unref()
		}
	}()

	if s.pending != nil {
		if err := s.applyControl(); err != nil {
			return encoder.Result{}, &encoder.Error{Code: "encode_failed", Message: err.Error()}
		}
	}
	res, err := s.encodeDecoded(f, start)
	if err != nil {
		return encoder.Result{}, &encoder.Error{Code: "encode_failed", Message: err.Error()}
	}
	if s.switched {
		o := s.Opened()
		res.Opened, s.switched = &o, false
	}
	res.EncodeTime = time.Since(start)
	return res, nil
}

// encodeDecoded encodes s.decFrame. When a hardware encoder fails on it,
// the stream goes over to software and the same frame is encoded again, as
// a keyframe, so the picture goes on with this very frame.
func (s *stream) encodeDecoded(f encoder.InputFrame, start time.Time) (encoder.Result, error) {
	src, err := s.prepare()
	if err != nil {
		return encoder.Result{}, err
	}

	capture := f.CaptureTime
	if capture.IsZero() {
		capture = start
	}
	var pts int64
	dur := time.Second / time.Duration(s.set.fps)
	if !s.started {
		s.first, s.lastKey = capture, capture
	} else {
		// Strictly increasing pts in the 90 kHz base, whatever the clock.
		pts = max(ticks(capture.Sub(s.first)), s.lastPts+1)
		dur = time.Duration(pts-s.lastPts) * time.Second / timeBase
	}
	key := !s.started || f.ForceKeyframe || s.forceNext || capture.Sub(s.lastKey) >= s.kfInt

	res := encoder.Result{Seq: f.Seq}
	gotKey := false
	emit := func(data []byte, k bool) {
		gotKey = gotKey || k
		res.Samples = append(res.Samples, encoder.Sample{Data: data, Keyframe: k, Duration: dur, CaptureTime: capture})
	}
	err = s.enc.encode(src, pts, key, emit)
	if err != nil && s.set.hardware() {
		// Whatever the failed encoder still emitted is dropped: the
		// software keyframe of this frame replaces it.
		res.Samples, gotKey, key = nil, false, true
		if err = s.fallback(err); err == nil {
			if src, err = s.prepare(); err == nil {
				err = s.enc.encode(src, pts, key, emit)
			}
		}
	}
	if err != nil {
		return encoder.Result{}, err
	}
	s.started, s.lastPts = true, pts
	if gotKey {
		s.lastKey = capture
	}
	// A requested keyframe stays requested until one comes out.
	s.forceNext = key && !gotKey
	return res, nil
}

// decode decodes the JPEG into s.decFrame.
func (s *stream) decode(b []byte) error {
	// A cheap header check first: it refuses non-JPEG input and pictures
	// too large to decode safely. Only features Go lacks (arithmetic
	// coding, 12-bit) are left for FFmpeg to judge.
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(b))
	var unsupported jpeg.UnsupportedError
	switch {
	case errors.As(err, &unsupported):
	case err != nil:
		return badFrame("not a JPEG: %v", err)
	case cfg.Width < 2 || cfg.Height < 2 || cfg.Width > maxJPEGSide || cfg.Height > maxJPEGSide:
		return badFrame("JPEG size %dx%d out of range", cfg.Width, cfg.Height)
	}
	s.pad = append(append(s.pad[:0], b...), zeroPadding[:]...)
	if err := s.inPkt.FromData(s.pad); err != nil {
		return &encoder.Error{Code: "encode_failed", Message: fmt.Sprintf("packet: %v", err)}
	}
	s.inPkt.SetSize(len(b))
	err = s.dec.SendPacket(s.inPkt)
	s.inPkt.Unref()
	if err == nil {
		err = s.dec.ReceiveFrame(s.decFrame)
	}
	if err == nil {
		w, h := s.decFrame.Width(), s.decFrame.Height()
		if w < 2 || h < 2 || w > maxJPEGSide || h > maxJPEGSide {
			s.decFrame.Unref()
			err = fmt.Errorf("decoded size %dx%d out of range", w, h)
		}
	}
	if err != nil {
		// A fresh decoder: no state of the bad picture survives.
		s.dec.Free()
		s.dec = nil
		if rerr := s.openDecoder(); rerr != nil {
			s.closeLocked()
			return &encoder.Error{Code: "encode_failed", Message: rerr.Error()}
		}
		return badFrame("decoding the JPEG: %v", err)
	}
	return nil
}

// prepare returns the frame to encode: the decoded picture itself when the
// encoder takes it as it is, else the picture scaled (size, pixel format,
// colour range) into the stream's reusable frame.
func (s *stream) prepare() (*astiav.Frame, error) {
	d := s.decFrame
	w, h, pf := d.Width(), d.Height(), d.PixelFormat()
	if pf == s.set.pixelFormat() && w == s.set.width && h == s.set.height {
		return d, nil
	}
	if s.sws == nil || w != s.swsW || h != s.swsH || pf != s.swsFmt {
		if s.sws != nil {
			s.sws.Free()
			s.sws = nil
			s.log.Info("input size changed", "from", fmt.Sprintf("%dx%d", s.swsW, s.swsH), "to", fmt.Sprintf("%dx%d", w, h), "encode", fmt.Sprintf("%dx%d", s.set.width, s.set.height))
		}
		// The source format says the range: the decoder gives yuvj420p
		// for full-range JPEGs, and from a yuvj format swscale converts
		// full range to the limited range of yuv420p / NV12.
		sws, err := astiav.CreateSoftwareScaleContext(w, h, pf, s.set.width, s.set.height, s.set.pixelFormat(),
			astiav.NewSoftwareScaleContextFlags(astiav.SoftwareScaleContextFlagBilinear))
		if err != nil {
			return nil, fmt.Errorf("scaler %dx%d %s: %w", w, h, pf, err)
		}
		s.sws, s.swsW, s.swsH, s.swsFmt = sws, w, h, pf
	}
	if err := makeWritable(s.scaled); err != nil {
		return nil, fmt.Errorf("scaled frame: %w", err)
	}
	if err := s.sws.ScaleFrame(d, s.scaled); err != nil {
		return nil, fmt.Errorf("scaling: %w", err)
	}
	return s.scaled, nil
}

// Control changes bitrate and frame rate from the next frame on. 0 keeps a
// value; values out of range are refused.
func (s *stream) Control(c encoder.Control) error {
	var refused error
	switch {
	case c.BitrateKbps != 0 && (c.BitrateKbps < MinBitrateKbps || c.BitrateKbps > MaxBitrateKbps):
		refused = badRequest("bitrate %d kbps not in [%d, %d]", c.BitrateKbps, MinBitrateKbps, MaxBitrateKbps)
	case c.FPS != 0 && (c.FPS < MinFPS || c.FPS > MaxFPS):
		refused = badRequest("fps %d not in [%d, %d]", c.FPS, MinFPS, MaxFPS)
	}
	if refused != nil {
		// Over gRPC a control gets no answer: the log is where it shows.
		s.log.Warn("control refused", "error", refused)
		return refused
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &encoder.Error{Code: "bad_request", Message: "stream closed"}
	}
	if s.pending == nil {
		s.pending = &encoder.Control{}
	}
	if c.BitrateKbps != 0 {
		s.pending.BitrateKbps = c.BitrateKbps
	}
	if c.FPS != 0 {
		s.pending.FPS = c.FPS
	}
	return nil
}

// applyControl reopens the encoder with the new targets: FFmpeg 5.1's
// libvpx wrapper cannot change its rate on the fly, and reopening treats
// every encoder alike. The new encoder starts with a keyframe.
func (s *stream) applyControl() error {
	c := *s.pending
	s.pending = nil
	next := s.set
	if c.BitrateKbps != 0 {
		next.bitrateKbps = c.BitrateKbps
	}
	if c.FPS != 0 {
		next.fps = c.FPS
		next.keyint = keyint(c.FPS, s.kfInt)
	}
	if next == s.set {
		return nil
	}
	prev := s.set
	s.set = next
	if err := s.openEncoder(); err != nil {
		if next.hardware() {
			// A hardware encoder that cannot reopen failed like one that
			// cannot encode; software takes the new targets.
			if ferr := s.fallback(fmt.Errorf("reopening: %w", err)); ferr != nil {
				return ferr
			}
			s.forceNext = true
			return nil
		}
		s.set = prev
		return fmt.Errorf("reopening the encoder: %w", err)
	}
	s.forceNext = true
	s.log.Info("encoder reconfigured", "encoder", next.encoder, "bitrateKbps", next.bitrateKbps, "fps", next.fps)
	return nil
}

// ticks converts d to the 90 kHz time base without overflowing on long
// streams.
func ticks(d time.Duration) int64 {
	return int64(d/time.Second)*timeBase + int64(d%time.Second)*timeBase/int64(time.Second)
}

func keyint(fps int, interval time.Duration) int {
	return max(1, int(int64(fps)*int64(interval)/int64(time.Second)))
}

// Close frees every FFmpeg object of the stream. It may be called again.
func (s *stream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closeLocked()
	return nil
}

func (s *stream) closeLocked() {
	if s.closed {
		return
	}
	s.closed = true
	if s.stop != nil {
		s.stop()
	}
	s.free()
	if s.onDone != nil {
		s.onDone()
	}
}

func (s *stream) free() {
	if s.enc != nil {
		s.enc.close()
		s.enc = nil
	}
	if s.sws != nil {
		s.sws.Free()
		s.sws = nil
	}
	for _, f := range []**astiav.Frame{&s.scaled, &s.decFrame} {
		if *f != nil {
			(*f).Free()
			*f = nil
		}
	}
	if s.inPkt != nil {
		s.inPkt.Free()
		s.inPkt = nil
	}
	if s.dec != nil {
		s.dec.Free()
		s.dec = nil
	}
}
