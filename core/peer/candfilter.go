package peer

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/pion/ice/v4"
	"github.com/pion/sdp/v3"
)

// A viewer's remote ICE candidates name addresses the appliance then sends
// STUN connectivity checks to (and, for a passive TCP candidate with ICE
// over TCP on, opens a TCP connection to). Unchecked, any viewer could make
// the box probe its own loopback services, the cloud metadata service or
// hosts of the LAN it is not meant to reach. So every remote candidate's
// address passes candidatePolicy before the ICE agent may use it:
//
//   - signaled candidates (the answer's a=candidate lines and trickled
//     ones) are checked by the peer itself, before Pion sees them, so that
//     each refusal is counted with its source;
//   - everything the ICE agent learns on its own — peer-reflexive
//     candidates (the source address of a STUN request that carried our ICE
//     password) and mDNS names it resolved — goes through the same policy
//     as Pion's remote IP filter (SettingEngine.SetRemoteIPFilter, applied
//     by pion/ice to every remote candidate before it is added, including
//     peer-reflexive ones, which are then not even answered). Being
//     installed per peer, it also backs up the signaled path.
//
// Peer-reflexive candidates need the filter too: only the viewer knows the
// ICE password, but a viewer on the LAN can forge its UDP source address
// (169.254.169.254, a LAN host), and the box would then send its checks
// and media there. They are exempt from one rule only while the viewer's
// address is unknown (Options.ViewerAddr unset): a loopback source cannot
// come from off the box (the kernel drops loopback-sourced packets arriving
// on other interfaces), so it is a socket of this host — the viewer's own,
// or the local TURN relay's — that sent us an authenticated request, and
// answering it reaches nothing else.

// Refusal reasons, the label values of the refusal counter.
const (
	refusedLoopback    = "loopback"        // 127/8, ::1, from a viewer not on this box
	refusedLinkLocal   = "link_local"      // 169.254/16 (cloud metadata), fe80::/10
	refusedMetadata    = "metadata"        // metadata services outside link-local
	refusedUnspecified = "unspecified"     // 0/8, ::
	refusedMulticast   = "multicast"       // 224/4, ff00::/8
	refusedBroadcast   = "broadcast"       // 255.255.255.255, the box's subnets' broadcast
	refusedReserved    = "reserved"        // 240/4
	refusedNetworks    = "viewer_networks" // outside webrtc.viewerNetworks
	refusedMDNS        = "mdns"            // a .local name the policy cannot vouch for
)

// Where a refused candidate came from (the counter's source label).
const (
	fromSDP     = "sdp"     // an a=candidate line of the viewer's answer
	fromTrickle = "trickle" // a trickled candidate
	fromICE     = "ice"     // learned by the ICE agent: peer-reflexive or mDNS-resolved
)

var (
	thisNetwork   = netip.MustParsePrefix("0.0.0.0/8")
	reservedV4    = netip.MustParsePrefix("240.0.0.0/4")
	limitedBcast  = netip.MustParseAddr("255.255.255.255")
	metadataAddrs = map[netip.Addr]bool{
		// Cloud metadata services outside 169.254/16: AWS over IPv6 (a ULA,
		// which the private class would otherwise let through) and Alibaba
		// Cloud (in the carrier-grade NAT range).
		netip.MustParseAddr("fd00:ec2::254"):   true,
		netip.MustParseAddr("100.100.100.200"): true,
	}
)

// candidatePolicy decides which remote addresses a peer's ICE agent may
// use. It is immutable once the peer is built.
type candidatePolicy struct {
	networks  []netip.Prefix      // empty: any unicast address not refused otherwise
	loopback  bool                // loopback allowed (the viewer is on this box)
	broadcast map[netip.Addr]bool // directed broadcasts of the box's IPv4 subnets
}

// check returns the refusal reason for a, or "" when a may be used.
func (c *candidatePolicy) check(a netip.Addr) string {
	if !a.IsValid() {
		return refusedUnspecified
	}
	a = a.Unmap().WithZone("")
	switch {
	case a.IsUnspecified() || thisNetwork.Contains(a):
		return refusedUnspecified
	case a.IsLoopback():
		if c.loopback {
			// A viewer on the box reaches it over loopback; viewerNetworks
			// (which cannot name loopback) does not apply.
			return ""
		}
		return refusedLoopback
	case metadataAddrs[a]:
		return refusedMetadata
	case a.IsLinkLocalUnicast():
		return refusedLinkLocal
	case a.IsMulticast():
		return refusedMulticast
	case a == limitedBcast || c.broadcast[a]:
		return refusedBroadcast
	case reservedV4.Contains(a):
		return refusedReserved
	}
	if len(c.networks) == 0 {
		return ""
	}
	for _, n := range c.networks {
		if n.Contains(a) {
			return ""
		}
	}
	return refusedNetworks
}

// checkIP is check for a net.IP (Pion's remote IP filter).
func (c *candidatePolicy) checkIP(ip net.IP) string {
	a, _ := netip.AddrFromSlice(ip)
	return c.check(a)
}

// ParseViewerNetworks parses webrtc.viewerNetworks (CIDR prefixes).
func ParseViewerNetworks(list []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, s := range list {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("viewer networks: entry %d is not a CIDR prefix", i)
		}
		out = append(out, p)
	}
	return normalizeNetworks(out)
}

