package relay

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// peerPolicy decides which peers a relay may talk to. It is immutable.
//
// Order: a self address (with a self port, for datagrams) is allowed first,
// so that the appliance's own LAN address works although it is usually
// private; then every special-purpose class is denied; then allowPeers.
// Anything else is denied.
type peerPolicy struct {
	selfAddrs  map[netip.Addr]bool
	selfPorts  map[uint16]bool
	allowNets  []netip.Prefix
	allowPorts map[netip.AddrPort]bool
}

// deniedNets are the special-purpose ranges netip's predicates do not cover.
var deniedNets = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // carrier-grade NAT
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // reserved, and broadcast
		"::/96",           // IPv4-compatible (deprecated) — embeds IPv4
		"64:ff9b::/96",    // NAT64 — embeds IPv4
		"64:ff9b:1::/48",  // local NAT64
		"100::/64",        // discard
		"2001::/32",       // Teredo — embeds IPv4
		"2001:db8::/32",   // documentation
		"2002::/16",       // 6to4 — embeds IPv4
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

// normalize turns a peer IP from the wire into a comparable address:
// IPv4-mapped IPv6 (::ffff:a.b.c.d) becomes plain IPv4.
func normalize(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// special reports whether a belongs to a class a relay must never reach on
// its own say-so: loopback, private, link-local (incl. cloud metadata),
// multicast, unspecified, CGNAT, reserved, and IPv6 forms embedding IPv4.
func special(a netip.Addr) bool {
	if !a.IsValid() || a.IsLoopback() || a.IsPrivate() || a.IsUnspecified() || a.IsMulticast() ||
		a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() {
		return true
	}
	if a.Zone() != "" {
		return true
	}
	for _, p := range deniedNets {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func newPeerPolicy(self []string, ports []int, allow []string) (*peerPolicy, error) {
	p := &peerPolicy{selfAddrs: map[netip.Addr]bool{}, selfPorts: map[uint16]bool{}, allowPorts: map[netip.AddrPort]bool{}}
	for i, s := range self {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return nil, cerr("selfAddresses", "entry %d is not an IP address: %q", i, s)
		}
		a = a.Unmap()
		if a.IsUnspecified() || a.IsMulticast() {
			return nil, cerr("selfAddresses", "entry %d is not a unicast address: %q", i, s)
		}
		p.selfAddrs[a] = true
	}
	for i, port := range ports {
		if port < 1 || port > 65535 {
			return nil, cerr("selfPorts", "entry %d out of range: %d not in [1, 65535]", i, port)
		}
		p.selfPorts[uint16(port)] = true
	}
	if len(p.selfAddrs) > 0 && len(p.selfPorts) == 0 {
		return nil, cerr("selfPorts", "must not be empty when selfAddresses is set")
	}
	for i, s := range allow {
		s = strings.TrimSpace(s)
		if strings.Contains(s, "/") {
			pr, err := netip.ParsePrefix(s)
			if err != nil {
				return nil, cerr("allowPeers", "entry %d is not a CIDR: %q", i, s)
			}
			if pr.Addr().Is4In6() {
				return nil, cerr("allowPeers", "entry %d: write IPv4 ranges in IPv4 form: %q", i, s)
			}
			pr = pr.Masked()
			if (pr.Addr().Is4() && pr.Bits() < 16) || (pr.Addr().Is6() && pr.Bits() < 48) {
				return nil, cerr("allowPeers", "entry %d is too broad: %s (at most /16 for IPv4, /48 for IPv6)", i, s)
			}
			if special(pr.Addr()) {
				return nil, cerr("allowPeers", "entry %d is a special-purpose range: %s (put the appliance's own addresses in selfAddresses)", i, s)
			}
			p.allowNets = append(p.allowNets, pr)
			continue
		}
		ap, err := netip.ParseAddrPort(s)
		if err != nil || ap.Port() == 0 {
			return nil, cerr("allowPeers", "entry %d is neither a CIDR nor ip:port: %q", i, s)
		}
		ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if special(ap.Addr()) {
			return nil, cerr("allowPeers", "entry %d is a special-purpose address: %s (put the appliance's own addresses in selfAddresses)", i, s)
		}
		p.allowPorts[ap] = true
	}
	return p, nil
}

// permitIP is the CreatePermission / ChannelBind check (TURN permissions
// are per IP).
func (p *peerPolicy) permitIP(ip net.IP) bool {
	a, ok := normalize(ip)
	if !ok {
		return false
	}
	if p.selfAddrs[a] {
		return true
	}
	if special(a) {
		return false
	}
	for _, n := range p.allowNets {
		if n.Contains(a) {
			return true
		}
	}
	for ap := range p.allowPorts {
		if ap.Addr() == a {
			return true
		}
	}
	return false
}

// permitAddr is the per-datagram check on the relay socket: address and
// port.
func (p *peerPolicy) permitAddr(addr net.Addr) bool {
	var ip net.IP
	var port int
	switch u := addr.(type) {
	case *net.UDPAddr:
		ip, port = u.IP, u.Port
	default:
		host, ps, err := net.SplitHostPort(addr.String())
		if err != nil {
			return false
		}
		ip = net.ParseIP(host)
		port, _ = strconv.Atoi(ps)
	}
	a, ok := normalize(ip)
	if !ok || port < 1 || port > 65535 {
		return false
	}
	if p.selfAddrs[a] && p.selfPorts[uint16(port)] {
		return true
	}
	if special(a) {
		return false
	}
	if p.allowPorts[netip.AddrPortFrom(a, uint16(port))] {
		return true
	}
	for _, n := range p.allowNets {
		if n.Contains(a) {
			return true
		}
	}
	return false
}
