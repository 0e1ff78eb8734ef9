package relay

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pion/turn/v4"
	"golang.org/x/time/rate"
)

// pendingTTL bounds how long a quota slot reserved for an Allocate waits
// for pion to report the allocation.
const pendingTTL = 5 * time.Second

type pending struct {
	user string
	at   time.Time
}

// instance is one running TURN server for one validated config.
type instance struct {
	p   *Plugin
	set *settings

	server   *turn.Server
	udp      net.PacketConn
	tcp, tls *trackingListener

	totalIn, totalOut *rate.Limiter
	logBufferOnce     sync.Once

	mu      sync.Mutex
	closed  bool
	conns   map[int]*relayConn    // by relay port
	byTuple map[string]*relayConn // by client 5-tuple
	perUser map[string]int
	pending []pending

	stop chan struct{}
	done chan struct{}
}

func tupleKey(src, dst net.Addr) string { return src.String() + "|" + dst.String() }

// startInstance binds the listeners and starts the pion server.
func (p *Plugin) startInstance(set *settings) (_ *instance, err error) {
	in := &instance{
		p: p, set: set,
		totalIn: bucket(set.RelayKbpsTotal), totalOut: bucket(set.RelayKbpsTotal),
		conns: map[int]*relayConn{}, byTuple: map[string]*relayConn{}, perUser: map[string]int{},
		stop: make(chan struct{}), done: make(chan struct{}),
	}
	defer func() {
		if err != nil {
			in.closeListeners()
		}
	}()
	cfg := turn.ServerConfig{
		Realm:         set.Realm,
		LoggerFactory: pionLoggerFactory{rl: p.rl},
		AuthHandler:   p.authenticate,
		QuotaHandler:  in.quota,
		EventHandler: turn.EventHandler{
			OnAuth:              in.onAuth,
			OnAllocationCreated: in.onAllocationCreated,
		},
	}
	if set.ListenUDP != "" {
		lc := net.ListenConfig{Control: in.bufControl}
		pc, err := lc.ListenPacket(p.Life(), "udp", set.ListenUDP)
		if err != nil {
			return nil, cerr("listenUDP", "%v", err)
		}
		in.udp = pc
		in.logBuffers("listener", pc)
		cfg.PacketConnConfigs = append(cfg.PacketConnConfigs, turn.PacketConnConfig{
			PacketConn: &refusingPacketConn{PacketConn: pc, in: in}, RelayAddressGenerator: in, PermissionHandler: in.permit,
		})
	}
	if set.ListenTCP != "" {
		l, err := net.Listen("tcp", set.ListenTCP)
		if err != nil {
			return nil, cerr("listenTCP", "%v", err)
		}
		in.tcp = newTrackingListener(l, in)
		cfg.ListenerConfigs = append(cfg.ListenerConfigs, turn.ListenerConfig{
			Listener: in.tcp, RelayAddressGenerator: in, PermissionHandler: in.permit,
		})
	}
	if set.ListenTLS != "" {
		cr, err := newCertReloader(set.CertFile, set.KeyFile, p.log)
		if err != nil {
			return nil, cerr("certFile", "%v", err)
		}
		l, err := net.Listen("tcp", set.ListenTLS)
		if err != nil {
			return nil, cerr("listenTLS", "%v", err)
		}
		in.tls = newTrackingListener(tls.NewListener(l, &tls.Config{GetCertificate: cr.GetCertificate, MinVersion: tls.VersionTLS12}), in)
		cfg.ListenerConfigs = append(cfg.ListenerConfigs, turn.ListenerConfig{
			Listener: in.tls, RelayAddressGenerator: in, PermissionHandler: in.permit,
		})
	}
	// pion/turn falls back to an allow-all permission handler when none is
	// given: every listener must carry ours.
	for _, c := range cfg.PacketConnConfigs {
		if c.PermissionHandler == nil {
			return nil, errors.New("turnd: a UDP listener without the peer policy")
		}
	}
	for _, c := range cfg.ListenerConfigs {
		if c.PermissionHandler == nil {
			return nil, errors.New("turnd: a TCP listener without the peer policy")
		}
	}
	in.server, err = turn.NewServer(cfg)
	if err != nil {
		return nil, fmt.Errorf("turnd: %w", err)
	}
	go in.watchdog()
	if len(set.policy.selfAddrs) == 0 && len(set.policy.allowNets) == 0 && len(set.policy.allowPorts) == 0 {
		p.log.Warn("selfAddresses and allowPeers are empty: relays can reach no peer")
	}
	p.log.Info("TURN server started", "udp", addrString(in.udp), "tcp", listenerString(in.tcp), "tls", listenerString(in.tls),
		"relayAddress", set.relayIP.String(), "relayPorts", fmt.Sprintf("%d-%d", set.RelayPortMin, set.RelayPortMax),
		"selfAddresses", set.SelfAddresses, "selfPorts", set.SelfPorts, "allowPeers", set.AllowPeers)
	return in, nil
}

