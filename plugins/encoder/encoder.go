// Package encoder is the contract of encoder plugins: JPEG pictures in,
// H.264 or VP8 samples out.
package encoder

import (
	"context"
	"fmt"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// APIVersions are the encoder API versions this SDK speaks, newest last.
var APIVersions = []int{1}

// Codec names.
const (
	CodecH264 = "h264"
	CodecVP8  = "vp8"
)

// Probe is the result of trying one FFmpeg encoder for real.
type Probe struct {
	Encoder  string
	Codec    string
	Hardware bool
	OK       bool
	Error    string
	Duration time.Duration
}

// OpenParams configure one encode stream.
type OpenParams struct {
	Codec            string
	Width, Height    int
	FPS              int
	BitrateKbps      int
	KeyframeInterval time.Duration
	// Hardware is auto, off, vaapi or nvenc.
	Hardware string
}

// Opened says which encoder a stream really uses.
type Opened struct {
	Encoder  string
	Codec    string
	Hardware bool
	// FallbackFrom is the hardware encoder the stream ran on until it
	// failed while encoding, after which the stream went over to software
	// (Encoder) for good; empty while the stream runs on the encoder it was
	// opened with.
	FallbackFrom string
	// FallbackReason is FallbackFrom's error.
	FallbackReason string
}

// InputFrame is one JPEG picture to encode.
type InputFrame struct {
	JPEG          []byte
	CaptureTime   time.Time
	ForceKeyframe bool
	Seq           uint64
}

// Sample is one encoded access unit (H.264) or frame (VP8).
type Sample struct {
	Data        []byte
	Keyframe    bool
	Duration    time.Duration
	CaptureTime time.Time
}

// Result answers one InputFrame.
type Result struct {
	Seq        uint64
	Samples    []Sample
	EncodeTime time.Duration
	// Opened is set on the result of the first frame from another encoder
	// (a hardware encoder failed and software took over): Samples are the
	// new encoder's and start with a keyframe, and Stream.Opened returns the
	// same from then on. nil when the encoder did not change.
	Opened *Opened
}

// Control changes a running stream's targets.
type Control struct {
	BitrateKbps int
	FPS         int
}

// Error is an encode error with a stable code (bad_frame, open_failed,
// encode_failed, bad_request). A bad_frame error leaves the stream usable.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("encoder: %s: %s", e.Code, e.Message) }

// Encoder is implemented by encoder plugins and by the host's client shim.
type Encoder interface {
	base.Plugin
	Capabilities(ctx context.Context) ([]Probe, error)
	Open(ctx context.Context, p OpenParams) (Stream, error)
}

// Stream is one open encoder. Encode is synchronous: one frame in flight,
// so the caller can keep only the newest frame waiting instead of a queue.
type Stream interface {
	// Opened is the encoder the stream uses now: what Open chose, until a
	// Result carries another Opened (a run-time fallback). Safe to call
	// from any goroutine, also while Encode runs.
	Opened() Opened
	Encode(f InputFrame) (Result, error)
	Control(c Control) error
	Close() error
}
