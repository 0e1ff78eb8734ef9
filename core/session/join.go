package session

import (
	"errors"
	"fmt"
	"sync"

	"github.com/pion/webrtc/v4"

	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/viewer"
)

// A viewer (core/signaling, for one peer connection) joins a session and
// holds one Subscription until it leaves. The Manager satisfies signaling's
// Sessions interface with Codecs and Join directly: the seam's types are
// core/viewer's, so nothing converts between the two sides.

// Codecs are the codecs viewers of session id can ask for, the preferred
// first. The error wraps viewer.ErrSessionNotFound for an unknown id.
func (m *Manager) Codecs(id string) ([]string, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", viewer.ErrSessionNotFound, err)
	}
	return s.Codecs(), nil
}

// Join subscribes a viewer to session id (see Session.Join).
func (m *Manager) Join(id string, r viewer.Request) (viewer.Subscription, error) {
	s, err := m.Get(id)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", viewer.ErrSessionNotFound, err)
	}
	sub, err := s.Join(r)
	if err != nil {
		return nil, err // not a typed nil in the interface
	}
	return sub, nil
}

// Join attaches one viewer to the codec's pipeline (starting it, and the
// capture, for the first) and, when it asks to act, grants it a human
// producer. Errors wrap viewer.ErrCapacity (no room for another viewer)
// or viewer.ErrSessionNotFound (the session is not ready); a refused
// producer does not fail the join (Subscription.ProducerErr).
func (s *Session) Join(r viewer.Request) (*Subscription, error) {
	track, release, err := s.Subscribe(r.Codec)
	switch {
	case errors.Is(err, ErrCapacity):
		return nil, fmt.Errorf("%w: %w", viewer.ErrCapacity, err)
	case errors.Is(err, ErrNotReady):
		return nil, fmt.Errorf("%w: %w", viewer.ErrSessionNotFound, err)
	case err != nil:
		return nil, err
	}
	sub := &Subscription{s: s, codec: r.Codec, owner: r.Owner, track: track, release: release}
	if r.Interactive {
		p, err := s.OpenProducer(dispatch.KindHuman, r.Owner, r.OnState)
		if err != nil {
			sub.producerErr = fmt.Errorf("%w: %w", viewer.ErrNotInteractive, err)
		} else {
			sub.producer = p
		}
	}
	return sub, nil
}

// Subscription is one viewer's place in a session (viewer.Subscription).
type Subscription struct {
	s           *Session
	codec       string
	owner       string
	track       webrtc.TrackLocal
	release     func() // idempotent (Session.Subscribe)
	producer    *Producer
	producerErr error

	// mu orders the transport reports against Leave, so a report that
	// races the viewer's departure cannot put it back in the table.
	mu   sync.Mutex
	peer string // last reported peer id: withdrawn by Leave
	left bool
}

var _ viewer.Subscription = (*Subscription)(nil)

// Track is the codec's shared video track.
func (sub *Subscription) Track() webrtc.TrackLocal { return sub.track }

// RequestKeyframe passes a viewer's PLI/FIR to its codec's pipeline.
func (sub *Subscription) RequestKeyframe() { sub.s.RequestKeyframe(sub.codec) }

// ReportTransport records the viewer's transport; its estimate (bit/s)
// steers the codec's encoder.
func (sub *Subscription) ReportTransport(t viewer.Transport) {
	sub.mu.Lock()
	defer sub.mu.Unlock()
	if sub.left {
		return
	}
	sub.peer = t.Peer
	sub.s.ViewerReport(sub.codec, sub.owner, sub.producer != nil, t)
}

// Producer is the viewer's producer, nil when it only watches.
func (sub *Subscription) Producer() viewer.Producer {
	if sub.producer == nil {
		return nil // a nil interface, not a typed nil
	}
	return sub.producer
}

// ProducerErr says why an interactive join got no producer.
func (sub *Subscription) ProducerErr() error { return sub.producerErr }

// Done is closed when the session starts closing.
func (sub *Subscription) Done() <-chan struct{} { return sub.s.Done() }

// Status is the session's state for the viewer's panel, with its
// revision (core/signaling pushes it whenever the revision moves;
// signaling.StatusSource).
func (sub *Subscription) Status() (uint64, any) {
	snap := sub.s.Status()
	return snap.Revision, snap
}

// Leave closes the producer, withdraws the viewer's transport report and
// releases the track. Idempotent.
func (sub *Subscription) Leave() {
	if sub.producer != nil {
		sub.producer.Close()
	}
	sub.mu.Lock()
	first := !sub.left
	sub.left = true
	peer := sub.peer
	sub.mu.Unlock()
	if !first {
		return
	}
	if peer != "" {
		sub.s.ViewerGone(sub.codec, peer)
	}
	sub.release()
}
