package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// relayConn is a relay socket as pion sees it. Every datagram, both ways,
// passes the peer policy (address and port) and the bandwidth buckets;
// what fails either is dropped and counted, never relayed.
type relayConn struct {
	net.PacketConn
	inst *instance
	port int
	// in and out are this allocation's buckets (bytes/s), one per
	// direction, so that a peer's replies do not eat the client's budget.
	in, out *rate.Limiter

	// Set once pion reports the allocation (guarded by inst.mu).
	user, id, tuple string

	lastAuth  atomic.Int64 // unix nanos of the last authenticated request
	closeOnce sync.Once
	closeErr  error
}

func (c *relayConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	st := &c.inst.p.stats
	if !c.inst.set.policy.permitAddr(addr) {
		st.policyDrops.Add(1)
		c.inst.p.rl.warnAddrs("policy", "relay datagram to a peer outside the allow list dropped", []any{"peer", addrOf(addr)})
		return len(b), nil
	}
	now := time.Now()
	if !c.out.AllowN(now, len(b)) || !c.inst.totalOut.AllowN(now, len(b)) {
		st.bandwidthDrops.Add(1)
		return len(b), nil
	}
	n, err := c.PacketConn.WriteTo(b, addr)
	if err == nil {
		st.relayedBytes.Add(uint64(n))
		st.relayedPackets.Add(1)
	}
	return n, err
}

func (c *relayConn) ReadFrom(b []byte) (int, net.Addr, error) {
	st := &c.inst.p.stats
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		if !c.inst.set.policy.permitAddr(addr) {
			st.policyDrops.Add(1)
			continue
		}
		now := time.Now()
		if !c.in.AllowN(now, n) || !c.inst.totalIn.AllowN(now, n) {
			st.bandwidthDrops.Add(1)
			continue
		}
		st.relayedBytes.Add(uint64(n))
		st.relayedPackets.Add(1)
		return n, addr, nil
	}
}

// Close closes the socket; pion's allocation read loop then ends and pion
// deletes the allocation. Closing from our side is how revocation and the
// lifetime cap end allocations.
func (c *relayConn) Close() error {
	c.closeOnce.Do(func() {
		c.inst.forget(c)
		c.closeErr = c.PacketConn.Close()
	})
	return c.closeErr
}

// bucket returns a limiter of kbps with a burst of 250 ms (at least two
// full-size datagrams): enough to absorb scheduling stalls and keyframe
// bursts without losing budget, small enough that the rate over a second or
// two stays at the cap.
func bucket(kbps int) *rate.Limiter {
	bps := float64(kbps) * 1000 / 8
	burst := max(int(bps/4), 2*1600)
	return rate.NewLimiter(rate.Limit(bps), burst)
}

var errNoRelayPort = errors.New("turnd: no free relay port")

// AllocatePacketConn implements turn.RelayAddressGenerator: a UDP socket on
// relayAddress in the configured port range, wrapped in a relayConn.
func (in *instance) AllocatePacketConn(network string, requestedPort int) (net.PacketConn, net.Addr, error) {
	if network != "udp4" && network != "udp" {
		return nil, nil, fmt.Errorf("turnd: relay network %q not supported", network)
	}
	in.mu.Lock()
	full := len(in.conns) >= in.set.MaxAllocations || in.closed
	in.mu.Unlock()
	if full {
		in.p.stats.quotaRejects.Add(1)
		return nil, nil, errors.New("turnd: allocation limit reached")
	}
	lo, hi := in.set.RelayPortMin, in.set.RelayPortMax
	ports := []int{}
	if requestedPort != 0 {
		if requestedPort < lo || requestedPort > hi {
			return nil, nil, fmt.Errorf("turnd: requested port %d outside the relay range", requestedPort)
		}
		ports = append(ports, requestedPort)
	} else {
		n := hi - lo + 1
		start := rand.IntN(n)
		for i := range n {
			ports = append(ports, lo+(start+i)%n)
		}
	}
	lc := net.ListenConfig{Control: in.bufControl}
	for _, port := range ports {
		pc, err := lc.ListenPacket(context.Background(), "udp4", net.JoinHostPort(in.set.relayIP.String(), fmt.Sprint(port)))
		if err != nil {
			continue
		}
		c := &relayConn{
			PacketConn: pc, inst: in, port: port,
			in: bucket(in.set.RelayKbpsPerAllocation), out: bucket(in.set.RelayKbpsPerAllocation),
		}
		c.lastAuth.Store(time.Now().UnixNano())
		in.mu.Lock()
		if in.closed {
			in.mu.Unlock()
			pc.Close()
			return nil, nil, errors.New("turnd: shutting down")
		}
		in.conns[port] = c
		in.mu.Unlock()
		in.p.stats.allocationsTotal.Add(1)
		in.logBufferOnce.Do(func() { in.logBuffers("relay", pc) })
		return c, &net.UDPAddr{IP: in.set.relayIP.AsSlice(), Port: port}, nil
	}
	return nil, nil, errNoRelayPort
}

// AllocateConn implements turn.RelayAddressGenerator: TCP relays (RFC 6062)
// are not offered.
func (in *instance) AllocateConn(string, int) (net.Conn, net.Addr, error) {
	return nil, nil, errors.New("turnd: TCP relays are not supported")
}

// Validate implements turn.RelayAddressGenerator.
func (in *instance) Validate() error { return nil }