// normalizeNetworks masks the prefixes and writes IPv4-mapped ones in IPv4
// form: candidates' addresses are compared unmapped.
func normalizeNetworks(list []netip.Prefix) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(list))
	for i, n := range list {
		if n.Addr().Is4In6() && n.Bits() >= 96 {
			n = netip.PrefixFrom(n.Addr().Unmap(), n.Bits()-96)
		}
		if !n.IsValid() || n.Addr().Is4In6() {
			return nil, fmt.Errorf("viewer networks: entry %d is not an IPv4 or IPv6 prefix", i)
		}
		out = append(out, n.Masked())
	}
	return out, nil
}

// subnetBroadcasts returns the directed broadcast address of every IPv4
// subnet of the box's interfaces: a datagram to one reaches every host of
// that LAN. Errors leave the set empty (255.255.255.255 is still refused).
func subnetBroadcasts() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip4 := ipn.IP.To4()
		ones, bits := ipn.Mask.Size()
		if ip4 == nil || bits != 32 || ones >= 31 {
			continue // /31 and /32 have no broadcast address
		}
		var b [4]byte
		for i := range b {
			b[i] = ip4[i] | ^ipn.Mask[i]
		}
		out[netip.AddrFrom4(b)] = true
	}
	return out
}

// candidateVerdict is what the peer does with one signaled candidate.
type candidateVerdict int

const (
	candidateKeep    candidateVerdict = iota // give it to Pion
	candidateRefuse                          // refused by address: counted
	candidateDiscard                         // dropped without counting
)

// screen decides on one signaled candidate (its a=candidate value, with or
// without the "candidate:" prefix). A candidate that does not parse is kept:
// Pion refuses it with its usual error, and it names no address to check.
func (p *Peer) screen(value string) (candidateVerdict, string) {
	c, err := ice.UnmarshalCandidate(value)
	if err != nil {
		return candidateKeep, ""
	}
	if p.relayOnly && c.Type() != ice.CandidateTypeRelay {
		return candidateDiscard, "" // not a path a relay-only appliance accepts
	}
	host := c.Address()
	if c.Type() == ice.CandidateTypeHost && strings.HasSuffix(host, ".local") {
		// mDNS host candidates (what browsers send instead of their LAN
		// address). Without Config.MDNS nothing resolves them: Pion would
		// only ignore them, and every browser sends them, so they are
		// dropped here without counting. With it, Pion resolves the name
		// and the answer — which any host on the LAN may send, with any
		// address — passes the same policy as its remote IP filter. That
		// filter lets loopback through while the viewer's address is
		// unknown (see the top of this file), so the names are refused then.
		switch {
		case !p.mdns:
			return candidateDiscard, ""
		case !p.viewerKnown:
			return candidateRefuse, refusedMDNS
		}
		return candidateKeep, ""
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return candidateKeep, "" // Pion parsed it, so this does not happen
	}
	if r := p.policy.check(a); r != "" {
		return candidateRefuse, r
	}
	return candidateKeep, ""
}

// screenSDP removes from a parsed answer every a=candidate line screen
// does not keep, counting the refused ones. It reports whether it removed
// any (the caller then marshals the description again).
func (p *Peer) screenSDP(d *sdp.SessionDescription) bool {
	refused := map[string]int{}
	removed := false
	keep := func(attrs []sdp.Attribute) []sdp.Attribute {
		out := attrs[:0]
		for _, at := range attrs {
			if at.Key == "candidate" {
				v, reason := p.screen(at.Value)
				if v != candidateKeep {
					removed = true
					if v == candidateRefuse {
						refused[reason]++
					}
					continue
				}
			}
			out = append(out, at)
		}
		return out
	}
	d.Attributes = keep(d.Attributes)
	for _, m := range d.MediaDescriptions {
		m.Attributes = keep(m.Attributes)
	}
	n := 0
	for reason, k := range refused {
		for range k {
			p.refusedOne(reason, fromSDP)
		}
		n += k
	}
	if n > 0 {
		// One line per answer, reasons only: ICE addresses never reach logs.
		p.log.Debug("remote ICE candidates refused in the answer", "count", n, "reasons", refused)
	}
	return removed
}

// agentFilter is the peer's remote IP filter inside Pion's ICE agent. It
// runs on the agent's goroutine for every remote candidate (and for every
// STUN request from an unknown source), so it only counts and logs once.
func (p *Peer) agentFilter(ip net.IP) bool {
	r := p.agentPolicy.checkIP(ip)
	if r == "" {
		return true
	}
	p.refused.Add(1)
	if p.metrics != nil {
		p.metrics.ICECandidateRefused(r, fromICE)
	}
	// A forged or misdirected STUN flood would log every packet: the
	// first refusal of the peer is logged, the rest only counted.
	if p.iceRefusalLogged.CompareAndSwap(false, true) {
		p.log.Debug("remote ICE candidate refused by the ICE agent (further ones counted only)", "reason", r, "source", fromICE)
	}
	return false
}

// refusedOne counts one refused signaled candidate.
func (p *Peer) refusedOne(reason, source string) {
	p.refused.Add(1)
	if p.metrics != nil {
		p.metrics.ICECandidateRefused(reason, source)
	}
}
