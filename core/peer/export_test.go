package peer

import (
	"net"
	"strconv"

	"github.com/pion/webrtc/v4"
)

// RemoteCandidateAddrs lists the remote candidates the peer's ICE agent
// holds, as host:port (tests only).
func RemoteCandidateAddrs(p *Peer) []string {
	var out []string
	for _, s := range p.pc.GetStats() {
		if c, ok := s.(webrtc.ICECandidateStats); ok && c.Type == webrtc.StatsTypeRemoteCandidate {
			out = append(out, net.JoinHostPort(c.IP, strconv.Itoa(int(c.Port))))
		}
	}
	return out
}
