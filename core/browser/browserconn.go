package browser

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
)

// maxInFlight bounds the commands a BrowserConn has at Chromium at once.
// One more waits (under its context) for a slot: a caller that floods the
// shared connection delays the others instead of growing Chromium's queue
// without bound.
const maxInFlight = 64

// subscriptionBuffer is how many events a Session subscription holds for
// a slow reader; a subscription that overflows ends (its channel closes)
// rather than dropping events silently or stalling the connection.
const subscriptionBuffer = 256

// BrowserConn is the shared DevTools connection to the browser endpoint,
// multiplexed by flattened session id: commands of the browser itself
// (session "") and of any target session attached through it (AttachTarget)
// travel on the one socket, with at most maxInFlight commands in flight.
// It is handed out by Browser.Conn and closed with the browser. It
// satisfies cdp.Session for the browser's own commands; Session(id) gives
// one for an attached target.
type BrowserConn struct {
	w      *wsConn
	own    bool   // from DialConn: the caller's, closed by Close
	forget func() // drops it from the browser's list (DialConn)
}

// Conn returns the browser's shared BrowserConn, dialing it on first use
// (and again if the previous one closed, e.g. Chromium dropped it). ctx
// bounds the dial only. The connection is closed by Close.
func (b *Browser) Conn(ctx context.Context) (*BrowserConn, error) {
	b.connMu.Lock()
	defer b.connMu.Unlock()
	b.mu.Lock()
	c := b.conn
	b.mu.Unlock()
	if c != nil && !c.w.closed() {
		return c, nil
	}
	return b.dialBrowser(ctx, false, func(c *BrowserConn) { b.conn = c })
}

// dialBrowser dials the browser endpoint unless the browser is closing or
// gone, and hands the new connection to keep under b.mu; Close having
// started meanwhile closes it again (ErrClosed).
func (b *Browser) dialBrowser(ctx context.Context, own bool, keep func(*BrowserConn)) (*BrowserConn, error) {
	select {
	case <-b.closing:
		return nil, ErrClosed
	case <-b.done:
		return nil, b.err
	default:
	}
	w, err := dialWS(ctx, b.wsURL, maxInFlight)
	if err != nil {
		return nil, fmt.Errorf("browser: browser connection: %w", err)
	}
	c := &BrowserConn{w: w, own: own}
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closing:
		w.close()
		return nil, ErrClosed
	default:
	}
	keep(c)
	return c, nil
}

// Call runs a command of the browser itself (cdp.Session).
func (c *BrowserConn) Call(ctx context.Context, method string, params, res any) error {
	return c.call(ctx, "", method, params, res)
}

// Subscribe buffers the browser's own events of method (cdp.Session).
func (c *BrowserConn) Subscribe(method string) (<-chan jsonv2.Value, func()) {
	return c.subscribe("", method)
}

// Send writes one command on session ("" = the browser itself) once a
// slot is free and returns without waiting for its reply: a proxy pipelines
// a client's commands with it. params is marshalled as JSON; a
// jsonv2.Value is sent as it is (raw JSON from a client). The connection
// numbers the command itself: a proxy maps its client's ids to the Reply.
func (c *BrowserConn) Send(ctx context.Context, sessionID string, method string, params any) (Reply, error) {
	return c.w.send(ctx, target.SessionID(sessionID), method, params)
}

// Listen calls fn for every event of session sessionID ("" = the
// browser's own, where Target.attachedToTarget and detachedFromTarget
// arrive), in arrival order, until stop is called, the session detaches or
// the connection closes; ended (may be nil) is called once then, unless
// stop came first. fn runs on the connection's reader: it must return
// fast and must not wait for a reply of this connection.
func (c *BrowserConn) Listen(sessionID string, fn func(*cdproto.Message), ended func()) (stop func()) {
	return c.w.listen(target.SessionID(sessionID), &listener{fn: fn, end: ended})
}