func addrString(pc net.PacketConn) string {
	if pc == nil {
		return ""
	}
	return pc.LocalAddr().String()
}

func listenerString(l *trackingListener) string {
	if l == nil {
		return ""
	}
	return l.Addr().String()
}

func (in *instance) closeListeners() {
	if in.udp != nil {
		in.udp.Close()
	}
	if in.tcp != nil {
		in.tcp.Close()
	}
	if in.tls != nil {
		in.tls.Close()
	}
}

// close stops the server and ends every allocation.
func (in *instance) close() {
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return
	}
	in.closed = true
	conns := make([]*relayConn, 0, len(in.conns))
	for _, c := range in.conns {
		conns = append(conns, c)
	}
	in.mu.Unlock()
	close(in.stop)
	<-in.done
	if in.server != nil {
		_ = in.server.Close()
	}
	in.closeListeners()
	for _, c := range conns {
		c.Close()
	}
}

// bufControl sets the socket buffers of UDP sockets before they bind.
func (in *instance) bufControl(network, _ string, rc syscall.RawConn) error {
	if !strings.HasPrefix(network, "udp") {
		return nil
	}
	return rc.Control(func(fd uintptr) { setBuffers(fd, in.set.SocketBuffer) })
}

func (in *instance) logBuffers(what string, pc net.PacketConn) {
	sc, ok := pc.(syscall.Conn)
	if !ok {
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return
	}
	var rcv, snd int
	_ = rc.Control(func(fd uintptr) { rcv, snd = getBuffers(fd) })
	in.p.log.Info("UDP socket buffers", "socket", what, "requested", in.set.SocketBuffer, "effectiveRcv", rcv, "effectiveSnd", snd)
	if rcv < in.set.SocketBuffer {
		in.p.log.Warn("UDP receive buffer smaller than socketBuffer: raise net.core.rmem_max or grant CAP_NET_ADMIN",
			"socket", what, "requested", in.set.SocketBuffer, "effective", rcv)
	}
}

// permit is the pion PermissionHandler (CreatePermission, ChannelBind).
func (in *instance) permit(client net.Addr, peer net.IP) bool {
	if in.set.policy.permitIP(peer) {
		return true
	}
	in.p.stats.permissionDenies.Add(1)
	in.p.rl.warnAddrs("permission", "TURN permission refused: peer outside the allow list", []any{"peer", peer.String(), "client", addrOf(client)})
	return false
}

// quota is the pion QuotaHandler: false answers 486 Allocation Quota
// Reached. It reserves a slot that onAllocationCreated turns into a live
// allocation, so concurrent Allocates cannot both take the last slot.
func (in *instance) quota(username, _ string, src net.Addr) bool {
	user, ok := in.p.userOf(username)
	if !ok {
		in.p.stats.quotaRejects.Add(1)
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	now := time.Now()
	kept := in.pending[:0]
	for _, pd := range in.pending {
		if now.Sub(pd.at) < pendingTTL {
			kept = append(kept, pd)
		}
	}
	in.pending = kept
	mine := in.perUser[user]
	for _, pd := range in.pending {
		if pd.user == user {
			mine++
		}
	}
	switch {
	case mine >= in.set.MaxAllocationsPerUser:
		in.p.stats.quotaRejects.Add(1)
		in.p.rl.warnAddrs("quota", "TURN allocation refused: per-user quota reached", []any{"client", addrOf(src)}, "user", nameTag(user), "limit", in.set.MaxAllocationsPerUser)
		return false
	case len(in.conns)+len(in.pending) >= in.set.MaxAllocations:
		in.p.stats.quotaRejects.Add(1)
		in.p.rl.warnAddrs("quota", "TURN allocation refused: total quota reached", []any{"client", addrOf(src)}, "limit", in.set.MaxAllocations)
		return false
	}
	in.pending = append(in.pending, pending{user: user, at: now})
	return true
}

func (in *instance) onAllocationCreated(src, dst net.Addr, _, username, _ string, relayAddr net.Addr, _ int) {
	user, _ := in.p.userOf(username)
	_, id, _ := parseUsername(username)
	port := 0
	if u, ok := relayAddr.(*net.UDPAddr); ok {
		port = u.Port
	}
	in.mu.Lock()
	for i, pd := range in.pending {
		if pd.user == user {
			in.pending = append(in.pending[:i], in.pending[i+1:]...)
			break
		}
	}
	c := in.conns[port]
	if c == nil || c.tuple != "" {
		in.mu.Unlock()
		return
	}
	c.user, c.id, c.tuple = user, id, tupleKey(src, dst)
	in.byTuple[c.tuple] = c
	in.perUser[user]++
	in.mu.Unlock()
	// A Revoke that ran between the authentication and now did not see this
	// allocation: close it here.
	if _, live := in.p.userOf(username); !live {
		c.Close()
	}
}

// onAuth counts bad message integrity (a wrong password) and records each
// authenticated request on its allocation, for the lifetime cap.
func (in *instance) onAuth(src, dst net.Addr, _, username, _, method string, verdict bool) {
	if !verdict {
		in.p.stats.authFailures.Add(1)
		_, id, _ := parseUsername(username)
		in.p.rl.warnAddrs("auth", "TURN credential refused: wrong password (HMAC)", []any{"client", addrOf(src)}, "id", id, "method", method)
		return
	}
	in.mu.Lock()
	c := in.byTuple[tupleKey(src, dst)]
	in.mu.Unlock()
	if c != nil {
		c.lastAuth.Store(time.Now().UnixNano())
	}
}

// forget drops c from the tables (c is closing).
func (in *instance) forget(c *relayConn) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.conns[c.port] == c {
		delete(in.conns, c.port)
	}
	if c.tuple != "" && in.byTuple[c.tuple] == c {
		delete(in.byTuple, c.tuple)
		if in.perUser[c.user]--; in.perUser[c.user] <= 0 {
			delete(in.perUser, c.user)
		}
	}
}

