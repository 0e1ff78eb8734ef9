// Package rig is the attack rig of ../shared/design/attack-rig.md, built
// inside a network namespace the test creates: the appliance runs in it
// (harness.Options.NetNS) beside a LAN host, a second LAN host, a cloud
// metadata mock at 169.254.169.254, a "public" host on TEST-NET-3 serving
// the attacker's pages, a loopback-only service, a CONNECT proxy standing
// for the company's, and a DNS server of the test's own that answers
// rebinding names public first and private after. Every listener records
// each connection it accepts and each request or datagram it gets; a check
// passes when the internal listeners' logs stay empty. Nothing leaves the
// namespace: the servers are the test process's own sockets, made inside
// it.
package rig

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/tabcast/tabcast/core/egress/egresstest"
	"github.com/tabcast/tabcast/test/netns"
)

// The rig's addresses.
const (
	LAN      = "10.66.0.2"       // an intranet admin page, a printer
	LAN2     = "10.66.0.3"       // another intranet host
	Metadata = "169.254.169.254" // the cloud metadata service
	Public   = "203.0.113.10"    // the attacker's "internet" host
	DNS      = "10.66.0.53"
	Upstream = "10.66.0.9" // the company's proxy (CONNECT, port 3128)
	// MetadataSecret is what the metadata mock's credentials page holds.
	MetadataSecret = "AKIA-RIG-SECRET-0123456789"
)

// Rig is one built rig.
type Rig struct {
	NS *netns.NS
	// Loopback is the loopback-only service's address in the namespace
	// (127.0.0.1:port), which no policy allows.
	Loopback string
	// LoopbackPage is a loopback listener serving SetHostPage pages
	// ("loopbackPage"): the allowed local page of the same-class attacks.
	LoopbackPage string
	// AppAddr is the namespace's address the test reaches the appliance on.
	AppAddr string

	mu       sync.Mutex
	hits     map[string][]string // listener → what reached it
	pages    map[string]string   // public host path → HTML
	dnsAsked map[string]int      // name → A queries
	connects []string            // CONNECT targets the upstream proxy was asked
}

// New builds the rig; t.Cleanup removes it.
func New(t *testing.T) *Rig {
	t.Helper()
	ns := netns.Create(t, "rig")
	ns.AddLocal(t, LAN+"/32", LAN2+"/32", Metadata+"/32", Public+"/32", DNS+"/32", Upstream+"/32")
	ns.SetResolver(t, DNS)
	r := &Rig{NS: ns, AppAddr: ns.NSIP, hits: map[string][]string{}, pages: map[string]string{}, dnsAsked: map[string]int{}}

	r.serveHTTP(t, "lan", ns.Listen(t, LAN+":80"), r.internal("lan"))
	r.serveHTTP(t, "lan2", ns.Listen(t, LAN2+":80"), r.internal("lan2"))
	r.serveHTTP(t, "metadata", ns.Listen(t, Metadata+":80"), r.internal("metadata"))
	lo := ns.Listen(t, "127.0.0.1:0")
	r.Loopback = lo.Addr().String()
	r.serveHTTP(t, "loopback", lo, r.internal("loopback"))
	lp := ns.Listen(t, "127.0.0.1:0")
	r.LoopbackPage = lp.Addr().String()
	r.serveHTTP(t, "loopbackPage", lp, r.internal("loopbackPage"))
	r.serveHTTP(t, "public", ns.Listen(t, Public+":80"), http.HandlerFunc(r.public))
	for _, a := range []string{LAN + ":3478", Metadata + ":3478", "127.0.0.1:3478", LAN2 + ":3478"} {
		r.serveUDP(t, "udp "+a, ns.ListenPacket(t, a))
	}
	r.serveDNS(t, ns.ListenPacket(t, DNS+":53"))
	r.serveUpstream(t, ns.Listen(t, Upstream+":3128"))
	// A proxy on the "internet": one a session may name for itself.
	r.serveUpstream(t, ns.Listen(t, Public+":3128"))
	return r
}

// SetPage serves html at path on the public host.
func (r *Rig) SetPage(path, html string) {
	r.mu.Lock()
	r.pages[path] = html
	r.mu.Unlock()
}

// Hits is what reached the listener named ("lan", "lan2", "metadata",
// "loopback", "public", "udp 10.66.0.2:3478", …).
func (r *Rig) Hits(name string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.hits[name]...)
}

// DeniedHits is everything that reached a listener no policy of the
// tests allows: the second LAN host, metadata, the loopback service and
// their UDP ports (not the public host, the upstream proxy, nor "lan"
// and "loopbackPage", which the tests list as allowed pages).
func (r *Rig) DeniedHits() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for name, h := range r.hits {
		if name == "public" || name == "upstream" || name == "lan" || name == "loopbackPage" {
			continue
		}
		for _, x := range h {
			out = append(out, name+": "+x)
		}
	}
	return out
}

// DNSAsked is how many A queries name got.
func (r *Rig) DNSAsked(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.dnsAsked[strings.ToLower(strings.TrimSuffix(name, "."))]
}

// Connects are the CONNECT targets the upstream proxy was asked for.
func (r *Rig) Connects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.connects...)
}

func (r *Rig) hit(name, what string) {
	r.mu.Lock()
	r.hits[name] = append(r.hits[name], time.Now().Format("15:04:05.000")+" "+what)
	r.mu.Unlock()
}

