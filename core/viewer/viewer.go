// Package viewer is the seam between a viewer's connection (core/signaling
// with its core/peer) and a browser session (core/session). It holds only
// the types both sides name, as neko's pkg/types does: signaling declares
// the interface it needs in these types, and the session manager satisfies
// it directly, so nothing in between (package main included) copies one
// side's values into the other's.
//
// A viewer joins a session once and gets one Subscription: the video
// track, the way back for keyframe requests and transport reports, its
// input producer, and the session's end. Bandwidth is in bit/s all the way
// from the peer's estimator to the session's encode pipeline.
package viewer

import (
	"errors"
	"time"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/action"
)

// Why a join (or its input) was refused. A session's errors wrap these, so
// signaling can answer with the protocol's codes.
var (
	// ErrSessionNotFound: no such session, or it is no longer ready.
	ErrSessionNotFound = errors.New("session not found")
	// ErrCapacity: no more viewers, pipelines or producers fit.
	ErrCapacity = errors.New("capacity exceeded")
	// ErrNotInteractive: the session (or this viewer) may only watch.
	ErrNotInteractive = errors.New("not interactive")
)

// Request is what a viewer asks for when it joins.
type Request struct {
	// Codec is the one chosen from the session's codecs and the viewer's.
	Codec string
	// Owner is the viewer's name: it owns the input producer (it fences
	// and audits it).
	Owner string
	// Interactive asks for an input producer. A refusal does not fail
	// the join: the viewer watches and Subscription.ProducerErr says why.
	Interactive bool
	// OnState takes the session's state events for this viewer from any
	// goroutine until its Producer is closed; it never blocks. The current
	// state may be delivered before Join returns.
	OnState func(action.StateEvent)
}

// Subscription is one viewer's place in a session, from Join to Leave.
type Subscription interface {
	// Track is the codec's shared video track.
	Track() webrtc.TrackLocal
	// RequestKeyframe passes on the viewer's PLI/FIR (or its explicit
	// keyframe message); the session rate-limits.
	RequestKeyframe()
	// ReportTransport reports the viewer's transport (every second while
	// it watches): its bandwidth estimate steers the encoder, the rest
	// feeds the panel's per-viewer table. Ignored after Leave.
	ReportTransport(Transport)
	// Producer is the viewer's producer; nil when it only watches.
	Producer() Producer
	// ProducerErr says why an interactive join got no Producer (wrapping
	// ErrCapacity or ErrNotInteractive when that is why); nil otherwise.
	ProducerErr() error
	// Done is closed when the session ends; its viewers are then told and
	// disconnected.
	Done() <-chan struct{}
	// Leave ends the subscription: the input producer is closed, the
	// transport report withdrawn, the track released (its pipeline stops
	// with its last viewer). Idempotent.
	Leave()
}

// Producer is one interactive viewer's producer on a session: the handle
// through which it acts under its grant (core/dispatch.Grant). Signaling
// feeds it the envelopes that arrive on the peer's control and pointer
// channels after checking their identity.
type Producer interface {
	// Grant is the current grant's id and generation. It may change while the viewer is
	// connected (renewal, revoke): envelopes are checked against the value
	// at the time they arrive.
	Grant() (id string, generation uint64)
	// PageRevision is the page's current revision.
	PageRevision() uint64
	// Submit hands one decoded, identity-checked envelope to the session's
	// dispatcher. reply is called as core/dispatch does: synchronously once
	// with accepted/rejected (control actions; pointer actions only when
	// rejected), later once with completed/rejected. The caller's reply
	// must never block.
	Submit(e action.Envelope, reply func(action.Ack))
	// Close ends the producer (peer, DataChannel or WebSocket gone, or the
	// right to act withdrawn): the session releases its held input.
	// Idempotent; it may be called from a peer callback, so it does not
	// block for long.
	Close()
}

// Transport is one viewer's transport at one moment.
type Transport struct {
	// Peer identifies the viewer's peer connection.
	Peer string
	// Path is host, srflx, prflx or relay; Protocol udp or tcp (ICE-TCP).
	Path, Protocol string
	// RTT and FractionLost come from the viewer's RTCP receiver reports.
	RTT          time.Duration
	FractionLost float64
	// EstimateBps is the send-side bandwidth estimate, bit/s; SteadyBps
	// the same without the recovery boost.
	EstimateBps int
	SteadyBps   int
}