// AttachTarget attaches a flattened session to the target targetID
// (Target.attachToTarget with flatten) and returns it. The session enables
// no domain; Detach ends it.
func (c *BrowserConn) AttachTarget(ctx context.Context, targetID string) (*Session, error) {
	flatten := true
	res, err := cdp.Call(ctx, c, target.AttachToTarget, target.AttachToTargetParams{TargetID: target.ID(targetID), Flatten: &flatten})
	if err != nil {
		return nil, fmt.Errorf("browser: attach to target: %w", err)
	}
	return c.Session(string(res.SessionID)), nil
}

// Session is the cdp.Session of the attached session id on c.
func (c *BrowserConn) Session(id string) *Session {
	return &Session{c: c, id: target.SessionID(id)}
}

// Done is closed once the connection closed.
func (c *BrowserConn) Done() <-chan struct{} { return c.w.done }

func (c *BrowserConn) call(ctx context.Context, session target.SessionID, method string, params, res any) error {
	r, err := c.w.send(ctx, session, method, params)
	if err != nil {
		return err
	}
	return r.Decode(ctx, res)
}

func (c *BrowserConn) subscribe(session target.SessionID, method string) (<-chan jsonv2.Value, func()) {
	s := &subscription{ch: make(chan jsonv2.Value, subscriptionBuffer)}
	stop := c.w.listen(session, &listener{
		fn: func(m *cdproto.Message) {
			if string(m.Method) == method {
				s.offer(m.Params)
			}
		},
		end: s.end,
	})
	return s.ch, func() {
		stop()
		s.end()
	}
}

// subscription is one Subscribe's channel; it closes once, at the first
// of cancel, the session's end and an overflow.
type subscription struct {
	mu    sync.Mutex
	ch    chan jsonv2.Value
	ended bool
}

func (s *subscription) offer(v jsonv2.Value) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.ended = true
		close(s.ch)
	}
}

func (s *subscription) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.ended {
		s.ended = true
		close(s.ch)
	}
}

// Session is one attached target session on a BrowserConn; it satisfies
// cdp.Session. Its commands fail with ErrSessionDetached once the target
// detaches.
type Session struct {
	c  *BrowserConn
	id target.SessionID
}

// ID is the flattened session id.
func (s *Session) ID() string { return string(s.id) }

// Call runs a command on the session (cdp.Session).
func (s *Session) Call(ctx context.Context, method string, params, res any) error {
	return s.c.call(ctx, s.id, method, params, res)
}

// Subscribe buffers the session's events of method (cdp.Session).
func (s *Session) Subscribe(method string) (<-chan jsonv2.Value, func()) {
	return s.c.subscribe(s.id, method)
}

// Detach ends the session (Target.detachFromTarget), leaving its target
// running. A session that is gone already is not an error.
func (s *Session) Detach(ctx context.Context) error {
	err := s.c.Call(ctx, target.CommandDetachFromTarget, target.DetachFromTargetParams{SessionID: s.id}, nil)
	if err != nil && !isGone(err) && !isNoSession(err) {
		return fmt.Errorf("browser: detach session: %w", err)
	}
	return nil
}

// isNoSession reports Chromium's error for a session id it does not know.
func isNoSession(err error) bool {
	return strings.Contains(err.Error(), "No session with given id")
}

var (
	_ cdp.Session = (*BrowserConn)(nil)
	_ cdp.Session = (*Session)(nil)
)

// DialConn opens a BrowserConn of the caller's own: a socket to the
// browser endpoint that nobody else shares. A CDP proxy takes one per
// client so that everything the client set up on it (its attached
// sessions, their Fetch interception and emulation, Target discovery)
// ends with the socket, by Chromium's own bookkeeping, when the client
// goes. ctx bounds the dial only; Close (or the browser's Close) ends it.
func (b *Browser) DialConn(ctx context.Context) (*BrowserConn, error) {
	return b.dialBrowser(ctx, true, func(c *BrowserConn) {
		b.ownConns[c] = struct{}{}
		c.forget = func() {
			b.mu.Lock()
			delete(b.ownConns, c)
			b.mu.Unlock()
		}
	})
}

// Close ends a BrowserConn of DialConn and waits for its reader; the
// shared one (Conn) is the browser's and is left open.
func (c *BrowserConn) Close() {
	if !c.own {
		return
	}
	c.w.close()
	if c.forget != nil {
		c.forget()
	}
}
