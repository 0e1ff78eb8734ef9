package signaling

import (
	"context"
	"errors"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/wire"
)

// ErrNotInteractive is wrapped by Media.OpenInput when the session (or this
// viewer) may only watch.
var ErrNotInteractive = errors.New("not interactive")

// Input is one interactive viewer's producer grant on a session, opened by
// Media.OpenInput. Signaling feeds it the envelopes that arrive on the
// peer's control and pointer channels after checking their identity.
type Input interface {
	// Producer is the current grant. It may change while the viewer is
	// connected (renewal, revoke): envelopes are checked against the value
	// at the time they arrive.
	Producer() (id string, generation uint64)
	// PageRevision is the page's current revision.
	PageRevision() uint64
	// Submit hands one decoded, identity-checked envelope to the session's
	// dispatcher. reply is called as core/dispatch does: synchronously once
	// with accepted/rejected (control actions; pointer actions only when
	// rejected), later once with completed/rejected. Signaling's reply
	// never blocks (acks are queued to the control channel's writer).
	Submit(e wire.Envelope, reply func(wire.Ack))
	// Close ends the producer (peer, DataChannel or WebSocket gone): the
	// session releases its held input. Signaling calls it exactly once,
	// possibly from a peer callback, so it must not block for long.
	Close()
}

// StateEvent is pushed by the session to one viewer's state channel.
// Events are coalesced per Type while the channel is busy (the newest of a
// type wins), so every event must carry the whole state of its type.
type StateEvent struct {
	// Type is page_state, dialog_opened, dialog_closed or producer.
	Type string
	// Payload is JSON-marshalable to an object; its fields are sent beside
	// "type" (docs/protocol.md, "DataChannels").
	Payload any
}

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
	case errors.Is(err, ErrCapacity):
		return errcode.CapacityExceeded
	case errors.Is(err, ErrNotInteractive):
		return errcode.NotInteractive
	case errors.Is(err, ErrSessionNotFound):
		return errcode.SessionNotFound
	default:
		return errcode.Internal
	}
}
