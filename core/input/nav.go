package input

import (
	"context"
	"errors"
	"regexp"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/tabcast/tabcast/core/errcode"
)

// netError is a Chromium net error name, safe to show (no address in it).
var netError = regexp.MustCompile(`^net::ERR_[A-Z0-9_]+$`)

func (e *Executor) navigate(ctx context.Context, raw string) error {
	if reason := e.pol.check(ctx, raw); reason != "" {
		e.log.Debug("input: navigation blocked", "url", redactURL(raw), "reason", reason)
		return errBlocked
	}
	nctx, cancel := context.WithTimeout(ctx, navigateWait)
	defer cancel()
	mark := e.EgressMark()
	res, err := call(nctx, e, page.Navigate, page.NavigateParams{URL: trimURL(raw)})
	switch {
	case errors.Is(err, errDialogPending):
		return nil // a beforeunload dialog asks first
	case err != nil && nctx.Err() != nil && ctx.Err() == nil:
		return nil // slow to commit: it goes on, and PageState follows
	case err != nil:
		return err
	case res.ErrorText == "net::ERR_BLOCKED_BY_CLIENT":
		return errBlocked // the document request (or a redirect) was refused
	case e.EgressBlocked(mark, res.ErrorText):
		return ErrEgressBlocked
	case res.ErrorText != "":
		msg := "navigation failed"
		if netError.MatchString(res.ErrorText) {
			msg += ": " + res.ErrorText
		}
		return errcode.New(errcode.Failed, msg)
	}
	return nil
}

func (e *Executor) history(ctx context.Context, delta int64) error {
	h, err := call(ctx, e, page.GetNavigationHistory, cdp.Empty{})
	if err != nil {
		return err
	}
	i := h.CurrentIndex + delta
	if i < 0 || i >= int64(len(h.Entries)) {
		if delta < 0 {
			return errcode.Newf(errcode.Failed, "no page to go back to")
		}
		return errcode.Newf(errcode.Failed, "no page to go forward to")
	}
	_, err = call(ctx, e, page.NavigateToHistoryEntry, page.NavigateToHistoryEntryParams{EntryID: h.Entries[i].ID})
	return pendingOK(err)
}

func (e *Executor) reload(ctx context.Context) error {
	nctx, cancel := context.WithTimeout(ctx, navigateWait)
	defer cancel()
	_, err := call(nctx, e, page.Reload, page.ReloadParams{})
	if err != nil && nctx.Err() != nil && ctx.Err() == nil {
		return nil
	}
	return pendingOK(err)
}

// viewport resizes the page within the policy's bounds (clamped, not
// refused: a panel asks for its container's size). PageRevision stays: the
// coordinates are normalized.
func (e *Executor) viewport(ctx context.Context, w, h int) error {
	if w <= 0 || h <= 0 {
		return errcode.Newf(errcode.InvalidArgument, "width and height must be positive")
	}
	w = min(max(w, e.pol.MinWidth), e.pol.MaxWidth)
	h = min(max(h, e.pol.MinHeight), e.pol.MaxHeight)
	err := e.guard(ctx, func(ctx context.Context) error { return e.page.SetViewport(ctx, w, h) })
	if err != nil {
		return pendingOK(err)
	}
	e.smu.Lock()
	e.vw, e.vh = w, h
	e.smu.Unlock()
	return nil
}

func (e *Executor) dialogResponse(ctx context.Context, accept bool, prompt string) error {
	if len(prompt) > e.pol.MaxText {
		return errcode.Newf(errcode.TooLarge, "prompt text over %d bytes", e.pol.MaxText)
	}
	if !e.dialogOpen() {
		return errcode.Newf(errcode.NoDialog, "no dialog is open")
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	err := e.t.Call(cctx, page.CommandHandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: accept, PromptText: prompt}, nil)
	if cdpError(err, "No dialog") {
		return errcode.Newf(errcode.NoDialog, "no dialog is open")
	}
	return err
}
