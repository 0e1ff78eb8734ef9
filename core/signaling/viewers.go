package signaling

import (
	"time"

	"github.com/tabcast/tabcast/core/peer"
)

// What a connection tells the session about its viewer while it watches:
// the session snapshot it pushes to the viewer, and the viewer's transport
// it reports to the session.

// ViewerSink is implemented by Media that wants each viewer's transport:
// reported every second while the viewer watches (its send-side bandwidth
// estimate steers the encoder), withdrawn when it goes.
type ViewerSink interface {
	ViewerReport(ViewerReport)
	ViewerGone(codec, peer string)
}

// ViewerReport is one viewer's transport at one moment.
type ViewerReport struct {
	Peer, User, Codec string
	Interactive       bool
	Path, Protocol    string // candidate type; udp or tcp
	RTT               time.Duration
	FractionLost      float64
	EstimateBps       int
	SteadyBps         int // EstimateBps without the recovery boost
}

// viewerEvery is how often a viewer's transport is reported.
const viewerEvery = time.Second

// pushSnapshots sends the session snapshot whenever its revision moves,
// until the connection ends.
func (c *conn) pushSnapshots(sn Snapshotter) {
	var last uint64
	t := time.NewTicker(snapshotEvery)
	defer t.Stop()
	for {
		if rev, snap := sn.Snapshot(); rev != last {
			last = rev
			c.send(snapshotMsg{Type: TypeSnapshot, Revision: rev, Session: snap})
		}
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
}

// reportViewer feeds the viewer's transport to the session until the
// connection ends, then withdraws it.
func (c *conn) reportViewer(vs ViewerSink, p *peer.Peer, codec string, interactive bool) {
	t := time.NewTicker(viewerEvery)
	defer t.Stop()
	defer vs.ViewerGone(codec, p.ID())
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
			q := p.Quality()
			vs.ViewerReport(ViewerReport{
				Peer: p.ID(), User: c.viewer.Name, Codec: codec, Interactive: interactive,
				Path: q.CandidateType, Protocol: q.Protocol, RTT: q.RTT, FractionLost: q.FractionLost,
				EstimateBps: p.TargetBitrate(), SteadyBps: p.SteadyBitrate(),
			})
		}
	}
}
