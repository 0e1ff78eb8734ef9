package media

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// fakeEncoder is the encoder plugin's client as the pipeline uses it
// (Encoder, encoder.Stream), made of function fields, so the encode loop
// runs without Chromium or FFmpeg. A nil field does the plain thing.
type fakeEncoder struct {
	open func(ctx context.Context, p encoder.OpenParams) (encoder.Stream, error)
}

func (e *fakeEncoder) Open(ctx context.Context, p encoder.OpenParams) (encoder.Stream, error) {
	return e.open(ctx, p)
}

type fakeStream struct {
	opened  func() encoder.Opened
	encode  func(f encoder.InputFrame) (encoder.Result, error)
	control func(c encoder.Control) error
	close   func() error
}

var _ encoder.Stream = (*fakeStream)(nil)

func (s *fakeStream) Opened() encoder.Opened {
	if s.opened == nil {
		return encoder.Opened{Encoder: "fake", Codec: "vp8"}
	}
	return s.opened()
}

func (s *fakeStream) Encode(f encoder.InputFrame) (encoder.Result, error) { return s.encode(f) }

func (s *fakeStream) Control(c encoder.Control) error {
	if s.control == nil {
		return nil
	}
	return s.control(c)
}

func (s *fakeStream) Close() error {
	if s.close == nil {
		return nil
	}
	return s.close()
}

// encoded is one frame the fake encoder was given, and when.
type encoded struct {
	in     encoder.InputFrame
	params encoder.OpenParams // of the stream that encoded it
	at     time.Time
}

// recorder is a fakeEncoder whose streams answer every frame with one
// sample and report what they got on channels (buffered: a test reads
// what it needs).
type recorder struct {
	fakeEncoder
	frames   chan encoded
	opens    chan encoder.OpenParams
	controls chan encoder.Control
	// fail, when set, is the error Encode returns for the next frame.
	fail atomic.Pointer[error]
}

func newRecorder() *recorder {
	r := &recorder{frames: make(chan encoded, 1000), opens: make(chan encoder.OpenParams, 100), controls: make(chan encoder.Control, 100)}
	r.open = func(_ context.Context, p encoder.OpenParams) (encoder.Stream, error) {
		r.opens <- p
		return &fakeStream{
			encode: func(f encoder.InputFrame) (encoder.Result, error) {
				if err := r.fail.Swap(nil); err != nil {
					return encoder.Result{}, *err
				}
				r.frames <- encoded{in: f, params: p, at: time.Now()}
				return encoder.Result{Seq: f.Seq, Samples: []encoder.Sample{{Data: f.JPEG, Keyframe: f.ForceKeyframe}}}, nil
			},
			control: func(c encoder.Control) error { r.controls <- c; return nil },
		}, nil
	}
	return r
}

// fakeSource is the session as a pipeline sees it.
type fakeSource struct {
	mu        sync.Mutex
	video     Video
	w, h      int
	last      atomic.Pointer[capture.Frame]
	enc       Encoder
	failures  chan error // what the pipeline reported through fail
	pass      bool
	changed   chan struct{}
	controls  chan capture.StreamControl
	lowBWHits atomic.Int32
}

func newSource(v Video, enc Encoder) *fakeSource {
	return &fakeSource{
		video: v, w: 1280, h: 720, enc: enc, failures: make(chan error, 100),
		changed: make(chan struct{}), controls: make(chan capture.StreamControl, 100),
	}
}

func (s *fakeSource) Video() Video {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.video
}

func (s *fakeSource) Size() (int, int)          { return s.w, s.h }
func (s *fakeSource) LastFrame() *capture.Frame { return s.last.Load() }

func (s *fakeSource) Encoder(context.Context) (Encoder, func(error), error) {
	return s.enc, func(err error) { s.failures <- err }, nil
}

func (s *fakeSource) Passthrough(string) (bool, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pass, s.changed
}

// leavePassthrough is the session falling back to encoding.
func (s *fakeSource) leavePassthrough() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pass = false
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *fakeSource) TabControl(_ context.Context, c capture.StreamControl) { s.controls <- c }
func (s *fakeSource) LowBandwidth()                                         { s.lowBWHits.Add(1) }

// capture is what the session's screencast callback does with a JPEG.
func (s *fakeSource) capture(p *Pipeline, data string) {
	f := &capture.Frame{Format: capture.FormatJPEG, Data: []byte(data), CaptureTime: time.Now()}
	s.last.Store(f)
	p.Put(f)
}
