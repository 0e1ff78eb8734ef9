package session

import (
	"context"
	"errors"
	"fmt"

	"github.com/tabcast/tabcast/core/egress"
)

// Egress is the appliance's egress proxy (core/egress): each session's
// browser context gets a listener of its own, so that every request of the
// session is decided by the policy on the address it connects to, and may
// go through the session's upstream proxy.
type Egress interface {
	Listen(label string, up *egress.Upstream) (*egress.Listener, error)
	// CheckUpstream refuses an upstream proxy the policy would refuse to
	// connect to (a session's own, from the API: it must not become a way
	// to the LAN).
	CheckUpstream(ctx context.Context, up *egress.Upstream) error
}

// ErrBadProxy is a session's upstream proxy that cannot be used.
var ErrBadProxy = errors.New("bad proxy")

// openEgress opens the session's egress listener: through the session's
// own upstream proxy (CreateOptions.Proxy), else the appliance's
// (Config.Upstream), else direct. No Egress configured: nil (tests of the
// session alone).
func (m *Manager) openEgress(ctx context.Context, id string, o CreateOptions) (*egress.Listener, error) {
	if m.cfg.Egress == nil {
		if o.Proxy != "" {
			return nil, fmt.Errorf("%w: this appliance has no egress proxy", ErrBadProxy)
		}
		return nil, nil
	}
	up := m.cfg.Upstream
	if o.Proxy != "" {
		var err error
		if up, err = egress.ParseUpstream(o.Proxy, ""); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadProxy, err)
		}
		if err := m.cfg.Egress.CheckUpstream(ctx, up); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadProxy, err)
		}
	}
	l, err := m.cfg.Egress.Listen(id, up)
	if err != nil {
		return nil, fmt.Errorf("%w: egress proxy: %v", ErrUnavailable, err)
	}
	return l, nil
}

// egressServer is what Chromium's proxyServer names for l ("" for none).
func egressServer(l *egress.Listener) string {
	if l == nil {
		return ""
	}
	return l.Server()
}

// closeEgress ends the session's listener and its connections, after its
// pages are gone.
func (s *Session) closeEgress() {
	s.mu.Lock()
	l := s.egress
	s.egress = nil
	s.mu.Unlock()
	if l != nil {
		l.Close()
	}
}

// egressRefused is the session's egress refusal count (0 without a
// listener): the executor reads it around a navigation whose tunnel failed.
func (s *Session) egressRefused() uint64 {
	s.mu.Lock()
	l := s.egress
	s.mu.Unlock()
	if l == nil {
		return 0
	}
	return l.Refused()
}
