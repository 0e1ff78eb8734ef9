// Package egress is the wall between a session's Chromium and the network.
//
// Every request of a session's browser context — documents, subresources,
// WebSockets, a popup's first request, redirects, prefetch, service
// workers — goes to an HTTP proxy on loopback that this package runs
// (Target.createBrowserContext's proxyServer, with "<-loopback>" so that
// loopback goes through it too). The proxy resolves a host name once,
// decides on each address it got, and dials exactly an address it allowed:
// there is no second resolution between the check and the connection, so
// a name that answers public and then private (DNS rebinding) reaches
// nothing private. With an upstream proxy (the company's), the upstream is
// asked for the checked address (CONNECT 203.0.113.10:443), never for the
// name, so it cannot resolve it again to something else either.
//
// Lifecycle: New, then Listen once per browser context (a Listener per
// session, so that a refusal is the session's and each session may have
// its own upstream), Listener.Close when the context goes, Proxy.Close at
// shutdown (closes every listener and every connection, and waits for
// their goroutines).
package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Decider decides on a connection by the address it will be made to.
// Refuse says why a connection to addr:port, asked for as host (a
// lowercase name, or "" when the request named an IP literal), is
// refused, or "" when it is allowed. It must be safe for concurrent use.
type Decider interface {
	Refuse(host string, addr netip.Addr, port uint16) string
}

// Resolver looks host names up; *net.Resolver satisfies it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Options configure New.
type Options struct {
	Decider  Decider
	Resolver Resolver // default net.DefaultResolver
	// DialTimeout bounds resolution plus connection (default 10 s);
	// resolution alone is bounded by 2 s and fails closed.
	DialTimeout time.Duration
	// MaxConns bounds the connections one listener serves at once
	// (default 512: a busy page opens a few dozen).
	MaxConns int
	// OnRefuse, if set, is told of every refusal (label of the listener,
	// the host as asked, the reason). It must not block.
	OnRefuse func(label, host, reason string)
	// Direct says which allowed addresses are reached without the
	// upstream proxy (default: loopback, private and link-local ones —
	// the panel's own address, an intranet exception — which the
	// company's proxy would not reach).
	Direct func(netip.Addr) bool
	Logger *slog.Logger
}

const (
	defaultDialTimeout = 10 * time.Second
	resolveTimeout     = 2 * time.Second
	defaultMaxConns    = 512
)

// Proxy owns the listeners of every browser context.
type Proxy struct {
	o   Options
	log *slog.Logger

	mu        sync.Mutex
	listeners map[*Listener]struct{}
	closed    bool

	refused atomic.Uint64
	allowed atomic.Uint64
}

// New returns a proxy with no listener yet.
func New(o Options) (*Proxy, error) {
	if o.Decider == nil {
		return nil, errors.New("egress: no decider")
	}
	if o.Resolver == nil {
		o.Resolver = net.DefaultResolver
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = defaultDialTimeout
	}
	if o.MaxConns <= 0 {
		o.MaxConns = defaultMaxConns
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Direct == nil {
		o.Direct = isLocal
	}
	return &Proxy{o: o, log: o.Logger, listeners: map[*Listener]struct{}{}}, nil
}

// Stats are the proxy's counts since New.
type Stats struct {
	Allowed, Refused uint64 // connections
}

// Stats returns the counts.
func (p *Proxy) Stats() Stats {
	return Stats{Allowed: p.allowed.Load(), Refused: p.refused.Load()}
}

// ErrClosed is returned by Listen after Close.
var ErrClosed = errors.New("egress: closed")

// Listen opens a loopback listener for one browser context. label names it
// in logs and OnRefuse (a session id); up, if not nil, is the upstream
// proxy its connections go through.
func (p *Proxy) Listen(label string, up *Upstream) (*Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("egress: listen: %w", err)
	}
	l := &Listener{p: p, label: label, up: up, ln: ln, conns: map[net.Conn]struct{}{}, slots: make(chan struct{}, p.o.MaxConns)}
	l.transport = &http.Transport{
		Proxy:               nil, // the upstream, if any, is reached by address in dial
		DialContext:         l.dialChecked,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
		ForceAttemptHTTP2:   false,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	l.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// A forward proxy: the request keeps its absolute URL and
			// Host; nothing is added (no X-Forwarded-For: the page's
			// address is the box's own).
			u := *pr.In.URL
			pr.Out.URL = &u
			pr.Out.Host = pr.In.Host
		},
		Transport:    l.transport,
		ErrorHandler: l.roundTripError,
		ErrorLog:     slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	l.srv = &http.Server{
		Handler:           l,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		ConnState:         l.connState,
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		ln.Close()
		return nil, ErrClosed
	}
	p.listeners[l] = struct{}{}
	p.mu.Unlock()
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		_ = l.srv.Serve(ln) // ends with Close
	}()
	return l, nil
}

