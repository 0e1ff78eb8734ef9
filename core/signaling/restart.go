package signaling

// The peer's connection state, and the one ICE restart a viewer gets when
// its path fails (a relay that restarted, a path that changed).

import (
	"context"
	"time"

	"github.com/coder/websocket"
	"github.com/pion/webrtc/v4"
)

// peerState is the peer's state callback: report it; a failed or closed
// peer ends the socket.
func (c *conn) peerState(s webrtc.PeerConnectionState) {
	c.send(stateMsg{Type: TypeState, State: s.String()})
	switch s {
	case webrtc.PeerConnectionStateConnected:
		// Media written before the transport was up was lost: a still page
		// sends no more frames, so ask for a keyframe of the last picture.
		c.mu.Lock()
		sub, p, start := c.sub, c.peer, c.peerStart
		first, restarted := !c.outcome, c.restarting
		c.outcome, c.restarting = true, false
		c.mu.Unlock()
		if sub != nil {
			sub.RequestKeyframe()
		}
		if first && p != nil {
			c.h.o.Telemetry.PeerConnected(p.CandidateType(), time.Since(start))
		}
		if restarted {
			c.h.o.Telemetry.ICERestart(true)
		}
	case webrtc.PeerConnectionStateDisconnected:
		// Silent for a while: restart ICE before it is declared failed
		// (3 s + 7 s), so a relay that restarted costs seconds, not ten.
		go func() {
			t := time.NewTimer(restartAfter)
			defer t.Stop()
			select {
			case <-c.ctx.Done():
			case <-t.C:
				c.mu.Lock()
				p := c.peer
				c.mu.Unlock()
				if p != nil && p.State() == webrtc.PeerConnectionStateDisconnected && c.claimRestart() {
					c.restartICE()
				}
			}
		}()
	case webrtc.PeerConnectionStateFailed:
		// One ICE restart with fresh relay credentials (a relay that
		// restarted, a path that changed); if that fails too, the viewer
		// reconnects from scratch.
		if c.claimRestart() {
			go c.restartICE()
			return
		}
		c.log.Info("peer ended", "state", s.String())
		c.noteFailed()
		c.endProducer("peer " + s.String())
		c.closeWith(websocket.StatusNormalClosure, "peer "+s.String())
	case webrtc.PeerConnectionStateClosed:
		c.log.Info("peer ended", "state", s.String())
		c.endProducer("peer " + s.String())
		c.closeWith(websocket.StatusNormalClosure, "peer "+s.String())
	}
}

// restartICE re-offers with ICE restart and new relay credentials (the
// next generation of this peer's scope; the old ones are revoked once the
// new offer is out). The viewer has restartWait to reconnect.
func (c *conn) restartICE() {
	c.mu.Lock()
	p := c.peer
	c.iceGen++
	gen := c.iceGen
	oldRevoke := c.revokeICE
	c.mu.Unlock()
	if p == nil {
		return
	}
	msg := offerMsg{Type: TypeOffer, Restart: true}
	if c.h.o.ICEServers != nil {
		// The relay may be restarting itself (that may be why the peer
		// failed): keep asking for a while rather than offer without it.
		var (
			servers []ICEServer
			revoke  func()
			err     error
		)
		deadline := time.Now().Add(restartMint)
		for {
			ictx, cancel := context.WithTimeout(c.ctx, 2*time.Second)
			servers, revoke, err = c.h.o.ICEServers(ictx, c.viewer, c.sessionID, p.ID(), gen)
			cancel()
			if err == nil || time.Now().After(deadline) || c.ctx.Err() != nil {
				break
			}
			select {
			case <-c.ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
		if err == nil {
			msg.ICEServers = servers
			c.mu.Lock()
			c.revokeICE = revoke
			c.mu.Unlock()
			if oldRevoke != nil {
				oldRevoke()
			}
		}
	}
	// The restart gathers new local candidates at once, on pion's
	// goroutine: held back until the restart offer is out, like the first
	// offer's. A candidate sent before the offer would be added by the
	// viewer to the old ICE generation and lost for the new one, leaving it
	// nothing to check (a restart that never connected, about one in eight).
	c.mu.Lock()
	c.offerSent = false
	c.mu.Unlock()
	sdp, err := p.RestartICE()
	if err != nil {
		c.log.Info("ice restart failed", "err", err)
		c.h.o.Telemetry.ICERestart(false)
		c.noteFailed()
		c.closeWith(websocket.StatusNormalClosure, "peer failed")
		return
	}
	msg.SDP = sdp
	c.log.Info("ice restart")
	c.restarts.Add(1)
	c.mu.Lock()
	c.phase = phaseOffered
	c.restarting = true
	c.sendLocked(msg)
	for _, cand := range c.pending {
		c.sendLocked(candidateMsg{Type: TypeCandidate, Candidate: cand})
	}
	c.pending, c.offerSent = nil, true
	c.mu.Unlock()
	// Give up when the restart does not connect in time.
	t := time.NewTimer(restartWait)
	defer t.Stop()
	select {
	case <-c.ctx.Done():
	case <-t.C:
		if p.State() != webrtc.PeerConnectionStateConnected {
			c.log.Info("peer ended", "state", "failed after an ice restart")
			c.mu.Lock()
			restarting := c.restarting
			c.restarting = false
			c.mu.Unlock()
			if restarting {
				c.h.o.Telemetry.ICERestart(false)
			}
			c.noteFailed()
			c.endProducer("peer failed")
			c.closeWith(websocket.StatusNormalClosure, "peer failed")
		}
	}
}

// restartWait bounds an ICE restart; restartAfter is how long a peer may
// stay disconnected before it gets one.
const (
	restartWait  = 10 * time.Second
	restartAfter = 2 * time.Second
	restartMint  = 5 * time.Second // how long a restart waits for relay credentials
)

// claimRestart reports whether this connection may still restart ICE (it
// may once).
func (c *conn) claimRestart() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	ok := !c.restarted && !c.closing
	c.restarted = true
	return ok
}
