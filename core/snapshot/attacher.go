package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sync"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

// maxAttached bounds the cached OOPIF sessions of an Attacher.
const maxAttached = 64

// Attacher is a FrameAttacher over its own CDP connection to the browser
// (the page's chromedp session does not route OOPIF child sessions). It
// attaches to OOPIF targets on demand, caches the sessions (at most 64; a
// detached one is replaced) and detaches them on Close, leaving the frames
// running. It is safe for concurrent use.
type Attacher struct {
	allocCancel context.CancelFunc
	rootCtx     context.Context
	rootCancel  context.CancelFunc

	mu     sync.Mutex
	closed bool
	frames map[target.ID]*attached
	order  []target.ID
}

type attached struct {
	cancel context.CancelFunc
	t      *chromedp.Target
}

// NewAttacher connects to the browser's DevTools websocket URL (as
// browser.Browser.WSURL returns). ctx bounds the connection only.
func NewAttacher(ctx context.Context, wsURL string) (*Attacher, error) {
	actx, acancel := remote.NewAllocator(context.Background(), wsURL, remote.NoModifyURL)
	rctx, rcancel := chromedp.NewContext(actx)
	stop := context.AfterFunc(ctx, rcancel)
	_, err := chromedp.CallBrowser(rctx, cdpbrowser.GetVersion, cdp.Empty{})
	if !stop() {
		err = fmt.Errorf("%w (result: %v)", ctx.Err(), err)
	}
	if err != nil {
		rcancel()
		acancel()
		return nil, fmt.Errorf("snapshot: attacher connect: %w", err)
	}
	return &Attacher{allocCancel: acancel, rootCtx: rctx, rootCancel: rcancel, frames: map[target.ID]*attached{}}, nil
}

// AttachFrame implements FrameAttacher.
func (a *Attacher) AttachFrame(ctx context.Context, targetID string) (cdp.Session, error) {
	id := target.ID(targetID)
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, errors.New("snapshot: attacher closed")
	}
	at := a.frames[id]
	a.mu.Unlock()
	if at != nil {
		if _, err := cdp.Call(ctx, at.t, runtime.Evaluate, runtime.EvaluateParams{Expression: "1"}); err == nil {
			return at.t, nil
		}
		a.drop(id, at)
	}

	fctx, fcancel := chromedp.NewContext(a.rootCtx, chromedp.WithTargetID(id), chromedp.WithDetachOnCancel())
	stop := context.AfterFunc(ctx, fcancel)
	var t *chromedp.Target
	err := chromedp.Do(fctx, chromedp.Func(func(_ context.Context, tt *chromedp.Target) error {
		t = tt
		return nil
	}))
	if !stop() {
		err = fmt.Errorf("%w (result: %v)", ctx.Err(), err)
	}
	if err != nil {
		fcancel()
		return nil, fmt.Errorf("snapshot: attach frame %s: %w", targetID, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		fcancel()
		return nil, errors.New("snapshot: attacher closed")
	}
	if old := a.frames[id]; old != nil { // a concurrent attach won
		fcancel()
		return old.t, nil
	}
	a.frames[id] = &attached{cancel: fcancel, t: t}
	a.order = append(a.order, id)
	for len(a.order) > maxAttached {
		oldest := a.order[0]
		a.order = a.order[1:]
		if o := a.frames[oldest]; o != nil {
			delete(a.frames, oldest)
			go o.cancel()
		}
	}
	return t, nil
}

func (a *Attacher) drop(id target.ID, at *attached) {
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
	at.cancel()
}

// Close detaches every OOPIF session and closes the connection.
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
		f.cancel()
	}
	a.rootCancel()
	a.allocCancel()
	return nil
}