// Close closes every listener and connection and waits for them.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	ls := make([]*Listener, 0, len(p.listeners))
	for l := range p.listeners {
		ls = append(ls, l)
	}
	p.mu.Unlock()
	for _, l := range ls {
		l.Close()
	}
	return nil
}

// Listener is one browser context's proxy endpoint.
type Listener struct {
	p         *Proxy
	label     string
	up        *Upstream
	ln        net.Listener
	srv       *http.Server
	transport *http.Transport
	rp        *httputil.ReverseProxy
	slots     chan struct{} // bounds the connections in flight

	mu     sync.Mutex
	conns  map[net.Conn]struct{} // hijacked tunnels, closed by Close
	closed bool
	wg     sync.WaitGroup

	refused atomic.Uint64
}

// Server is what Chromium's proxyServer names: http://127.0.0.1:PORT.
func (l *Listener) Server() string { return "http://" + l.ln.Addr().String() }

// Refused counts this listener's refusals.
func (l *Listener) Refused() uint64 { return l.refused.Load() }

// Close stops the listener, ends its tunnels and waits for its goroutines.
// It is idempotent.
func (l *Listener) Close() {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	for c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	_ = l.srv.Close()
	l.transport.CloseIdleConnections()
	l.wg.Wait()
	l.p.mu.Lock()
	delete(l.p.listeners, l)
	l.p.mu.Unlock()
}

// connState bounds the connections: one over MaxConns is closed at once
// (Chromium retries; a page cannot make the core hold unbounded sockets).
func (l *Listener) connState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		select {
		case l.slots <- struct{}{}:
		default:
			l.p.log.Debug("egress: connection limit reached", "session", l.label)
			c.Close()
		}
	case http.StateClosed, http.StateHijacked:
		select {
		case <-l.slots:
		default:
		}
	}
}

// ServeHTTP serves CONNECT tunnels (https, wss, ws: Chromium tunnels every
// WebSocket) and absolute-form http requests; nothing else.
func (l *Listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		l.connect(w, r)
		return
	}
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "egress: not a proxy request (bad_request)", http.StatusBadRequest)
		return
	}
	l.rp.ServeHTTP(w, r)
}

func (l *Listener) connect(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), l.p.o.DialTimeout)
	defer cancel()
	up, err := l.dialChecked(ctx, "tcp", r.Host)
	if err != nil {
		l.writeRefusal(w, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "egress: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !l.track(down, up) {
		down.Close()
		up.Close()
		return
	}
	_, _ = down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	// Bytes Chromium sent after its CONNECT (a TLS ClientHello) may sit in
	// the server's reader already.
	var first io.Reader = down
	if n := brw.Reader.Buffered(); n > 0 {
		b, _ := brw.Reader.Peek(n)
		first = io.MultiReader(strings.NewReader(string(b)), down)
	}
	l.wg.Add(2)
	go func() { defer l.wg.Done(); _, _ = io.Copy(up, first); closeWrite(up) }()
	go func() {
		defer l.wg.Done()
		_, _ = io.Copy(down, up)
		l.untrack(down, up)
	}()
}

// track registers a tunnel's two ends, unless the listener is closed.
func (l *Listener) track(cs ...net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	for _, c := range cs {
		l.conns[c] = struct{}{}
	}
	return true
}

func (l *Listener) untrack(cs ...net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(l.conns, c)
	}
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// Refusal is a connection the policy refused.
type Refusal struct {
	Host   string // as asked (name or address literal)
	Reason string
}

func (r *Refusal) Error() string {
	return fmt.Sprintf("egress: %s refused (egress_refused): %s", r.Host, r.Reason)
}

