package browser

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// AttachPage attaches a CDP session to an existing page target (a tab the
// page opened, or one of NewTab) and gives it o's viewport. o.URL, if set,
// is loaded; o.DownloadDir and o.DefaultContext do not apply (downloads are
// the context's). Close of the returned page closes its target only, never
// its BrowserContext.
func (b *Browser) AttachPage(ctx context.Context, targetID string, o PageOptions) (*Page, error) {
	if err := b.prepare(&o); err != nil {
		return nil, fmt.Errorf("browser: attach page: %w", err)
	}
	info, err := cdp.Call(ctx, b.cdpBrowser, target.GetTargetInfo, target.GetTargetInfoParams{TargetID: target.ID(targetID)})
	if err != nil {
		return nil, fmt.Errorf("browser: attach page: target info: %w", err)
	}
	if info.TargetInfo == nil || info.TargetInfo.Type != "page" {
		return nil, errors.New("browser: attach page: not a page target")
	}
	pctx, pcancel := chromedp.NewContext(b.rootCtx, chromedp.WithTargetID(target.ID(targetID)), chromedp.WithDetachOnCancel())
	p := &Page{b: b, targetID: target.ID(targetID), bctxID: info.TargetInfo.BrowserContextID, ctx: pctx, cancel: pcancel}
	if err := b.track(p); err != nil {
		return nil, fmt.Errorf("browser: attach page: %w", err)
	}
	err = p.bind(ctx, o)
	if err != nil {
		// Detach only: the target is not ours to close.
		b.mu.Lock()
		delete(b.pages, p)
		b.mu.Unlock()
		p.tabOnce.Do(func() {})
		p.closeOnce.Do(pcancel)
		return nil, fmt.Errorf("browser: attach page: %w", err)
	}
	return p, nil
}

// NewTab opens a page target in the BrowserContext browserContextID ("" =
// the default context) in a window of its own (a tab hidden behind another
// gets no frames), and attaches to it as AttachPage does. Its Close closes
// the tab only.
func (b *Browser) NewTab(ctx context.Context, browserContextID string, o PageOptions) (*Page, error) {
	if err := b.prepare(&o); err != nil {
		return nil, fmt.Errorf("browser: new tab: %w", err)
	}
	yes := true
	tr, err := cdp.Call(ctx, b.cdpBrowser, target.CreateTarget, target.CreateTargetParams{
		URL: "about:blank", BrowserContextID: cdp.BrowserContextID(browserContextID),
		Width: int64(o.Width), Height: int64(o.Height), NewWindow: &yes,
	})
	if err != nil {
		return nil, fmt.Errorf("browser: new tab: %w", err)
	}
	p, err := b.AttachPage(ctx, string(tr.TargetID), o)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		_, _ = cdp.Call(cctx, b.cdpBrowser, target.CloseTarget, target.CloseTargetParams{TargetID: tr.TargetID})
		return nil, fmt.Errorf("browser: new tab: %w", err)
	}
	return p, nil
}

// Activate brings the page to the front of its window: a tab behind
// another is hidden and paints nothing to capture.
func (p *Page) Activate(ctx context.Context) error {
	if _, err := cdp.Call(ctx, p.b.cdpBrowser, target.ActivateTarget, target.ActivateTargetParams{TargetID: p.targetID}); err != nil {
		return fmt.Errorf("browser: activate page: %w", err)
	}
	return nil
}

// TargetEvent is a page target of the browser appearing, going away or
// losing its renderer.
type TargetEvent struct {
	// Destroyed: the target closed (only TargetID is set then).
	Destroyed bool
	// Crashed: the target's renderer crashed or was killed (only TargetID
	// and Status are set then); the target stays, showing nothing, until
	// it is reloaded.
	Crashed          bool
	Status           string
	TargetID         string
	OpenerID         string
	BrowserContextID string
	URL              string
}

// WatchPages calls fn for every page target created, every target
// destroyed and every target whose renderer crashed in the browser (all of
// its contexts: filter by BrowserContextID or by the targets you know),
// until stop is called or the browser goes. fn runs on the
// connection's reader goroutine: it must return at once and must not issue
// CDP calls.
func (b *Browser) WatchPages(ctx context.Context, fn func(TargetEvent)) (stop func(), err error) {
	lctx, cancel := context.WithCancel(b.rootCtx)
	err = chromedp.ListenBrowser(lctx, func(ev any) {
		switch ev := ev.(type) {
		case *target.EventTargetCreated:
			t := ev.TargetInfo
			if t == nil || t.Type != "page" || strings.HasPrefix(t.URL, "chrome-extension://") {
				return
			}
			fn(TargetEvent{TargetID: string(t.TargetID), OpenerID: string(t.OpenerID), BrowserContextID: string(t.BrowserContextID), URL: t.URL})
		case *target.EventTargetDestroyed:
			fn(TargetEvent{Destroyed: true, TargetID: string(ev.TargetID)})
		case *target.EventTargetCrashed:
			fn(TargetEvent{Crashed: true, TargetID: string(ev.TargetID), Status: ev.Status})
		}
	})
	if err != nil {
		cancel()
		return func() {}, fmt.Errorf("browser: watch pages: %w", err)
	}
	// Discovery on the browser's own session (idempotent; the pages'
	// sessions have their own).
	if _, err := cdp.Call(ctx, b.cdpBrowser, target.SetDiscoverTargets, target.SetDiscoverTargetsParams{Discover: true}); err != nil {
		cancel()
		return func() {}, fmt.Errorf("browser: watch pages: discover targets: %w", err)
	}
	return cancel, nil
}

// CloseTarget closes a page target we are not attached to (a popup over a
// session's tab limit). A target that is gone already is not an error.
func (b *Browser) CloseTarget(ctx context.Context, targetID string) error {
	if _, err := cdp.Call(ctx, b.cdpBrowser, target.CloseTarget, target.CloseTargetParams{TargetID: target.ID(targetID)}); err != nil && !isGone(err) {
		return fmt.Errorf("browser: close target: %w", err)
	}
	return nil
}
