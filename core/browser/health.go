package browser

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdppage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
)

// What a session needs to tell a crashed or hung renderer from a live one,
// and to bring its tab back.

// crashSendWait is how long CrashRenderer waits for Page.crash to leave:
// the renderer dies instead of answering, so no reply ever comes.
const crashSendWait = 500 * time.Millisecond

// Ping evaluates a constant in the page: it answers only while the page's
// renderer runs its main thread (a hung script or a crashed renderer leave
// it unanswered), unlike the browser-side calls such as the navigation
// history. Under an open JavaScript dialog it does not answer either.
func (p *Page) Ping(ctx context.Context) error {
	if _, err := cdp.Call(ctx, p.t, runtime.Evaluate, runtime.EvaluateParams{Expression: "0"}); err != nil {
		return fmt.Errorf("browser: ping the page: %w", err)
	}
	return nil
}

// Reload reloads the page. It works on a crashed renderer too (the browser
// handles it and starts a new renderer), which is how a crashed tab comes
// back with the same target, CDP sessions and capture.
func (p *Page) Reload(ctx context.Context) error {
	if _, err := cdp.Call(ctx, p.t, cdppage.Reload, cdppage.ReloadParams{}); err != nil {
		return fmt.Errorf("browser: reload: %w", err)
	}
	return nil
}

// CrashRenderer ends a hung renderer: Page.crash is served on the
// renderer's IO thread, so it works while a script holds the main thread,
// which no reload or navigation does (the new document would wait for the
// same process). The renderer dies without answering (the browser may
// answer "Target crashed" for it), and Target.targetCrashed follows once
// the process is gone, which on a busy box takes a while: wait for that
// before reloading. Other pages of the renderer's process go with it, as
// with any renderer crash.
func (p *Page) CrashRenderer(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, crashSendWait)
	defer cancel()
	_, err := cdp.Call(cctx, p.t, cdppage.Crash, cdp.Empty{})
	switch {
	case err == nil, errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
	case strings.Contains(err.Error(), "Target crashed"):
	default:
		return fmt.Errorf("browser: crash the renderer: %w", err)
	}
	return nil
}

// Exited is closed as soon as Chromium's main process has exited, before
// Done (which also waits for the rest of its processes to be reaped): a
// caller that sees a CDP connection drop can tell the browser's death from
// a fault of its own at once.
func (b *Browser) Exited() <-chan struct{} { return b.proc.exited }
