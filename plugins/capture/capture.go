// Package capture is the contract of capture plugins: they turn a browser
// tab into pictures (JPEG) or browser-encoded video samples.
package capture

import (
	"context"
	"time"

	"github.com/tabcast/tabcast/plugins/base"
)

// APIVersions are the capture API versions this SDK speaks, newest last.
var APIVersions = []int{1}

// Target says which page to capture.
type Target struct {
	SessionID string
	// BrowserWSURL is the browser-level DevTools WebSocket URL (loopback).
	BrowserWSURL string
	TargetID     string
	Width        int
	Height       int
}

// Format of a frame's data.
type Format int

const (
	FormatUnspecified Format = iota
	FormatJPEG
	FormatH264
	FormatVP8
)

func (f Format) String() string {
	switch f {
	case FormatJPEG:
		return "jpeg"
	case FormatH264:
		return "h264"
	case FormatVP8:
		return "vp8"
	}
	return "unspecified"
}

// Frame is one captured picture or encoded sample.
type Frame struct {
	Format      Format
	Data        []byte
	CaptureTime time.Time
	// Width and Height: of the picture; for browser-encoded frames, of the
	// capture source (the tab's view within the capture's size limits),
	// which the browser's encoder may scale down under load.
	Width  int
	Height int
	Seq    uint64
	// Dropped counts frames the plugin replaced in its slot of one.
	Dropped  uint64
	Keyframe bool
}

// Capturer is implemented by capture plugins and by the host's client shim.
type Capturer interface {
	base.Plugin
	// ChromiumFlags are extra Chromium flags the plugin needs.
	ChromiumFlags(ctx context.Context) ([]string, error)
	// Stream captures target and calls send for each frame until ctx ends or
	// send fails. send must not be called concurrently.
	Stream(ctx context.Context, target Target, send func(Frame) error) error
}

// PickerTitlePrefix starts the title a capture plugin may give a tab for a
// moment while its capture starts (the browser's capture picker selects the
// tab by title; the page's own title is restored right after). Hosts show
// the page's title instead of one with this prefix.
const PickerTitlePrefix = "tabcast-capture-"

// StreamControl is a per-stream request from the core to a running Stream.
type StreamControl struct {
	// Keyframe asks for a keyframe as soon as possible.
	Keyframe bool
	// MaxBitrateKbps and MaxFPS cap the browser's encoder; 0 leaves a
	// setting unchanged.
	MaxBitrateKbps int
	MaxFPS         int
}

// Controller is optionally implemented by capture plugins whose streams take
// per-stream controls (the host's Client always implements it; against a
// plugin without it, Control fails with codes.Unimplemented, see
// IsUnimplemented).
type Controller interface {
	// Control applies c to the running Stream of sessionID.
	Control(ctx context.Context, sessionID string, c StreamControl) error
}

// Controllable is a Capturer whose streams take per-stream controls: what
// the host's Client serves, and what the host asks of tab capture.
type Controllable interface {
	Capturer
	Controller
}