// countingListener records every connection it accepts: "sends nothing"
// means not even a connection.
type countingListener struct {
	net.Listener
	r    *Rig
	name string
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.r.hit(l.name, "connection")
	}
	return c, err
}

func (r *Rig) serveHTTP(t *testing.T, name string, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(req.Body, 1<<16))
		r.hit(name, fmt.Sprintf("%s %s Host=%s body=%q", req.Method, req.URL.RequestURI(), req.Host, body))
		h.ServeHTTP(w, req)
	}), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(countingListener{ln, r, name}) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// internal is an internal host's answer: a page with its secret.
// SetHostPage serves html at path on an internal listener ("lan",
// "loopbackPage"): a page the policy allows, attacking its neighbours.
func (r *Rig) SetHostPage(name, path, html string) {
	r.mu.Lock()
	r.pages[name+" "+path] = html
	r.mu.Unlock()
}

func (r *Rig) internal(name string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		page, ok := r.pages[name+" "+req.URL.Path]
		r.mu.Unlock()
		if ok {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			io.WriteString(w, page)
			return
		}
		if name == "metadata" {
			fmt.Fprintf(w, "<html><body><pre>%s</pre></body></html>", MetadataSecret)
			return
		}
		fmt.Fprintf(w, "<html><body>internal %s page %s</body></html>", name, req.URL.Path)
	})
}

// public serves the attacker's pages, and /redirect?to=URL (302).
func (r *Rig) public(w http.ResponseWriter, req *http.Request) {
	if req.URL.Path == "/redirect" {
		http.Redirect(w, req, req.URL.Query().Get("to"), http.StatusFound)
		return
	}
	r.mu.Lock()
	page, ok := r.pages[req.URL.Path]
	r.mu.Unlock()
	if !ok {
		fmt.Fprintf(w, "<html><body>public %s</body></html>", req.URL.Path)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	io.WriteString(w, page)
}

func (r *Rig) serveUDP(t *testing.T, name string, pc net.PacketConn) {
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			r.hit(name, fmt.Sprintf("datagram %d bytes", n))
		}
	}()
}

// serveUpstream is a CONNECT-only proxy that records what it is asked and
// tunnels to it from inside the namespace.
func (r *Rig) serveUpstream(t *testing.T, ln net.Listener) {
	stop := egresstest.ServeConnect(ln, r.NS.Dial, func(method, target, _ string) {
		r.mu.Lock()
		r.connects = append(r.connects, method+" "+target)
		r.mu.Unlock()
		r.hit("upstream", method+" "+target)
	})
	t.Cleanup(stop)
}

// Rebinding names: rb-<target>-[p<k>-]<anything>.evil.test answers Public
// to its first k A queries (default 1) and the target's address to every
// later one (TTL 0): k is how many checks the name must pass before the
// lookup that connects;
// other *.evil.test names answer Public; lan.corp.test and lan2.corp.test
// answer the LAN hosts.
var rebindTargets = map[string]string{"lan": LAN, "lan2": LAN2, "meta": Metadata, "lo": "127.0.0.1"}

func (r *Rig) answer(name string) (netip.Addr, bool) {
	r.mu.Lock()
	n := r.dnsAsked[name]
	r.dnsAsked[name]++
	r.mu.Unlock()
	switch {
	case name == "lan.corp.test":
		return netip.MustParseAddr(LAN), true
	case name == "lan2.corp.test":
		return netip.MustParseAddr(LAN2), true
	case strings.HasSuffix(name, ".evil.test"):
		if rest, ok := strings.CutPrefix(name, "rb-"); ok {
			target, rest, _ := strings.Cut(rest, "-")
			publics := 1
			if k, ok := strings.CutPrefix(rest, "p"); ok && len(k) > 0 && k[0] >= '1' && k[0] <= '9' {
				publics = int(k[0] - '0')
			}
			if a, ok := rebindTargets[target]; ok && n >= publics {
				return netip.MustParseAddr(a), true
			}
		}
		return netip.MustParseAddr(Public), true
	}
	return netip.Addr{}, false
}

func (r *Rig) serveDNS(t *testing.T, pc net.PacketConn) {
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := r.dnsReply(buf[:n]); out != nil {
				_, _ = pc.WriteTo(out, from)
			}
		}
	}()
}

func (r *Rig) dnsReply(q []byte) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		return nil
	}
	question := qs[0]
	name := strings.ToLower(strings.TrimSuffix(question.Name.String(), "."))
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	b.EnableCompression()
	known := strings.HasSuffix(name, ".evil.test") || strings.HasSuffix(name, ".corp.test")
	var addr netip.Addr
	if question.Type == dnsmessage.TypeA && known {
		addr, known = r.answer(name)
	}
	if !known {
		b = dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: h.ID, Response: true, RCode: dnsmessage.RCodeNameError, RecursionDesired: h.RecursionDesired, RecursionAvailable: true})
	}
	_ = b.StartQuestions()
	_ = b.Question(question)
	if addr.IsValid() {
		_ = b.StartAnswers()
		_ = b.AResource(dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 0}, dnsmessage.AResource{A: addr.As4()})
	}
	out, err := b.Finish()
	if err != nil {
		return nil
	}
	return out
}
