package signaling

import (
	"slices"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/viewer"
	"github.com/tabcast/tabcast/core/wire"
)

// maxHeldStates bounds state events kept (newest per type) before the peer
// exists.
const maxHeldStates = 16

type heldState struct {
	typ  string
	data []byte
}

// onState takes one of the session's state events for this viewer (any
// goroutine; never blocks) and queues it on the state channel, coalesced
// per type.
func (c *conn) onState(ev action.StateEvent) {
	data, err := wire.EncodeState(ev.Type, ev.Payload)
	if err != nil {
		c.log.Error("encode state event", "type", ev.Type, "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.producerClosed {
		return
	}
	if c.peer == nil {
		// Join may push the first page_state before the peer exists.
		c.stateHeld = slices.DeleteFunc(c.stateHeld, func(h heldState) bool { return h.typ == ev.Type })
		if len(c.stateHeld) >= maxHeldStates {
			c.stateHeld = c.stateHeld[1:]
		}
		c.stateHeld = append(c.stateHeld, heldState{typ: ev.Type, data: data})
		return
	}
	_ = c.peer.SendState(ev.Type, data)
}

// onInput handles one message from the control or pointer channel (Pion's
// reader of that channel calls it, one message at a time): decode, check
// the identity against this connection's grant, submit. A refused message
// is answered with a rejected ack on control and never submitted.
func (c *conn) onInput(channel string, b []byte) {
	c.mu.Lock()
	in, p, ended, denied, connGen := c.producer, c.peer, c.producerClosed, c.inputDenied, c.connGen
	c.mu.Unlock()
	if p == nil {
		return // channels exist only once hello made the peer
	}
	e, err := wire.Decode(channel, b)
	if err == nil {
		switch {
		case denied:
			err = errcode.New(errcode.PermissionDenied, "your right to act on this session was withdrawn")
		case in == nil || ended:
			err = errcode.New(errcode.StaleGeneration, "this connection's producer has ended")
		default:
			err = checkIdentity(e, c.sessionID, p.ID(), connGen, in)
		}
	}
	if err != nil {
		var rev uint64
		if in != nil {
			rev = in.PageRevision()
		}
		// Codes only: envelopes may carry typed text.
		c.log.Debug("input refused", "channel", channel, "code", wire.CodeOf(err))
		c.sendAck(p, wire.Reject(e.ActionID, err, rev))
		return
	}
	in.Submit(e, func(a action.Ack) { c.sendAck(p, a) })
}

// checkIdentity refuses an envelope that does not name this connection's
// session, peer and producer (wrong_identity) or names an older generation
// of them (stale_generation).
func checkIdentity(e action.Envelope, sessionID, peerID string, connGen uint64, in viewer.Producer) error {
	id, gen := in.Grant()
	switch {
	case e.BrowserSessionID != sessionID || e.PeerID != peerID || e.ProducerID != id:
		return errcode.New(errcode.WrongIdentity, "browserSessionId, peerId or producerId is not this connection's")
	case e.ConnectionGeneration != connGen:
		return errcode.New(errcode.StaleGeneration, "connectionGeneration is not this connection's")
	case e.ProducerGeneration != gen:
		return errcode.New(errcode.StaleGeneration, "producerGeneration is not the current one")
	}
	return nil
}

// sendAck queues an ack on p's control channel; it never blocks. An ack
// the viewer could not receive (a result over its max-message-size) is
// replaced by a too_large rejection.
func (c *conn) sendAck(p *peer.Peer, a action.Ack) {
	data, err := wire.EncodeAck(a)
	if err != nil {
		c.log.Error("encode ack", "err", err)
		return
	}
	if limit := p.RemoteMaxMessageSize(); limit > 0 && len(data) > limit {
		data, err = wire.EncodeAck(action.Ack{ActionID: a.ActionID, Status: action.StatusRejected,
			Code: errcode.TooLarge, Message: "the result is larger than the viewer accepts",
			ActionRevision: a.ActionRevision, PageRevision: a.PageRevision})
		if err != nil {
			return
		}
	}
	// ErrClosed / ErrUnhealthy: the peer is ending and the viewer with it.
	_ = p.SendControl(data)
}

// onChannel: a closed control or pointer channel ends the producer.
func (c *conn) onChannel(label string, open bool) {
	if !open && (label == peer.ChannelControl || label == peer.ChannelPointer) {
		c.endProducer(label + " channel closed")
	}
}

// onUnhealthy: the viewer does not read its acks; the peer is closing.
func (c *conn) onUnhealthy(reason string) {
	c.sendError(errcode.SlowConsumer, "the viewer does not read its control channel")
	c.endProducer("unhealthy: " + reason)
}

// watchAccess follows the viewer's rights until the connection ends: a
// viewer that may no longer act loses its producer, one that may no longer
// watch loses the whole connection. It runs on its own goroutine, owned by
// run, and stops with c.ctx.
func (c *conn) watchAccess(a Access) {
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-a.Changed():
		}
		if !c.applyAccess(a) {
			return
		}
	}
}

// applyAccess narrows the connection to what a allows now; false when the
// connection is ending.
func (c *conn) applyAccess(a Access) bool {
	if !a.CanView() {
		c.withdraw()
		return false
	}
	if !a.CanInput() {
		c.denyInput()
	}
	return true
}

// denyInput ends the producer for good and refuses what the viewer sends
// from now on with permission_denied; the video goes on.
func (c *conn) denyInput() {
	c.mu.Lock()
	already := c.inputDenied
	c.inputDenied = true
	had := c.producer != nil && !c.producerClosed
	c.mu.Unlock()
	if already {
		return
	}
	c.endProducer("access withdrawn")
	if had {
		c.sendError(errcode.PermissionDenied, "your right to act on this session was withdrawn; you may still watch")
	}
}

// withdraw ends the connection because the viewer's access was withdrawn:
// the producer at once, then the peer (video and DataChannels stop now,
// not after the close handshake), and the socket with
// ClosePermissionDenied after an error frame.
func (c *conn) withdraw() {
	c.mu.Lock()
	if c.withdrawn {
		c.mu.Unlock()
		return
	}
	c.withdrawn, c.inputDenied = true, true
	p := c.peer
	c.mu.Unlock()
	c.log.Info("viewer's access withdrawn; disconnecting it", "user", c.viewer.Name)
	c.endProducer("access withdrawn")
	c.sendError(errcode.PermissionDenied, "your access to this session was withdrawn")
	c.closeWith(ClosePermissionDenied, "access withdrawn")
	if p != nil {
		if err := p.Close(); err != nil {
			c.log.Debug("close peer", "err", err)
		}
	}
}

// endProducer closes the producer exactly once, whatever ended it first: the
// socket, the peer, or its control or pointer channel.
func (c *conn) endProducer(reason string) {
	c.producerEndOnce.Do(func() {
		c.mu.Lock()
		in := c.producer
		c.producerClosed = true
		c.mu.Unlock()
		if in != nil {
			c.log.Info("input producer ended", "reason", reason)
			in.Close()
		}
	})
}
