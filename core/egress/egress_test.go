package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/core/egress/egresstest"
)

// loopbackOnly allows 127.0.0.1 on the one port named, as a policy with
// denyPrivate and one loopback exception would.
type loopbackOnly struct{ port uint16 }

func (d loopbackOnly) Refuse(_ string, a netip.Addr, port uint16) string {
	if a == netip.MustParseAddr("127.0.0.1") && port == d.port {
		return ""
	}
	return "private address"
}

// scripted answers each name with its list of answers in turn (the last
// one repeats): "rebind.test" public, then private.
type scripted struct {
	mu      sync.Mutex
	answers map[string][]string
	asked   map[string]int
}

func (s *scripted) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.answers[host]
	if !ok {
		return nil, fmt.Errorf("no such host %s", host)
	}
	i := min(s.asked[host], len(a)-1)
	s.asked[host]++
	var out []netip.Addr
	for _, x := range strings.Split(a[i], ",") {
		out = append(out, netip.MustParseAddr(x))
	}
	return out, nil
}

// hitServer counts the requests it serves.
func hitServer(t *testing.T) (*httptest.Server, *atomic.Int64, uint16) {
	var hits atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "hit %s", r.URL.Path)
	}))
	_, p, _ := net.SplitHostPort(s.Listener.Addr().String())
	n, _ := strconv.Atoi(p)
	return s, &hits, uint16(n)
}

func proxyClient(l *Listener) *http.Client {
	u, _ := url.Parse(l.Server())
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), DisableKeepAlives: true}, Timeout: 5 * time.Second}
}

