package dispatch

import (
	"errors"
	"math"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// Field bounds checked by Validate.
const (
	MaxTextBytes  = 1 << 20 // text_insert, clipboard_write, promptText
	MaxURLBytes   = 8 << 10
	MaxKeyBytes   = 64 // key and code each
	MaxWheelDelta = 100000
	MaxClickCount = 3
	MinViewportW  = 320
	MaxViewportW  = 3840
	MinViewportH  = 240
	MaxViewportH  = 2160
	allModifiers  = action.ModAlt | action.ModCtrl | action.ModMeta | action.ModShift
)

// Validate checks one action's fields: the kind is known and may come from a
// client (release_all never may), coordinates are in [0,1], the button is
// left/middle/right, floats are finite, and sizes are bounded. It returns an
// *errcode.Error with a stable code (unknown_kind, not_allowed,
// invalid_argument, too_large), or nil. Messages never echo field values.
func Validate(a action.Action) error {
	switch a.Kind {
	case action.PointerMove, action.Wheel, action.PointerDown, action.PointerUp, action.Click,
		action.KeyDown, action.KeyUp, action.KeyPress, action.TextInsert, action.Navigate,
		action.Back, action.Forward, action.Reload, action.Stop, action.Viewport,
		action.ClipboardWrite, action.ClipboardRead, action.DialogResponse, action.Heartbeat:
	case action.ReleaseAll:
		return errcode.Newf(errcode.NotAllowed, "release_all is synthesized by the appliance, never sent by a client")
	default:
		return errcode.Newf(errcode.UnknownKind, "unknown action kind")
	}

	// Sizes first: they bound everything else's work.
	switch {
	case len(a.Key) > MaxKeyBytes || len(a.Code) > MaxKeyBytes:
		return errcode.Newf(errcode.TooLarge, "key and code are limited to %d bytes", MaxKeyBytes)
	case len(a.Text) > MaxTextBytes:
		return errcode.Newf(errcode.TooLarge, "text is limited to %d bytes", MaxTextBytes)
	case len(a.PromptText) > MaxTextBytes:
		return errcode.Newf(errcode.TooLarge, "promptText is limited to %d bytes", MaxTextBytes)
	case len(a.URL) > MaxURLBytes:
		return errcode.Newf(errcode.TooLarge, "url is limited to %d bytes", MaxURLBytes)
	}

	for _, f := range [...]float64{a.X, a.Y, a.DeltaX, a.DeltaY} {
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return errcode.Newf(errcode.InvalidArgument, "numbers must be finite")
		}
	}
	if a.UsesCoordinates() && (a.X < 0 || a.X > 1 || a.Y < 0 || a.Y > 1) {
		return errcode.Newf(errcode.InvalidArgument, "x and y must be in [0,1]")
	}
	if math.Abs(a.DeltaX) > MaxWheelDelta || math.Abs(a.DeltaY) > MaxWheelDelta {
		return errcode.Newf(errcode.InvalidArgument, "wheel deltas are limited to %d", MaxWheelDelta)
	}
	switch a.Button {
	case "", "left", "middle", "right":
	default:
		return errcode.Newf(errcode.InvalidArgument, "button must be left, middle or right")
	}
	if a.ClickCount < 0 || a.ClickCount > MaxClickCount {
		return errcode.Newf(errcode.InvalidArgument, "clickCount must be in 0..%d", MaxClickCount)
	}
	if a.Modifiers&^allModifiers != 0 {
		return errcode.Newf(errcode.InvalidArgument, "unknown modifier bits")
	}

	switch a.Kind {
	case action.PointerDown, action.PointerUp, action.Click:
		if a.Button == "" {
			return errcode.Newf(errcode.InvalidArgument, "button is required")
		}
	case action.KeyDown, action.KeyUp, action.KeyPress:
		if a.Key == "" && a.Code == "" {
			return errcode.Newf(errcode.InvalidArgument, "key or code is required")
		}
	case action.TextInsert:
		if a.Text == "" && !a.Replace {
			return errcode.Newf(errcode.InvalidArgument, "text is required")
		}
	case action.Navigate:
		if a.URL == "" {
			return errcode.Newf(errcode.InvalidArgument, "url is required")
		}
	case action.Viewport:
		if a.Width < MinViewportW || a.Width > MaxViewportW || a.Height < MinViewportH || a.Height > MaxViewportH {
			return errcode.Newf(errcode.InvalidArgument, "viewport must be within %dx%d..%dx%d", MinViewportW, MinViewportH, MaxViewportW, MaxViewportH)
		}
	}
	return nil
}

// asActionError returns err as an *errcode.Error, wrapping any other error
// as invalid_argument.
func asActionError(err error) *errcode.Error {
	var ae *errcode.Error
	if errors.As(err, &ae) && ae.Code != "" {
		return ae
	}
	return errcode.Newf(errcode.InvalidArgument, "invalid action")
}
