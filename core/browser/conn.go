package browser

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/chromedp/cdproto"
	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// ErrConnClosed is the error of a command on a DevTools connection whose
// socket closed (Close, the browser's exit, or Chromium dropping it),
// including every command still waiting for its reply then.
var ErrConnClosed = errors.New("browser: DevTools connection closed")

// ErrSessionDetached is the error of a command still waiting for its
// reply when its session detached (its target closed or navigated to
// another process).
var ErrSessionDetached = errors.New("browser: DevTools session detached")

// wsConn is one DevTools WebSocket of our own: commands are written in the
// order they are sent, each without waiting for earlier replies; one reader
// goroutine (owned by the wsConn, ended by close or by Chromium closing
// the socket) routes replies by id and events by session id. It is the
// common part of PageConn and BrowserConn.
type wsConn struct {
	conn *remote.Conn
	wmu  sync.Mutex // orders the writes

	// slots bounds the commands in flight (nil: unbounded). A slot is
	// taken before a command is written and given back when its reply
	// arrives (or the socket closes), not when the caller stops waiting:
	// the bound is on what Chromium holds.
	slots chan struct{}

	mu        sync.Mutex
	next      int64
	waiting   map[int64]*pending
	listeners map[target.SessionID]map[*listener]struct{}
	err       error // set once the reader stopped: every later send fails
	done      chan struct{}
	closeOnce sync.Once
}

type pending struct {
	ch      chan *cdproto.Message // buffered 1; closed when no reply will come
	session target.SessionID
	slot    bool
}

// listener gets a session's events; end, if set, is called once when the
// connection drops it (the session detached or the socket closed).
type listener struct {
	fn  func(*cdproto.Message)
	end func()
}

func dialWS(ctx context.Context, url string, inFlight int) (*wsConn, error) {
	c, err := remote.DialContext(ctx, url)
	if err != nil {
		return nil, err
	}
	w := &wsConn{conn: c, waiting: map[int64]*pending{}, listeners: map[target.SessionID]map[*listener]struct{}{}, done: make(chan struct{})}
	if inFlight > 0 {
		w.slots = make(chan struct{}, inFlight)
	}
	go w.read()
	return w, nil
}

func (w *wsConn) read() {
	defer close(w.done)
	for {
		msg := new(cdproto.Message)
		if err := w.conn.Read(context.Background(), msg); err != nil {
			w.mu.Lock()
			w.err = ErrConnClosed
			for id, p := range w.waiting {
				delete(w.waiting, id)
				w.finish(p, nil)
			}
			ended := w.listeners
			w.listeners = nil
			w.mu.Unlock()
			for _, ls := range ended {
				endAll(ls)
			}
			return
		}
		if msg.ID != 0 {
			w.mu.Lock()
			p := w.waiting[msg.ID]
			delete(w.waiting, msg.ID)
			w.mu.Unlock()
			if p != nil {
				w.finish(p, msg)
			}
			continue
		}
		if msg.Method == cdproto.EventTargetDetachedFromTarget {
			w.detached(msg)
		}
		w.mu.Lock()
		var fns []func(*cdproto.Message)
		for l := range w.listeners[msg.SessionID] {
			fns = append(fns, l.fn)
		}
		w.mu.Unlock()
		for _, fn := range fns {
			fn(msg)
		}
	}
}

// finish delivers p's reply (nil: none will come) and gives its slot back.
func (w *wsConn) finish(p *pending, msg *cdproto.Message) {
	if msg != nil {
		p.ch <- msg // buffered: never blocks
	} else {
		close(p.ch)
	}
	if p.slot {
		<-w.slots
	}
}

// detached fails the commands still waiting on a session that detached:
// Chromium answers none of them.
func (w *wsConn) detached(msg *cdproto.Message) {
	var ev target.EventDetachedFromTarget
	if err := jsonv2.Unmarshal(msg.Params, &ev, chromedp.DefaultUnmarshalOptions); err != nil || ev.SessionID == "" {
		return
	}
	w.mu.Lock()
	var gone []*pending
	for id, p := range w.waiting {
		if p.session == ev.SessionID {
			delete(w.waiting, id)
			gone = append(gone, p)
		}
	}
	ended := w.listeners[ev.SessionID]
	delete(w.listeners, ev.SessionID)
	w.mu.Unlock()
	endAll(ended)
	for _, p := range gone {
		p.ch <- detachedReply
		if p.slot {
			<-w.slots
		}
	}
}

