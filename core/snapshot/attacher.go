package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"

	"github.com/tabcast/tabcast/core/browser"
)

// maxAttached bounds the cached OOPIF sessions of an Attacher.
const maxAttached = 64

// detachTimeout bounds the detach of one session that Close or an eviction
// gives up.
const detachTimeout = 2 * time.Second

// Attacher is a FrameAttacher over the browser's shared connection
// (browser.BrowserConn; the page's chromedp session does not route OOPIF
// child sessions). It attaches to OOPIF targets on demand, caches the
// sessions (at most 64; a detached one is replaced) and detaches them on
// Close, leaving the frames running and the connection open (the browser
// owns it). It is safe for concurrent use.
type Attacher struct {
	conn *browser.BrowserConn

	mu     sync.Mutex
	closed bool
	frames map[string]*browser.Session
	order  []string
}

// NewAttacher attaches over conn (as browser.Browser.Conn returns).
func NewAttacher(conn *browser.BrowserConn) *Attacher {
	return &Attacher{conn: conn, frames: map[string]*browser.Session{}}
}

// Broken reports whether the connection the Attacher uses closed: no frame
// attaches any more, and a new Attacher over a new connection is needed.
func (a *Attacher) Broken() bool {
	select {
	case <-a.conn.Done():
		return true
	default:
		return false
	}
}

// AttachFrame implements FrameAttacher.
func (a *Attacher) AttachFrame(ctx context.Context, targetID string) (cdp.Session, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errors.New("snapshot: attacher closed")
	}
	at := a.frames[targetID]
	a.mu.Unlock()
	if at != nil {
		if _, err := cdp.Call(ctx, at, runtime.Evaluate, runtime.EvaluateParams{Expression: "1"}); err == nil {
			return at, nil
		}
		a.drop(targetID, at)
	}

	s, err := a.conn.AttachTarget(ctx, targetID)
	if err != nil {
		return nil, fmt.Errorf("snapshot: attach frame %s: %w", targetID, err)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		detach(s)
		return nil, errors.New("snapshot: attacher closed")
	}
	if old := a.frames[targetID]; old != nil { // a concurrent attach won
		a.mu.Unlock()
		detach(s)
		return old, nil
	}
	a.frames[targetID] = s
	a.order = append(a.order, targetID)
	var evicted []*browser.Session
	for len(a.order) > maxAttached {
		oldest := a.order[0]
		a.order = a.order[1:]
		if o := a.frames[oldest]; o != nil {
			delete(a.frames, oldest)
			evicted = append(evicted, o)
		}
	}
	a.mu.Unlock()
	for _, o := range evicted {
		detach(o)
	}
	return s, nil
}

func (a *Attacher) drop(id string, at *browser.Session) {
	a.mu.Lock()
	if a.frames[id] == at {
		delete(a.frames, id)
		for i, o := range a.order {
			if o == id {
				a.order = append(a.order[:i:i], a.order[i+1:]...)
				break
			}
		}
	}
	a.mu.Unlock()
	detach(at)
}

// detach ends s, best effort: a session that cannot be detached went with
// its target or its connection.
func detach(s *browser.Session) {
	ctx, cancel := context.WithTimeout(context.Background(), detachTimeout)
	defer cancel()
	_ = s.Detach(ctx)
}

// Close detaches every OOPIF session. The connection stays open.
func (a *Attacher) Close() error {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil
	}
	a.closed = true
	frames := a.frames
	a.frames = nil
	a.mu.Unlock()
	for _, f := range frames {
		detach(f)
	}
	return nil
}