// closeIDs closes the allocations made with the credential ids.
func (in *instance) closeIDs(ids map[string]bool) int {
	in.mu.Lock()
	var victims []*relayConn
	for _, c := range in.conns {
		if ids[c.id] {
			victims = append(victims, c)
		}
	}
	in.mu.Unlock()
	for _, c := range victims {
		c.Close()
	}
	return len(victims)
}

func (in *instance) active() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.conns)
}

// watchdog closes allocations without an authenticated request for
// allocationLifetime (pion itself grants up to an hour), prunes expired
// credentials and notices rotated secret files.
func (in *instance) watchdog() {
	defer close(in.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-in.stop:
			return
		case now := <-t.C:
			in.mu.Lock()
			var old []*relayConn
			var ids []string
			for _, c := range in.conns {
				if now.Sub(time.Unix(0, c.lastAuth.Load())) > in.set.lifetime {
					old = append(old, c)
					ids = append(ids, c.id)
				}
			}
			in.mu.Unlock()
			for i, c := range old {
				in.p.log.Info("TURN allocation closed: no re-authentication within allocationLifetime", "id", ids[i], "port", c.port)
				c.Close()
			}
			in.p.housekeeping(now)
		}
	}
}

// urls are the turn:/turns: URLs of the running listeners.
func (in *instance) urls() []string {
	hosts := in.set.AdvertisedHosts
	if len(hosts) == 0 {
		hosts = []string{in.set.relayIP.String()}
	}
	port := func(a net.Addr) string {
		ap, err := netip.ParseAddrPort(a.String())
		if err != nil {
			_, p, _ := net.SplitHostPort(a.String())
			return p
		}
		return strconv.Itoa(int(ap.Port()))
	}
	var out []string
	for _, h := range hosts {
		if in.udp != nil {
			out = append(out, "turn:"+net.JoinHostPort(h, port(in.udp.LocalAddr()))+"?transport=udp")
		}
		if in.tcp != nil {
			out = append(out, "turn:"+net.JoinHostPort(h, port(in.tcp.Addr()))+"?transport=tcp")
		}
		if in.tls != nil {
			out = append(out, "turns:"+net.JoinHostPort(h, port(in.tls.Addr()))+"?transport=tcp")
		}
	}
	return out
}

// trackingListener remembers accepted connections so that closing the
// server also closes them (pion's Server.Close closes only the listener),
// and hands pion each connection behind the RFC 6062 refusal.
type trackingListener struct {
	net.Listener
	in     *instance
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func newTrackingListener(l net.Listener, in *instance) *trackingListener {
	return &trackingListener{Listener: l, in: in, conns: map[net.Conn]struct{}{}}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: newRefusingConn(c, l.in), l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

func (l *trackingListener) Close() error {
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	err := l.Listener.Close()
	for c := range conns {
		c.(*trackedConn).Conn.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

type trackedConn struct {
	net.Conn
	l *trackingListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}