// dialChecked resolves hostport's host once, keeps the addresses the
// decider allows and connects to the first that answers — directly or
// through the upstream, by address.
func (l *Listener) dialChecked(ctx context.Context, _, hostport string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, l.refuse(hostport, "bad host:port")
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil || port == 0 {
		return nil, l.refuse(host, "bad port")
	}
	name, addrs, why := l.p.resolve(ctx, host)
	if why != "" {
		return nil, l.refuse(host, why)
	}
	var allowed []netip.Addr
	firstReason := ""
	for _, a := range addrs {
		if why := l.p.o.Decider.Refuse(name, a, uint16(port)); why != "" {
			if firstReason == "" {
				firstReason = why
			}
			continue
		}
		allowed = append(allowed, a)
	}
	if len(allowed) == 0 {
		return nil, l.refuse(host, firstReason)
	}
	var errs []error
	for _, a := range allowed {
		target := netip.AddrPortFrom(a, uint16(port)).String()
		var c net.Conn
		if l.up != nil && !l.p.o.Direct(a) {
			c, err = l.up.dial(ctx, target)
		} else {
			var d net.Dialer
			c, err = d.DialContext(ctx, "tcp", target)
		}
		if err == nil {
			l.p.allowed.Add(1)
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("egress: connect %s: %w", host, errors.Join(errs...))
}

// refuse counts, logs (debug, the host only: never a path or query) and
// reports a refusal.
func (l *Listener) refuse(host, reason string) error {
	l.refused.Add(1)
	l.p.refused.Add(1)
	l.p.log.Debug("egress: connection refused", "session", l.label, "host", host, "reason", reason)
	if l.p.o.OnRefuse != nil {
		l.p.o.OnRefuse(l.label, host, reason)
	}
	return &Refusal{Host: host, Reason: reason}
}

// roundTripError answers a plain http request that could not be made: a
// page the session's owner sees, saying which host was refused and why.
func (l *Listener) roundTripError(w http.ResponseWriter, _ *http.Request, err error) {
	l.writeRefusal(w, err)
}

func (l *Listener) writeRefusal(w http.ResponseWriter, err error) {
	var rf *Refusal
	if errors.As(err, &rf) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("X-Tabcast-Egress", "refused")
		w.WriteHeader(http.StatusForbidden)
		fmt.Fprintf(w, "<!doctype html><title>Blocked</title><h1>Blocked by the appliance's policy</h1><p>%s: %s</p>\n",
			htmlEscape(rf.Host), htmlEscape(rf.Reason))
		return
	}
	l.p.log.Debug("egress: upstream failed", "session", l.label, "err", err)
	http.Error(w, "egress: could not connect (egress_unreachable)", http.StatusBadGateway)
}

func htmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;", "'", "&#39;").Replace(s)
}

// CheckUpstream refuses an upstream proxy the policy would not let a page
// connect to (a session's own upstream comes from the API: it must not be
// a way around the policy to a LAN host). The appliance's configured
// upstream is IT's choice and is not checked. A checked upstream is
// pinned to the address it was checked on.
func (p *Proxy) CheckUpstream(ctx context.Context, up *Upstream) error {
	port, err := strconv.ParseUint(up.Port(), 10, 16)
	if err != nil || port == 0 {
		return fmt.Errorf("egress: upstream proxy %s: bad port (bad_proxy)", up)
	}
	name, addrs, why := p.resolve(ctx, up.Host())
	if why != "" {
		return fmt.Errorf("egress: upstream proxy %s: %s (bad_proxy)", up, why)
	}
	for _, a := range addrs {
		if why := p.o.Decider.Refuse(name, a, uint16(port)); why != "" {
			return fmt.Errorf("egress: upstream proxy %s refused by policy: %s (bad_proxy)", up, why)
		}
	}
	// Pinned to the address checked: the upstream's name is not
	// resolved again (it could answer differently the next time).
	up.addr = netip.AddrPortFrom(addrs[0], uint16(port)).String()
	return nil
}

// isLocal is an address the box reaches on its own networks.
func isLocal(a netip.Addr) bool {
	return a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsUnspecified()
}

// resolve reads host once: an IP literal as it is, a name through the
// resolver (2 s, fail closed). It returns the lowercase name ("" for a
// literal), the unmapped addresses, or why there are none.
func (p *Proxy) resolve(ctx context.Context, host string) (string, []netip.Addr, string) {
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", nil, "zoned address"
		}
		return "", []netip.Addr{a.Unmap()}, ""
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	rctx, cancel := context.WithTimeout(ctx, resolveTimeout)
	defer cancel()
	got, err := p.o.Resolver.LookupNetIP(rctx, "ip", name)
	if err != nil || len(got) == 0 {
		return "", nil, "host does not resolve"
	}
	addrs := make([]netip.Addr, len(got))
	for i, a := range got {
		addrs[i] = a.Unmap()
	}
	return name, addrs, ""
}