func TestProxyDecidesOnTheAddressItConnects(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	s1, allowedHits, allowedPort := hitServer(t)
	defer s1.Close()
	s2, internalHits, internalPort := hitServer(t)
	defer s2.Close()
	res := &scripted{answers: map[string][]string{
		"good.test":   {"127.0.0.1"},
		"rebind.test": {"127.0.0.1"}, // checked elsewhere as public: here it resolves private
		"mixed.test":  {"10.66.0.2,127.0.0.1"},
	}, asked: map[string]int{}}
	var refusals []string
	var rmu sync.Mutex
	p, err := New(Options{Decider: loopbackOnly{allowedPort}, Resolver: res, OnRefuse: func(label, host, reason string) {
		rmu.Lock()
		refusals = append(refusals, label+" "+host+" "+reason)
		rmu.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	l, err := p.Listen("s1", nil)
	if err != nil {
		t.Fatal(err)
	}
	c := proxyClient(l)

	for _, tc := range []struct {
		url      string
		want     int
		internal bool // aimed at the internal server
	}{
		{fmt.Sprintf("http://good.test:%d/ok", allowedPort), 200, false},
		{fmt.Sprintf("http://127.0.0.1:%d/ok", allowedPort), 200, false},
		{fmt.Sprintf("http://rebind.test:%d/latest/meta-data/?secret=1", internalPort), 403, true},
		{fmt.Sprintf("http://127.0.0.1:%d/x", internalPort), 403, true},
		{fmt.Sprintf("http://[::ffff:127.0.0.1]:%d/x", internalPort), 403, true},
		{fmt.Sprintf("http://nowhere.test:%d/x", internalPort), 403, true},
		// One answer refused, one allowed: only the allowed one is dialled.
		{fmt.Sprintf("http://mixed.test:%d/ok", allowedPort), 200, false},
	} {
		resp, err := c.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.url, resp.StatusCode, body, tc.want)
		}
		if tc.want == 403 && (resp.Header.Get("X-Tabcast-Egress") != "refused" || strings.Contains(string(body), "secret")) {
			t.Errorf("%s: refusal page %q (header %q): must say refused and never echo the query", tc.url, body, resp.Header.Get("X-Tabcast-Egress"))
		}
	}
	if n := internalHits.Load(); n != 0 {
		t.Errorf("the internal server was reached %d times", n)
	}
	if n := allowedHits.Load(); n != 3 {
		t.Errorf("the allowed server served %d requests, want 3", n)
	}

	// CONNECT (https, wss, ws): refused before any byte leaves; allowed
	// tunnels carry bytes both ways.
	for _, tc := range []struct {
		target string
		want   string
	}{
		{fmt.Sprintf("rebind.test:%d", internalPort), "403"},
		{fmt.Sprintf("good.test:%d", allowedPort), "200"},
	} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(l.Server(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", tc.target, tc.target)
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatal(err)
		}
		if got := strconv.Itoa(resp.StatusCode); got != tc.want {
			t.Errorf("CONNECT %s: %s, want %s", tc.target, got, tc.want)
		}
		if resp.StatusCode == 200 {
			fmt.Fprintf(conn, "GET /tunnelled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
			r2, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(r2.Body)
			if string(b) != "hit /tunnelled" {
				t.Errorf("through the tunnel: %q", b)
			}
		}
		conn.Close()
	}
	if n := internalHits.Load(); n != 0 {
		t.Errorf("the internal server was reached %d times", n)
	}
	rmu.Lock()
	if len(refusals) != 5 || !strings.HasPrefix(refusals[0], "s1 rebind.test private address") {
		t.Errorf("refusals reported: %q", refusals)
	}
	for _, r := range refusals {
		if strings.Contains(r, "secret") || strings.Contains(r, "meta-data") {
			t.Errorf("a refusal carries the path or query: %q", r)
		}
	}
	rmu.Unlock()
	if st := p.Stats(); st.Refused != 5 || l.Refused() != 5 {
		t.Errorf("stats %+v, listener %d", st, l.Refused())
	}
}

// An upstream proxy is asked for the checked address, never the name, and
// a refused connection never reaches it.
func TestUpstreamIsAskedForTheAddress(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	hs, hits, port := hitServer(t)
	defer hs.Close()
	var mu sync.Mutex
	var asked []string
	var auth []string
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stop := egresstest.ServeConnect(upLn, net.DialTimeout, func(method, target, proxyAuth string) {
		mu.Lock()
		asked = append(asked, method+" "+target)
		auth = append(auth, proxyAuth)
		mu.Unlock()
	})
	defer stop()

	up, err := ParseUpstream("http://"+upLn.Addr().String(), writeFile(t, "alice:s3cret\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(up.String(), "s3cret") {
		t.Errorf("String shows the password: %s", up)
	}
	res := &scripted{answers: map[string][]string{"site.test": {"127.0.0.1"}, "inside.test": {"10.66.0.2"}}, asked: map[string]int{}}
	// Here the "internet" is loopback: nothing is reached directly.
	p, _ := New(Options{Decider: loopbackOnly{port}, Resolver: res, Direct: func(netip.Addr) bool { return false }})
	defer p.Close()
	l, err := p.Listen("s2", up)
	if err != nil {
		t.Fatal(err)
	}
	c := proxyClient(l)
	resp, err := c.Get(fmt.Sprintf("http://site.test:%d/via", port))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "hit /via" {
		t.Fatalf("via upstream: %d %q", resp.StatusCode, b)
	}
	resp, err = c.Get(fmt.Sprintf("http://inside.test:%d/no", port))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 {
		t.Errorf("refused host through upstream: %d", resp.StatusCode)
	}
	mu.Lock()
	defer mu.Unlock()
	want := fmt.Sprintf("CONNECT 127.0.0.1:%d", port)
	if len(asked) != 1 || asked[0] != want {
		t.Errorf("upstream was asked %q, want [%q]", asked, want)
	}
	if len(auth) != 1 || auth[0] != "Basic YWxpY2U6czNjcmV0" {
		t.Errorf("upstream credentials %q", auth)
	}
	if hits.Load() != 1 {
		t.Errorf("hits %d", hits.Load())
	}
}

func TestParseUpstream(t *testing.T) {
	for _, tc := range []struct {
		raw, err string
	}{
		{"http://proxy.corp:3128", ""},
		{"socks5://u:p@10.0.0.1:1080", ""},
		{"https://proxy:443", "bad_proxy"},
		{"http://proxy", "bad_proxy"},
		{"http://proxy:3128/path?q=1", "bad_proxy"},
		{"::::", "bad_proxy"},
	} {
		_, err := ParseUpstream(tc.raw, "")
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: %v, want %q", tc.raw, err, tc.err)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("error shows credentials: %v", err)
		}
	}
}

// Close ends open tunnels and the listener's goroutines.
func TestCloseEndsTunnels(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	hs, _, port := hitServer(t)
	defer hs.Close()
	p, _ := New(Options{Decider: loopbackOnly{port}, Resolver: &scripted{answers: map[string][]string{}, asked: map[string]int{}}})
	l, err := p.Listen("s3", nil)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(l.Server(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: x\r\n\r\n", port)
	br := bufio.NewReader(conn)
	if resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect}); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	p.Close()
	_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Error("the tunnel stayed open after Close")
	}
	if _, err := p.Listen("s4", nil); err != ErrClosed {
		t.Errorf("Listen after Close: %v", err)
	}
}

func writeFile(t *testing.T, s string) string {
	f := t.TempDir() + "/cred"
	if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestLocalAddressesGoDirect(t *testing.T) {
	for a, want := range map[string]bool{"127.0.0.1": true, "10.66.0.2": true, "192.168.1.5": true, "169.254.169.254": true, "fd00::1": true, "203.0.113.10": false, "8.8.8.8": false} {
		if got := isLocal(netip.MustParseAddr(a)); got != want {
			t.Errorf("isLocal(%s) = %v", a, got)
		}
	}
}
