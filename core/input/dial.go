package input

import (
	"net/netip"
	"strconv"
)

// DialPolicy is the navigation policy applied to one connection by the
// address it is made to (core/egress: the session's egress proxy resolves
// once and asks before it connects). It is what makes the policy hold for
// every request of a page — subresources, WebSockets, popups, redirects —
// and against DNS rebinding, where CheckURL (a name resolved once to check
// and again by Chromium to connect) only guards the navigate action.
type DialPolicy struct{ c *compiled }

// DialPolicy compiles p for per-connection decisions.
func (p Policy) DialPolicy() (*DialPolicy, error) {
	c, err := p.compile()
	if err != nil {
		return nil, err
	}
	return &DialPolicy{c: c}, nil
}

// Refuse says why a connection to addr:port, asked for as host (a
// lowercase name, "" for an IP literal), is refused, or "". DenyHosts
// apply to the name and the address; AllowLoopbackHosts exceptions (by
// name or address, with their port) let a private address through;
// AllowHosts, when set, must match the name or the address; DenyPrivate
// then refuses every address that is not public unicast — whatever name
// led to it.
func (d *DialPolicy) Refuse(host string, addr netip.Addr, port uint16) string {
	c := d.c
	addr = addr.Unmap()
	ps := strconv.Itoa(int(port))
	if host != "" && c.deny.matchName(host) {
		return "denied host"
	}
	if c.deny.matchAddr(addr) {
		return "denied address"
	}
	if host != "" && c.isException(hostTarget{name: host, port: ps}) || c.isException(hostTarget{addr: addr, port: ps}) {
		return ""
	}
	if !c.allow.empty() && !(host != "" && c.allow.matchName(host)) && !c.allow.matchAddr(addr) {
		return "host not allowed"
	}
	if c.DenyPrivate && isPrivate(addr) {
		return "private address"
	}
	return ""
}
