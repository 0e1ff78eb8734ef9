package browser

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"strings"
	"sync"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
)

// maxViewport bounds SetViewport/NewPage sizes (a 4K-ish ceiling with room).
const maxViewport = 7680

// PageOptions configure NewPage.
type PageOptions struct {
	Width, Height int    // default 1280x720
	URL           string // default about:blank
	// DownloadDir receives the page's downloads; "" refuses downloads.
	DownloadDir string
	// DefaultContext opens the page in the browser's default context (a
	// persistent profile's) instead of a fresh isolated one.
	DefaultContext bool
	// Proxy, for a fresh context, is the proxy every request of the
	// context goes through, loopback included ("<-loopback>"): the
	// session's egress proxy (core/egress), e.g. http://127.0.0.1:41234.
	// A default context takes Options.Proxy, given at launch.
	Proxy string
}

// Page is one tab in its own BrowserContext (cookies, storage and cache are
// not shared with other pages). It keeps one CDP session attached for its
// lifetime; the viewport override lives on that session.
type Page struct {
	b        *Browser
	targetID target.ID
	bctxID   cdp.BrowserContextID

	ctx    context.Context // chromedp context of the attached session
	cancel context.CancelFunc
	t      *chromedp.Target
	// ownsCtx: NewPage created bctxID for this page, so Close disposes it
	// (and every other tab in it); a page of AttachPage closes its target
	// only.
	ownsCtx bool

	closeOnce sync.Once
	closeErr  error
	tabOnce   sync.Once
	tabErr    error
}

// NewPage opens an isolated page and waits until o.URL has loaded.
func (b *Browser) NewPage(ctx context.Context, o PageOptions) (*Page, error) {
	if err := b.prepare(&o); err != nil {
		return nil, fmt.Errorf("browser: new page: %w", err)
	}

	no := false
	var bc target.CreateBrowserContextResult
	if !o.DefaultContext {
		var err error
		params := target.CreateBrowserContextParams{DisposeOnDetach: &no}
		if o.Proxy != "" {
			params.ProxyServer, params.ProxyBypassList = o.Proxy, proxyBypassNone
		}
		if bc, err = cdp.Call(ctx, b.cdpBrowser, target.CreateBrowserContext, params); err != nil {
			return nil, fmt.Errorf("browser: create browser context: %w", err)
		}
	}
	// Downloads of this context go to its own directory, or nowhere.
	dl := cdpbrowser.SetDownloadBehaviorParams{Behavior: cdpbrowser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: bc.BrowserContextID}
	if o.DownloadDir != "" {
		dl.Behavior, dl.DownloadPath = cdpbrowser.SetDownloadBehaviorBehaviorAllow, o.DownloadDir
	}
	if _, err := cdp.Call(ctx, b.cdpBrowser, cdpbrowser.SetDownloadBehavior, dl); err != nil {
		b.disposeContext(bc.BrowserContextID)
		return nil, fmt.Errorf("browser: download behavior: %w", err)
	}
	yes := true
	tr, err := cdp.Call(ctx, b.cdpBrowser, target.CreateTarget, target.CreateTargetParams{
		URL:              "about:blank",
		BrowserContextID: bc.BrowserContextID,
		Width:            int64(o.Width),
		Height:           int64(o.Height),
		// Its own window: a tab hidden behind another gets no frames.
		NewWindow: &yes,
	})
	if err != nil {
		b.disposeContext(bc.BrowserContextID)
		return nil, fmt.Errorf("browser: create target: %w", err)
	}

	// Detach-on-cancel: Close closes the target and the context itself, in
	// that order, and a Browser.Close must not issue CDP calls per page.
	pctx, pcancel := chromedp.NewContext(b.rootCtx, chromedp.WithTargetID(tr.TargetID), chromedp.WithDetachOnCancel())
	p := &Page{b: b, targetID: tr.TargetID, bctxID: bc.BrowserContextID, ctx: pctx, cancel: pcancel, ownsCtx: true}
	if err := b.track(p); err != nil {
		return nil, fmt.Errorf("browser: new page: %w", err)
	}
	if err := p.bind(ctx, o); err != nil {
		cctx, cancel := context.WithTimeout(context.Background(), closeGrace)
		defer cancel()
		_ = p.Close(cctx)
		return nil, fmt.Errorf("browser: new page: %w", err)
	}
	return p, nil
}

