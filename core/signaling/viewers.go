package signaling

import (
	"time"

	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/viewer"
)

// What a connection tells the session about its viewer while it watches:
// the session snapshot it pushes to the viewer, and the viewer's transport
// it reports to the session.

// viewerEvery is how often a viewer's transport is reported.
const viewerEvery = time.Second

// pushStatus sends the session's status whenever its revision moves,
// until the connection ends.
func (c *conn) pushStatus(src StatusSource) {
	var last uint64
	t := time.NewTicker(statusEvery)
	defer t.Stop()
	for {
		if rev, st := src.Status(); rev != last {
			last = rev
			// The message keeps its wire type "snapshot" (the panel and
			// API clients know it by that name), though what it carries is
			// the session's status, not a core/snapshot accessibility tree.
			c.send(statusMsg{Type: TypeSnapshot, Revision: rev, Session: st})
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reportTransport reports the viewer's transport to its subscription
// every viewerEvery until the connection ends (Leave then withdraws it).
// The estimate goes in bit/s, as the peer's estimator gives it.
func (c *conn) reportTransport(sub viewer.Subscription, p *peer.Peer) {
	t := time.NewTicker(viewerEvery)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			q := p.Quality()
			sub.ReportTransport(viewer.Transport{
				Peer: p.ID(), Path: q.CandidateType, Protocol: q.Protocol, RTT: q.RTT, FractionLost: q.FractionLost,
				EstimateBps: p.TargetBitrate(), SteadyBps: p.SteadyBitrate(),
			})
		}
	}
}
