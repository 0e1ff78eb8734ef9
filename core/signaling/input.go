package signaling

import (
	"context"
	"errors"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/viewer"
)

// Viewer is who is on the other end of a signaling socket, as the HTTP
// layer authenticated them.
type Viewer struct {
	// Name owns the viewer's input producer (it fences and audits it).
	Name string
	// Input: the viewer may act on the page; otherwise it only watches,
	// even if its hello asks to be interactive.
	Input bool
	// Access follows what the viewer may do while it stays connected (the
	// HTTP layer's core/access.Grant); nil: Input holds for the whole
	// connection.
	Access Access
}

// Access is what a connected viewer may still do. Rights only shrink while
// it is connected.
type Access interface {
	// Changed receives (it is never closed) after the rights shrank.
	Changed() <-chan struct{}
	// CanView: the viewer may still watch. When false the connection ends
	// at once: peer, DataChannels and socket.
	CanView() bool
	// CanInput: the viewer may still act. When false its producer ends and
	// what it sends is refused with permission_denied; it watches on.
	CanInput() bool
}

type viewerKey struct{}

// WithViewer returns ctx carrying v for ServeHTTP.
func WithViewer(ctx context.Context, v Viewer) context.Context {
	return context.WithValue(ctx, viewerKey{}, v)
}

// localViewer is a request without a Viewer: the handler used on its own
// (tests, an appliance without users).
var localViewer = Viewer{Name: "local", Input: true}

func viewerFrom(ctx context.Context) Viewer {
	if v, ok := ctx.Value(viewerKey{}).(Viewer); ok {
		return v
	}
	return localViewer
}

// inputErrorCode names why an interactive hello got no producer (welcome's
// inputError).
func inputErrorCode(err error) string {
	switch {
	case errors.Is(err, viewer.ErrCapacity):
		return errcode.CapacityExceeded
	case errors.Is(err, viewer.ErrNotInteractive):
		return errcode.NotInteractive
	case errors.Is(err, viewer.ErrSessionNotFound):
		return errcode.SessionNotFound
	default:
		return errcode.Internal
	}
}
