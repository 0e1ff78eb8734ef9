package peer

import (
	"sync/atomic"
	"time"

	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
)

// Quality is how one viewer's transport is doing, from the appliance's side.
type Quality struct {
	// CandidateType is the path (see CandidateType): host, srflx, prflx or
	// relay; "" before a pair is selected.
	CandidateType string
	// Protocol is the selected pair's transport: udp, or tcp for ICE-TCP.
	Protocol string
	// RTT is the selected pair's latest STUN round trip; 0 before one.
	RTT time.Duration
	// FractionLost is the loss the viewer last reported in an RTCP
	// receiver report (0..1); PacketsLost its running total.
	FractionLost float64
	PacketsLost  int64
}

// receiverReport keeps the viewer's last report on our stream.
type receiverReport struct {
	fraction atomic.Uint32 // FractionLost, in 1/256
	total    atomic.Uint32 // TotalLost (24 bits)
}

func (p *Peer) noteReceiverReport(rr *rtcp.ReceiverReport) {
	for _, r := range rr.Reports {
		p.rr.fraction.Store(uint32(r.FractionLost))
		p.rr.total.Store(r.TotalLost)
	}
}

// Quality reads the selected pair (path, protocol, the STUN round trip of
// its consent checks) and the viewer's last receiver report (loss). Pion
// keeps no remote-inbound stats, so the report is read off the RTCP stream.
func (p *Peer) Quality() Quality {
	q := Quality{CandidateType: p.CandidateType(),
		FractionLost: float64(p.rr.fraction.Load()) / 256, PacketsLost: int64(p.rr.total.Load())}
	if p.sender == nil || p.sender.Transport() == nil || p.sender.Transport().ICETransport() == nil {
		return q
	}
	pair, err := p.sender.Transport().ICETransport().GetSelectedCandidatePair()
	if err != nil || pair == nil || pair.Local == nil || pair.Remote == nil {
		return q
	}
	q.Protocol = pair.Local.Protocol.String()
	// One bundled transport: its nominated, succeeded pair is the selected one.
	for _, s := range p.pc.GetStats() {
		if cp, ok := s.(webrtc.ICECandidatePairStats); ok && cp.Nominated && cp.State == webrtc.StatsICECandidatePairStateSucceeded && cp.CurrentRoundTripTime > 0 {
			q.RTT = time.Duration(cp.CurrentRoundTripTime * float64(time.Second))
		}
	}
	return q
}
