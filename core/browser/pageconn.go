package browser

import (
	"context"
	"fmt"
	"strings"
)

// PageConn is a DevTools connection of its own to one page, for commands
// sent back to back, each without waiting for the previous reply (input's
// press and release of a click): calls on the page's attached session
// (Target) are one round trip each. Chromium runs a connection's commands
// in the order they arrive, so the page sees them in that order. A PageConn
// enables no domain: it carries replies only. It has no in-flight bound
// (a Send never waits for a slot): a pipelined command costs its marshal
// and the socket write, as input's own socket did before. It is closed by
// Close, by the browser's Close, or when Chromium drops the socket (the
// page closed).
type PageConn struct {
	w *wsConn
	b *Browser
}

// DialConn opens a PageConn to p. ctx bounds the dial only.
func (p *Page) DialConn(ctx context.Context) (*PageConn, error) {
	url := p.devToolsURL()
	if url == "" {
		return nil, fmt.Errorf("browser: page connection: no DevTools address")
	}
	w, err := dialWS(ctx, url, 0)
	if err != nil {
		return nil, fmt.Errorf("browser: page connection: %w", err)
	}
	c := &PageConn{w: w, b: p.b}
	p.b.mu.Lock()
	select {
	case <-p.b.closing:
		p.b.mu.Unlock()
		w.close()
		return nil, ErrClosed
	default:
	}
	p.b.pageConns[c] = struct{}{}
	p.b.mu.Unlock()
	return c, nil
}

// devToolsURL is the page's own DevTools WebSocket address (loopback).
func (p *Page) devToolsURL() string {
	base, _, ok := strings.Cut(p.b.wsURL, "/devtools/")
	if !ok {
		return ""
	}
	return base + "/devtools/page/" + string(p.targetID)
}

// Send writes one command and returns at once; its Reply comes later.
// Commands are written in the order Send is called. After the connection
// closed, Send fails with ErrConnClosed.
func (c *PageConn) Send(method string, params any) (Reply, error) {
	return c.w.send(context.Background(), "", method, params)
}

// Closed reports whether the connection closed (its replies all failed).
func (c *PageConn) Closed() bool { return c.w.closed() }

// Done is closed once the connection closed and its reader ended.
func (c *PageConn) Done() <-chan struct{} { return c.w.done }

// Close ends the connection and waits for its reader. Idempotent.
func (c *PageConn) Close() {
	c.b.mu.Lock()
	delete(c.b.pageConns, c)
	c.b.mu.Unlock()
	c.w.close()
}
