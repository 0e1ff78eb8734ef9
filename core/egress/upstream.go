package egress

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"golang.org/x/net/proxy"
)

// Upstream is a proxy the checked connections go through: the company's
// HTTP proxy (CONNECT) or a SOCKS5 proxy. Either way it is asked for the
// address the policy allowed, never for a name.
type Upstream struct {
	scheme   string // http or socks5
	addr     string // host:port of the upstream
	user     string
	password string
}

// ParseUpstream reads an upstream proxy URL: http://host:port or
// socks5://host:port, with user:password in it or in credentialsFile (one
// line "user:password"; the file wins). The URL may carry nothing else (no
// path, query or fragment).
func ParseUpstream(raw, credentialsFile string) (*Upstream, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("egress: upstream proxy: not a URL (bad_proxy)")
	}
	up := &Upstream{scheme: strings.ToLower(u.Scheme)}
	switch up.scheme {
	case "http", "socks5":
	default:
		return nil, fmt.Errorf("egress: upstream proxy: scheme %q, want http or socks5 (bad_proxy)", u.Scheme)
	}
	if u.Hostname() == "" || u.Port() == "" {
		return nil, errors.New("egress: upstream proxy: want host:port (bad_proxy)")
	}
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return nil, errors.New("egress: upstream proxy: only scheme://[user:password@]host:port (bad_proxy)")
	}
	up.addr = u.Host
	if u.User != nil {
		up.user = u.User.Username()
		up.password, _ = u.User.Password()
	}
	if credentialsFile != "" {
		b, err := os.ReadFile(credentialsFile)
		if err != nil {
			return nil, fmt.Errorf("egress: upstream proxy credentials: %w", err)
		}
		line := strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		user, pass, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, errors.New("egress: upstream proxy credentials: want one line user:password (bad_proxy)")
		}
		up.user, up.password = user, pass
	}
	return up, nil
}

// Host is the upstream's host (for checks; never its credentials).
func (u *Upstream) Host() string {
	h, _, _ := net.SplitHostPort(u.addr)
	return h
}

// Port is the upstream's port.
func (u *Upstream) Port() string {
	_, p, _ := net.SplitHostPort(u.addr)
	return p
}

// String names the upstream without its credentials.
func (u *Upstream) String() string { return u.scheme + "://" + u.addr }

// dial connects to target (an address:port the policy allowed) through
// the upstream.
func (u *Upstream) dial(ctx context.Context, target string) (net.Conn, error) {
	if _, err := netip.ParseAddrPort(target); err != nil {
		return nil, fmt.Errorf("egress: upstream asked for a name: %q", target) // never: dialChecked resolves first
	}
	if u.scheme == "socks5" {
		var auth *proxy.Auth
		if u.user != "" {
			auth = &proxy.Auth{User: u.user, Password: u.password}
		}
		d, err := proxy.SOCKS5("tcp", u.addr, auth, &net.Dialer{})
		if err != nil {
			return nil, fmt.Errorf("egress: socks5 upstream: %w", err)
		}
		c, err := d.(proxy.ContextDialer).DialContext(ctx, "tcp", target)
		if err != nil {
			return nil, fmt.Errorf("egress: socks5 upstream %s: %w", u.addr, err)
		}
		return c, nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", u.addr)
	if err != nil {
		return nil, fmt.Errorf("egress: upstream %s: %w", u.addr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	if u.user != "" {
		req += "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte(u.user+":"+u.password)) + "\r\n"
	}
	if _, err := c.Write([]byte(req + "\r\n")); err != nil {
		c.Close()
		return nil, fmt.Errorf("egress: upstream %s: %w", u.addr, err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("egress: upstream %s: %w", u.addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("egress: upstream %s refused CONNECT: %s", u.addr, resp.Status)
	}
	_ = c.SetDeadline(time.Time{})
	if br.Buffered() > 0 {
		return &bufferedConn{Conn: c, r: br}, nil
	}
	return c, nil
}

// bufferedConn reads what the upstream sent after its 200 first.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufferedConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufferedConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return b.Conn.Close()
}
