package relay

import (
	"bufio"
	"encoding/binary"
	"io"
	"net"

	"github.com/pion/stun/v3"
)

// TCP relays (RFC 6062) are not served: turnd relays UDP only, to the
// appliance's own media port. pion/turn v4.1.4 does not refuse them either:
// it answers an Allocate whose REQUESTED-TRANSPORT is TCP with a UDP relay
// (it never asks the RelayAddressGenerator for a TCP one), so the client
// believes it holds a TCP allocation; and it has no handler for Connect
// and ConnectionBind, which it drops unanswered (the client waits out its
// retransmissions). So these requests are answered here, before pion reads
// them, with the errors RFC 6062 gives for a server without such an
// allocation:
//
//   - Allocate asking for TCP: 442 Unsupported Transport Protocol (§5.1),
//     once the request carries credentials — an unauthenticated one goes on
//     to pion, which challenges it (401 with a nonce), so a client sees the
//     error after the usual exchange rather than a bare one in its place;
//   - Connect: 437 Allocation Mismatch (§5.2: no TCP allocation exists);
//   - ConnectionBind: 400 Bad Request (§5.4: no such connection id).
//
// Nothing is allocated and no quota slot is taken for them.

// protoUDP is REQUESTED-TRANSPORT's value for UDP (an IANA protocol number).
const protoUDP = 17

// tcpRelayRefusal returns the error response for b when it is one of the
// requests above, else nil (b then goes to pion as it is).
func tcpRelayRefusal(b []byte) (resp []byte, method stun.Method) {
	if !stun.IsMessage(b) {
		return nil, 0
	}
	// The type alone rules out everything but the three methods without
	// decoding: this runs for every message on the listeners.
	var mt stun.MessageType
	mt.ReadValue(binary.BigEndian.Uint16(b[0:2]))
	if mt.Class != stun.ClassRequest {
		return nil, 0
	}
	var code stun.ErrorCode
	var reason string
	switch mt.Method {
	case stun.MethodConnect:
		code, reason = stun.CodeAllocMismatch, "no TCP allocation: this server relays UDP only"
	case stun.MethodConnectionBind:
		code, reason = stun.CodeBadRequest, "no such connection: this server relays UDP only"
	case stun.MethodAllocate:
		code, reason = stun.CodeUnsupportedTransProto, "TCP relays (RFC 6062) are not offered: request UDP"
	default:
		return nil, 0
	}
	m := &stun.Message{Raw: append([]byte(nil), b...)}
	if err := m.Decode(); err != nil {
		return nil, 0 // pion answers a malformed message as it always has
	}
	if mt.Method == stun.MethodAllocate {
		v, err := m.Get(stun.AttrRequestedTransport)
		if err != nil || len(v) < 1 || v[0] == protoUDP || !m.Contains(stun.AttrMessageIntegrity) {
			return nil, 0 // UDP, malformed (pion: 400) or not yet authenticated (pion: 401)
		}
	}
	out, err := stun.Build(stun.NewTransactionIDSetter(m.TransactionID), stun.NewType(mt.Method, stun.ClassErrorResponse),
		&stun.ErrorCodeAttribute{Code: code, Reason: []byte(reason)}, stun.Fingerprint)
	if err != nil {
		return nil, 0
	}
	return out.Raw, mt.Method
}

// refused counts and logs one answered RFC 6062 request; the client's
// address goes to the debug line only.
func (in *instance) refusedTCPRelay(method stun.Method, client net.Addr) {
	in.p.stats.tcpRelayRefusals.Add(1)
	in.p.rl.warnAddrs("tcp-relay", "TURN TCP relay request refused: turnd relays UDP only",
		[]any{"client", addrOf(client)}, "method", method.String())
}

// refusingPacketConn is the UDP listener as pion sees it.
type refusingPacketConn struct {
	net.PacketConn
	in *instance
}

func (c *refusingPacketConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		n, addr, err := c.PacketConn.ReadFrom(b)
		if err != nil {
			return n, addr, err
		}
		resp, method := tcpRelayRefusal(b[:n])
		if resp == nil {
			return n, addr, nil
		}
		_, _ = c.PacketConn.WriteTo(resp, addr)
		c.in.refusedTCPRelay(method, addr)
	}
}

// refusingConn is a TURN-over-TCP (or TLS) connection as pion sees it: the
// stream is cut into STUN messages and ChannelData frames (RFC 8656 §12.5:
// padded to 4 bytes over streams), the same boundaries pion's STUNConn
// finds, so that each request can be looked at whole.
type refusingConn struct {
	net.Conn
	in      *instance
	br      *bufio.Reader
	pending []byte // the rest of a frame pion has not read yet
}

func newRefusingConn(c net.Conn, in *instance) *refusingConn {
	return &refusingConn{Conn: c, in: in, br: bufio.NewReaderSize(c, 4096)}
}

func (c *refusingConn) Read(p []byte) (int, error) {
	for len(c.pending) == 0 {
		frame, err := c.next()
		if err != nil {
			return 0, err
		}
		if resp, method := tcpRelayRefusal(frame); resp != nil {
			// A net.Conn's (and a tls.Conn's) Write is one locked write:
			// it does not interleave with pion's responses.
			if _, err := c.Conn.Write(resp); err != nil {
				return 0, err
			}
			c.in.refusedTCPRelay(method, c.RemoteAddr())
			continue
		}
		c.pending = frame
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// next reads one frame. Bytes that are neither STUN nor ChannelData are
// handed on as they come: pion refuses them and ends the connection.
func (c *refusingConn) next() ([]byte, error) {
	hdr, err := c.br.Peek(4)
	if err != nil {
		return nil, err
	}
	var size int
	switch hdr[0] >> 6 {
	case 0: // STUN: a 20-byte header, then the attributes' length
		size = 20 + int(binary.BigEndian.Uint16(hdr[2:4]))
	case 1: // ChannelData: 4-byte header, data padded to 4
		size = 4 + (int(binary.BigEndian.Uint16(hdr[2:4]))+3)&^3
	default:
		b := make([]byte, c.br.Buffered())
		_, err := io.ReadFull(c.br, b)
		return b, err
	}
	frame := make([]byte, size)
	if _, err := io.ReadFull(c.br, frame); err != nil {
		return nil, err
	}
	return frame, nil
}