// prepare checks that the browser still runs and fills in o's default
// size, which must be within bounds.
func (b *Browser) prepare(o *PageOptions) error {
	select {
	case <-b.done:
		return b.err
	case <-b.closing:
		return ErrClosed
	default:
	}
	if o.Width == 0 {
		o.Width = defaultWidth
	}
	if o.Height == 0 {
		o.Height = defaultHeight
	}
	return checkSize(o.Width, o.Height)
}

// track registers p with the browser (Close detaches it), unless the
// browser is closing.
func (b *Browser) track(p *Page) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	select {
	case <-b.closing:
		p.cancel()
		return ErrClosed
	default:
	}
	b.pages[p] = struct{}{}
	return nil
}

// bind attaches p's CDP session, sets its viewport and loads o.URL. The
// first Run attaches and binds the session to p.ctx, so it cannot take
// ctx; ctx still aborts it from the side.
func (p *Page) bind(ctx context.Context, o PageOptions) error {
	stop := context.AfterFunc(ctx, p.cancel)
	err := chromedp.Do(p.ctx, chromedp.Func(func(c context.Context, t *chromedp.Target) error {
		p.t = t
		return setMetrics(c, t, o.Width, o.Height)
	}))
	if !stop() {
		err = fmt.Errorf("%w (result: %v)", ctx.Err(), err)
	}
	if err == nil && o.URL != "" && o.URL != "about:blank" {
		err = p.Navigate(ctx, o.URL)
	}
	return err
}

func checkSize(w, h int) error {
	if w < 1 || h < 1 || w > maxViewport || h > maxViewport {
		return fmt.Errorf("viewport %dx%d out of range [1, %d]", w, h, maxViewport)
	}
	return nil
}

func setMetrics(ctx context.Context, s cdp.Session, w, h int) error {
	_, err := cdp.Call(ctx, s, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
		Width: int64(w), Height: int64(h), DeviceScaleFactor: 1, Mobile: false,
	})
	if err != nil {
		return fmt.Errorf("set viewport: %w", err)
	}
	return nil
}

// TargetID is the CDP target id of the page.
func (p *Page) TargetID() string { return string(p.targetID) }

// BrowserContextID is the id of the page's own BrowserContext.
func (p *Page) BrowserContextID() string { return string(p.bctxID) }

// Navigate loads url and waits for its load event.
func (p *Page) Navigate(ctx context.Context, url string) error {
	if _, err := chromedp.Navigate(url)(ctx, p.t); err != nil {
		return fmt.Errorf("browser: navigate: %w", err)
	}
	return nil
}

// Evaluate runs expr in the page (awaiting a promise) and decodes the JSON
// value of its result into out (out may be nil).
func (p *Page) Evaluate(ctx context.Context, expr string, out any) error {
	yes := true
	res, err := cdp.Call(ctx, p.t, runtime.Evaluate, runtime.EvaluateParams{
		Expression: expr, ReturnByValue: &yes, AwaitPromise: &yes,
	})
	if err != nil {
		return fmt.Errorf("browser: evaluate: %w", err)
	}
	if res.ExceptionDetails != nil {
		return fmt.Errorf("browser: evaluate: %w", &chromedp.ExceptionError{ExceptionDetails: res.ExceptionDetails})
	}
	if out == nil {
		return nil
	}
	if res.Result == nil || len(res.Result.Value) == 0 {
		return fmt.Errorf("browser: evaluate: no JSON value (type %v)", resultType(res.Result))
	}
	if err := json.Unmarshal(res.Result.Value, out); err != nil {
		return fmt.Errorf("browser: evaluate: decode result: %w", err)
	}
	return nil
}

func resultType(r *runtime.RemoteObject) string {
	if r == nil {
		return "none"
	}
	return string(r.Type)
}