// detachedReply stands for the reply of a command whose session detached.
var detachedReply = new(cdproto.Message)

// Reply is one sent command's answer to come.
type Reply <-chan *cdproto.Message

// Wait waits for r's answer: nil, the command's protocol error
// (*cdproto.Error), ErrConnClosed, or the context's end.
func (r Reply) Wait(ctx context.Context) error { return r.Decode(ctx, nil) }

// Decode waits for r's answer as Wait does and decodes its result into res
// (res may be nil; a *jsonv2.Value takes the raw JSON).
func (r Reply) Decode(ctx context.Context, res any) error {
	select {
	case msg, ok := <-r:
		switch {
		case !ok:
			return ErrConnClosed
		case msg == detachedReply:
			return ErrSessionDetached
		case msg.Error != nil:
			return msg.Error
		case res != nil:
			return jsonv2.Unmarshal(msg.Result, res, chromedp.DefaultUnmarshalOptions)
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Raw waits for r's answer as Wait does and returns its result as
// Chromium sent it, without a copy (a proxy passes a screenshot on as it
// came).
func (r Reply) Raw(ctx context.Context) (jsonv2.Value, error) {
	select {
	case msg, ok := <-r:
		switch {
		case !ok:
			return nil, ErrConnClosed
		case msg == detachedReply:
			return nil, ErrSessionDetached
		case msg.Error != nil:
			return nil, msg.Error
		}
		return msg.Result, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// send writes one command and returns without waiting for its reply.
// With a bound, it first waits (under ctx) for a slot.
func (w *wsConn) send(ctx context.Context, session target.SessionID, method string, params any) (Reply, error) {
	var b jsonv2.Value
	if params != nil {
		var err error
		if b, err = jsonv2.Marshal(params, chromedp.DefaultMarshalOptions); err != nil {
			return nil, fmt.Errorf("%s: %w", method, err)
		}
	}
	p := &pending{ch: make(chan *cdproto.Message, 1), session: session}
	if w.slots != nil {
		select {
		case w.slots <- struct{}{}:
			p.slot = true
		case <-w.done:
			return nil, ErrConnClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.mu.Lock()
	if w.err != nil {
		w.mu.Unlock()
		w.release(p)
		return nil, w.err
	}
	w.next++
	id := w.next
	w.waiting[id] = p
	w.mu.Unlock()
	if err := w.conn.Write(context.Background(), &cdproto.Message{ID: id, SessionID: session, Method: cdproto.MethodType(method), Params: b}); err != nil {
		w.mu.Lock()
		_, still := w.waiting[id]
		delete(w.waiting, id)
		w.mu.Unlock()
		if still {
			w.release(p)
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return p.ch, nil
}

func (w *wsConn) release(p *pending) {
	if p.slot {
		<-w.slots
	}
}

// listen calls fn on the reader goroutine for every event of session ("":
// the browser's own), until stop, the session's detach or the socket's
// close. fn must return fast and must not wait for a reply of this
// connection (the reader would wait for itself).
func (w *wsConn) listen(session target.SessionID, l *listener) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		if l.end != nil {
			l.end()
		}
		return func() {}
	}
	if w.listeners[session] == nil {
		w.listeners[session] = map[*listener]struct{}{}
	}
	w.listeners[session][l] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		delete(w.listeners[session], l)
		if len(w.listeners[session]) == 0 {
			delete(w.listeners, session)
		}
	}
}

func endAll(ls map[*listener]struct{}) {
	for l := range ls {
		if l.end != nil {
			l.end()
		}
	}
}

// closed reports whether the reader stopped.
func (w *wsConn) closed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err != nil
}

// close ends the connection and waits for the reader. Idempotent.
func (w *wsConn) close() {
	w.closeOnce.Do(func() { _ = w.conn.Close() })
	<-w.done
}
