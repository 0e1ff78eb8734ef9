package browser

import (
	"context"
	"fmt"

	"github.com/chromedp/chromedp"
)

// Target is the page's attached CDP session, for cdp.Call and cdp.Events.
// It stays valid until Close; calls after Close fail.
func (p *Page) Target() *chromedp.Target { return p.t }

// Listen calls fn for each CDP event of the page (pointers to cdproto event
// types), in arrival order, until stop is called or the page closes. fn runs
// on the goroutine that reads the page's messages: it must return fast, must
// not panic and must not issue CDP calls (that would deadlock).
func (p *Page) Listen(fn func(ev any)) (stop func(), err error) {
	lctx, cancel := context.WithCancel(p.ctx)
	if err := chromedp.Listen(lctx, fn); err != nil {
		cancel()
		return func() {}, fmt.Errorf("browser: listen: %w", err)
	}
	return cancel, nil
}