// SetViewport overrides the page's viewport (device scale factor 1, desktop).
func (p *Page) SetViewport(ctx context.Context, w, h int) error {
	if err := checkSize(w, h); err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	if err := setMetrics(ctx, p.t, w, h); err != nil {
		return fmt.Errorf("browser: %w", err)
	}
	return nil
}

// ResizeWindowBy grows (or shrinks) the page's window by dw×dh pixels. The
// viewport override changes what the page lays out, not the tab's real
// view below the browser's own UI (even headless), and tab capture records
// that view: the session corrects the window from the captured frame size.
func (p *Page) ResizeWindowBy(ctx context.Context, dw, dh int) error {
	win, err := cdp.Call(ctx, p.b.cdpBrowser, cdpbrowser.GetWindowForTarget, cdpbrowser.GetWindowForTargetParams{TargetID: p.targetID})
	if err != nil {
		return fmt.Errorf("browser: window of the page: %w", err)
	}
	if win.Bounds == nil {
		return errors.New("browser: window of the page: no bounds")
	}
	w, h := win.Bounds.Width+int64(dw), win.Bounds.Height+int64(dh)
	if w < 1 || h < 1 || w > maxViewport || h > maxViewport {
		return fmt.Errorf("browser: window %dx%d out of range", w, h)
	}
	if _, err := cdp.Call(ctx, p.b.cdpBrowser, cdpbrowser.SetWindowBounds, cdpbrowser.SetWindowBoundsParams{
		WindowID: win.WindowID, Bounds: &cdpbrowser.Bounds{Width: w, Height: h},
	}); err != nil {
		return fmt.Errorf("browser: resize the window: %w", err)
	}
	return nil
}

// Close detaches the session, closes the target and, for a page of
// NewPage, disposes its BrowserContext (which closes the context's other
// tabs too). It is idempotent, also after CloseTab.
func (p *Page) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		var errs []error
		if err := p.closeTarget(ctx); err != nil {
			errs = append(errs, err)
		}
		select {
		case <-p.b.done:
			return // the browser is gone and took the page with it
		default:
		}
		if p.ownsCtx && p.bctxID != "" {
			if _, err := cdp.Call(ctx, p.b.cdpBrowser, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: p.bctxID}); err != nil && !isGone(err) {
				errs = append(errs, fmt.Errorf("dispose browser context: %w", err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			p.closeErr = fmt.Errorf("browser: close page: %w", err)
		}
	})
	return p.closeErr
}

// CloseTab detaches and closes the page's target only: the other tabs of
// its BrowserContext live on. A page of NewPage still needs Close later to
// dispose its context. Idempotent.
func (p *Page) CloseTab(ctx context.Context) error {
	p.tabOnce.Do(func() {
		if err := p.closeTarget(ctx); err != nil {
			p.tabErr = fmt.Errorf("browser: close tab: %w", err)
		}
	})
	return p.tabErr
}

// closeTarget detaches our session and closes the target (a target that is
// gone already is not an error).
func (p *Page) closeTarget(ctx context.Context) error {
	p.b.mu.Lock()
	delete(p.b.pages, p)
	p.b.mu.Unlock()
	p.cancel() // detaches; waits at most chromedp's 5 s detach timeout
	select {
	case <-p.b.done:
		return nil
	default:
	}
	if _, err := cdp.Call(ctx, p.b.cdpBrowser, target.CloseTarget, target.CloseTargetParams{TargetID: p.targetID}); err != nil && !isGone(err) {
		return fmt.Errorf("close target: %w", err)
	}
	return nil
}

// release drops chromedp's side of the page without CDP calls (the browser
// is gone).
func (p *Page) release() {
	p.closeOnce.Do(p.cancel)
}

func (b *Browser) disposeContext(id cdp.BrowserContextID) {
	if id == "" {
		return // the default context is the browser's own
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeGrace)
	defer cancel()
	_, _ = cdp.Call(ctx, b.cdpBrowser, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: id})
}

// isGone reports a CDP error about a target or context that no longer exists
// (a crashed page, or one the user closed).
func isGone(err error) bool {
	s := err.Error()
	for _, sub := range []string{"No target with given id", "Failed to find browser context", "No browser context"} {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
