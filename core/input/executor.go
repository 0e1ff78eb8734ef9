// Package input performs producers' actions (pointer, keyboard, text,
// clipboard, navigation, dialogs) on one Chromium page through CDP, under
// the appliance's Policy, and reports the page's state.
package input

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/plugins/capture"
)

const (
	// navigateWait bounds how long navigate waits for Page.navigate (which
	// returns at commit); a slower load goes on and PageState reports it.
	navigateWait = 5 * time.Second
	// dialogAckWait is how long an event sent while a dialog blocks the
	// renderer waits for an ack that only comes after the dialog.
	dialogAckWait = 200 * time.Millisecond
	// stateCallTimeout bounds the calls that refresh PageState.
	stateCallTimeout = 2 * time.Second
	titlePoll        = time.Second
	initTimeout      = 10 * time.Second
	closeTimeout     = 2 * time.Second
	pipeDial         = 2 * time.Second
	pipeRetry        = 10 * time.Second
	fetchWorkers     = 2
	fetchQueue       = 128
	maxNotes         = 64
)

// PageState is what the panel shows about the page.
type PageState struct {
	URL, Title              string
	CanGoBack, CanGoForward bool
	Loading                 bool
	PageRevision            uint64
}

// Dialog is a JavaScript dialog waiting for dialog_response.
type Dialog struct {
	Type          string // alert, confirm, prompt, beforeunload
	Message       string
	DefaultPrompt string
	URL           string
}

// Events are called from one goroutine of the Executor, in order; they
// must not block.
type Events struct {
	OnPageState    func(PageState)
	OnDialogOpened func(Dialog)
	OnDialogClosed func()
}

// revisions numbers page revisions process-wide, so a revision is never
// reused: not by another page, nor after a page switch.
var revisions atomic.Uint64

var (
	errClosed     = errcode.New(errcode.SessionClosed, "input closed")
	errDialogOpen = errcode.New(errcode.Conflict, "a dialog is open; answer it with dialog_response")
	// errDialogPending: the call was sent, but a dialog opened and blocks
	// its answer.
	errDialogPending = errors.New("dialog opened")
)

// Executor performs actions on one page. Execute calls are serialized.
type Executor struct {
	page *browser.Page
	t    *chromedp.Target
	pol  *compiled
	ev   Events
	log  *slog.Logger
	now  func() time.Time

	ctx       context.Context // ends at Close
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	stops     []func()
	closeOnce sync.Once

	rev atomic.Uint64

	// mu serializes Execute and guards the input state below. What is
	// held is not here: the dispatcher owns it (see pointer).
	mu        sync.Mutex
	pos       [2]float64        // last pointer position, CSS px
	pipe      *browser.PageConn // own connection to the page, for pipelined input; lazily
	pipeTried time.Time
	last      click
	clip      string // the page's clipboard (see clipboard.go)

	// smu guards what the event listeners write.
	smu          sync.Mutex
	state        PageState // PageRevision unused; see rev
	mainFrame    cdp.FrameID
	dialog       *Dialog
	dialogCtx    context.Context // canceled while a dialog is open
	dialogCancel context.CancelFunc
	vw, vh       int
	notes        []func(Events)
	needHistory  bool
	needViewport bool
	kick         chan struct{}

	fetchQ chan *fetch.EventRequestPaused

	// egressRefused counts main-frame documents the egress proxy refused;
	// egressCount (under smu; nil without one) reads the session's egress
	// refusal count. See egress.go.
	egressRefused atomic.Uint64
	egressCount   func() uint64
}

// New attaches an Executor to page: it listens to the page's events,
// intercepts its document requests for the navigation policy and starts
// its goroutines (stopped by Close).
func New(p *browser.Page, pol Policy, ev Events, log *slog.Logger) (*Executor, error) {
	c, err := pol.compile()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Executor{
		page:   p,
		t:      p.Target(),
		pol:    c,
		ev:     ev,
		log:    log,
		now:    time.Now,
		ctx:    ctx,
		cancel: cancel,
		kick:   make(chan struct{}, 1),
		fetchQ: make(chan *fetch.EventRequestPaused, fetchQueue),
		vw:     1280,
		vh:     720,
	}
	e.dialogCtx, e.dialogCancel = context.WithCancel(context.Background())
	e.rev.Store(revisions.Add(1))
	if err := e.init(); err != nil {
		e.Close()
		return nil, fmt.Errorf("input: %w", err)
	}
	return e, nil
}

func (e *Executor) init() error {
	// Listen first, then read the current state, so that no change is lost.
	stop, err := e.page.Listen(e.onEvent)
	if err != nil {
		return err
	}
	e.stops = append(e.stops, stop)
	ctx, cancel := context.WithTimeout(e.ctx, initTimeout)
	defer cancel()
	ft, err := cdp.Call(ctx, e.t, page.GetFrameTree, cdp.Empty{})
	if err != nil {
		return fmt.Errorf("frame tree: %w", err)
	}
	e.smu.Lock()
	if e.mainFrame == "" && ft.FrameTree != nil && ft.FrameTree.Frame != nil {
		e.mainFrame = ft.FrameTree.Frame.ID
		e.state.URL = ft.FrameTree.Frame.URL + ft.FrameTree.Frame.URLFragment
	}
	e.needHistory = true
	e.smu.Unlock()
	// Coordinates need the size before the first action; under a dialog
	// the read fails and the events goroutine retries once it closes.
	if !e.readViewport(ctx) {
		e.smu.Lock()
		e.needViewport = true
		e.smu.Unlock()
	}

	// Every document request (top level and frames, redirects included)
	// passes the navigation policy, not only the navigate action; every
	// document response is looked at for the egress proxy's refusal (see
	// egress.go).
	if _, err := cdp.Call(ctx, e.t, fetch.Enable, fetch.EnableParams{Patterns: []*fetch.RequestPattern{{
		URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageRequest,
	}, {
		URLPattern: "*", ResourceType: network.ResourceTypeDocument, RequestStage: fetch.RequestStageResponse,
	}}}); err != nil {
		return fmt.Errorf("fetch enable: %w", err)
	}

	e.wg.Add(1 + fetchWorkers)
	go e.run()
	for range fetchWorkers {
		go e.fetchLoop()
	}
	e.poke()
	return nil
}

// Close stops the goroutines and the interception. (Held keys and buttons
// are the dispatcher's to release: its Close lifts them first.) It is
// idempotent; in-flight Execute calls end with session_closed. It must not be called from an Events
// callback (it waits for the goroutine that runs them).
func (e *Executor) Close() {
	e.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		defer cancel()
		// Disable interception first: it releases paused requests.
		if _, err := cdp.Call(ctx, e.t, fetch.Disable, cdp.Empty{}); err != nil {
			e.log.Debug("input: fetch disable", "err", err)
		}
		for _, stop := range e.stops {
			stop()
		}
		e.cancel()
		e.wg.Wait()
		e.mu.Lock()
		defer e.mu.Unlock()
		if e.pipe != nil {
			e.pipe.Close()
			e.pipe = nil
		}
	})
}

// PageRevision rises on every cross-document navigation of the main frame
// (and differs between pages). Same-document navigations (fragments,
// history.pushState) keep it: the document and what the producer aimed at
// stay, and an SPA would otherwise refuse a double click whose first click
// changed the route.
func (e *Executor) PageRevision() uint64 { return e.rev.Load() }

// PageState is the latest known state.
func (e *Executor) PageState() PageState {
	e.smu.Lock()
	defer e.smu.Unlock()
	st := e.state
	st.PageRevision = e.rev.Load()
	return st
}

// Viewport is the page's viewport in CSS pixels, which normalized
// coordinates map to.
func (e *Executor) Viewport() (w, h int) {
	e.smu.Lock()
	defer e.smu.Unlock()
	return e.vw, e.vh
}

// Execute performs a. Refusals and failures are *errcode.Error values with
// stable codes and messages that never echo text, clipboard or URLs.
// producerID is not used: the executor keeps no state per producer (the
// dispatcher owns held input and sets a.Buttons).
func (e *Executor) Execute(ctx context.Context, producerID string, a action.Action) (action.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx.Err() != nil {
		return action.Result{PageRevision: e.rev.Load()}, errClosed
	}
	// Close aborts what is in flight, lookups included.
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	text, err := e.exec(actx, a)
	if err != nil {
		err = e.classify(ctx, a.Kind, err)
		text = ""
	}
	return action.Result{Text: text, PageRevision: e.rev.Load()}, err
}

func (e *Executor) exec(ctx context.Context, a action.Action) (string, error) {
	if a.UsesCoordinates() && a.PageRevision != 0 && a.PageRevision != e.rev.Load() {
		return "", errcode.Newf(errcode.StalePage, "the page changed")
	}
	switch a.Kind {
	case action.PointerMove, action.PointerDown, action.Click, action.Wheel, action.KeyDown, action.KeyPress, action.TextInsert, action.ClipboardRead:
		// The renderer is blocked under a dialog; its events would queue.
		if e.dialogOpen() {
			return "", errDialogOpen
		}
	}
	switch a.Kind {
	case action.PointerMove, action.PointerDown, action.PointerUp, action.Wheel:
		return "", e.pointer(ctx, a)
	case action.Click:
		return "", e.click(ctx, a)
	case action.KeyDown:
		return e.keyDown(ctx, a)
	case action.KeyUp:
		return "", e.keyUp(ctx, a)
	case action.KeyPress:
		return e.keyPress(ctx, a)
	case action.TextInsert:
		if a.Replace {
			return "", e.replaceText(ctx, a)
		}
		return "", e.insertText(ctx, a.Text)
	case action.ClipboardWrite:
		return "", e.clipboardWrite(a.Text)
	case action.ClipboardRead:
		return e.clipboardRead(ctx)
	case action.Navigate:
		return "", e.navigate(ctx, a.URL)
	case action.Back:
		return "", e.history(ctx, -1)
	case action.Forward:
		return "", e.history(ctx, +1)
	case action.Reload:
		return "", e.reload(ctx)
	case action.Stop:
		_, err := call(ctx, e, page.StopLoading, cdp.Empty{})
		return "", pendingOK(err)
	case action.Viewport:
		return "", e.viewport(ctx, a.Width, a.Height)
	case action.DialogResponse:
		return "", e.dialogResponse(ctx, a.Accept, a.PromptText)
	case action.Heartbeat:
		return "", nil
	}
	return "", errcode.Newf(errcode.UnknownKind, "unknown action kind")
}

// classify turns an error into an *errcode.Error with a safe message; the
// detail goes to the debug log (CDP errors never hold typed text).
func (e *Executor) classify(ctx context.Context, kind action.Kind, err error) error {
	var ae *errcode.Error
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, errDialogPending):
		return errDialogOpen // a dialog opened before the page answered
	case e.ctx.Err() != nil || errors.Is(err, chromedp.ErrTargetDetached):
		return errClosed
	case ctx.Err() != nil:
		return errcode.Newf(errcode.Timeout, "%s timed out", kind)
	}
	e.log.Debug("input: action failed", "kind", string(kind), "err", err)
	return errcode.Newf(errcode.Failed, "%s failed", kind)
}

func pendingOK(err error) error {
	if errors.Is(err, errDialogPending) {
		return nil
	}
	return err
}

func (e *Executor) dialogOpen() bool {
	e.smu.Lock()
	defer e.smu.Unlock()
	return e.dialog != nil
}

// call runs a CDP command for an action. The renderer stops answering
// while a JavaScript dialog is open, so a command during which a dialog
// opens returns errDialogPending instead of waiting for the 30 s deadline,
// and one sent while a dialog is open waits only dialogAckWait.
func call[P, R any](ctx context.Context, e *Executor, cmd cdp.Command[P, R], params P) (R, error) {
	var res R
	err := e.guard(ctx, func(ctx context.Context) error {
		return e.t.Call(ctx, cmd.Method, params, &res)
	})
	return res, err
}

func (e *Executor) guard(ctx context.Context, fn func(context.Context) error) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(e.ctx, cancel)()
	e.smu.Lock()
	dctx := e.dialogCtx
	e.smu.Unlock()
	if dctx.Err() != nil {
		tctx, tcancel := context.WithTimeout(cctx, dialogAckWait)
		defer tcancel()
		err := fn(tctx)
		if err != nil && tctx.Err() != nil && cctx.Err() == nil {
			return errDialogPending
		}
		return err
	}
	defer context.AfterFunc(dctx, cancel)()
	err := fn(cctx)
	if err != nil && dctx.Err() != nil && ctx.Err() == nil && e.ctx.Err() == nil {
		return errDialogPending
	}
	return err
}

func (e *Executor) poke() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// note queues a dialog notification for the events goroutine; smu held.
func (e *Executor) noteLocked(fn func(Events)) {
	if len(e.notes) >= maxNotes {
		e.notes = e.notes[1:]
	}
	e.notes = append(e.notes, fn)
}

// onEvent runs on chromedp's reader goroutine: record and poke, never call.
func (e *Executor) onEvent(ev any) {
	switch ev := ev.(type) {
	case *page.EventFrameNavigated:
		if ev.Frame == nil || ev.Frame.ParentID != "" {
			return
		}
		e.smu.Lock()
		e.mainFrame = ev.Frame.ID
		e.state.URL = ev.Frame.URL + ev.Frame.URLFragment
		e.rev.Store(revisions.Add(1))
		e.closeDialogLocked() // a navigation takes its dialog with it
		e.needHistory = true
		e.smu.Unlock()
	case *page.EventNavigatedWithinDocument:
		e.smu.Lock()
		if ev.FrameID == e.mainFrame {
			e.state.URL = ev.URL
			e.needHistory = true
		}
		e.smu.Unlock()
	case *page.EventFrameStartedLoading:
		e.smu.Lock()
		if ev.FrameID == e.mainFrame {
			e.state.Loading = true
		}
		e.smu.Unlock()
	case *page.EventFrameStoppedLoading:
		e.smu.Lock()
		if ev.FrameID == e.mainFrame {
			e.state.Loading = false
			e.needHistory = true
		}
		e.smu.Unlock()
	case *page.EventFrameResized:
		e.smu.Lock()
		e.needViewport = true
		e.smu.Unlock()
	case *page.EventJavascriptDialogOpening:
		d := Dialog{Type: string(ev.Type), Message: ev.Message, DefaultPrompt: ev.DefaultPrompt, URL: ev.URL}
		e.smu.Lock()
		e.dialog = &d
		e.dialogCancel()
		e.noteLocked(func(ev Events) {
			if ev.OnDialogOpened != nil {
				ev.OnDialogOpened(d)
			}
		})
		e.smu.Unlock()
	case *page.EventJavascriptDialogClosed:
		e.smu.Lock()
		e.closeDialogLocked()
		e.smu.Unlock()
	case *fetch.EventRequestPaused:
		select {
		case e.fetchQ <- ev:
		default:
			// Left paused: the page waits rather than bypass the policy.
			e.log.Warn("input: too many paused document requests")
		}
		return
	default:
		return
	}
	e.poke()
}

func (e *Executor) closeDialogLocked() {
	if e.dialog == nil {
		return
	}
	e.dialog = nil
	e.dialogCtx, e.dialogCancel = context.WithCancel(context.Background())
	e.needViewport = true // a resize during the dialog could not be read
	e.noteLocked(func(ev Events) {
		if ev.OnDialogClosed != nil {
			ev.OnDialogClosed()
		}
	})
}

// run refreshes what events only hint at and calls Events, in order.
func (e *Executor) run() {
	defer e.wg.Done()
	// CDP reports no title changes to a page's own session (and
	// Target.targetInfoChanged misses most), so the title is polled from
	// the navigation history, a browser-side call that works under dialogs.
	tick := time.NewTicker(titlePoll)
	defer tick.Stop()
	var last PageState
	pushed := false
	for {
		poll := false
		select {
		case <-e.ctx.Done():
			return
		case <-e.kick:
		case <-tick.C:
			poll = true
		}
		e.smu.Lock()
		hist, vp := e.needHistory || poll, e.needViewport && e.dialog == nil
		e.needHistory = false
		if vp {
			e.needViewport = false
		}
		e.smu.Unlock()
		if hist {
			e.refreshHistory()
		}
		if vp {
			e.refreshViewport()
		}
		e.smu.Lock()
		notes := e.notes
		e.notes = nil
		st := e.state
		st.PageRevision = e.rev.Load()
		e.smu.Unlock()
		for _, n := range notes {
			n(e.ev)
		}
		if (!pushed || st != last) && e.ev.OnPageState != nil {
			e.ev.OnPageState(st)
		}
		last, pushed = st, true
	}
}

func (e *Executor) refreshHistory() {
	ctx, cancel := context.WithTimeout(e.ctx, stateCallTimeout)
	defer cancel()
	h, err := cdp.Call(ctx, e.t, page.GetNavigationHistory, cdp.Empty{})
	if err != nil {
		e.log.Debug("input: navigation history", "err", err)
		return
	}
	e.smu.Lock()
	if h.CurrentIndex >= 0 && h.CurrentIndex < int64(len(h.Entries)) {
		// A tab-capture start retitles the tab for a moment: keep showing
		// the page's own title.
		if t := h.Entries[h.CurrentIndex].Title; !strings.HasPrefix(t, capture.PickerTitlePrefix) {
			e.state.Title = t
		}
	}
	e.state.CanGoBack = h.CurrentIndex > 0
	e.state.CanGoForward = h.CurrentIndex < int64(len(h.Entries))-1
	e.smu.Unlock()
}

func (e *Executor) refreshViewport() { e.readViewport(e.ctx) }

// readViewport reads the viewport's CSS size from the layout metrics (not
// innerWidth, which the page can overwrite; headless hides scrollbars, so
// the client size is the whole viewport).
func (e *Executor) readViewport(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, stateCallTimeout)
	defer cancel()
	lm, err := cdp.Call(ctx, e.t, page.GetLayoutMetrics, cdp.Empty{})
	if err != nil || lm.CSSLayoutViewport == nil || lm.CSSLayoutViewport.ClientWidth <= 0 || lm.CSSLayoutViewport.ClientHeight <= 0 {
		e.log.Debug("input: layout metrics", "err", err)
		return false
	}
	e.smu.Lock()
	e.vw, e.vh = int(lm.CSSLayoutViewport.ClientWidth), int(lm.CSSLayoutViewport.ClientHeight)
	e.smu.Unlock()
	return true
}

func (e *Executor) fetchLoop() {
	defer e.wg.Done()
	for {
		select {
		case <-e.ctx.Done():
			return
		case ev := <-e.fetchQ:
			e.checkPaused(ev)
		}
	}
}

// checkPaused applies the navigation policy to a document request, and
// notes a document response the egress proxy refused.
func (e *Executor) checkPaused(ev *fetch.EventRequestPaused) {
	if ev.ResponseStatusCode != 0 || ev.ResponseErrorReason != "" {
		e.checkResponse(ev)
		return
	}
	u := ""
	if ev.Request != nil {
		u = ev.Request.URL + ev.Request.URLFragment
	}
	reason := e.pol.check(e.ctx, u)
	ctx, cancel := context.WithTimeout(e.ctx, stateCallTimeout)
	defer cancel()
	var err error
	if reason == "" {
		_, err = cdp.Call(ctx, e.t, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: ev.RequestID})
	} else {
		e.log.Debug("input: document request blocked", "url", redactURL(u), "reason", reason)
		_, err = cdp.Call(ctx, e.t, fetch.FailRequest, fetch.FailRequestParams{RequestID: ev.RequestID, ErrorReason: network.ErrorReasonBlockedByClient})
	}
	if err != nil && e.ctx.Err() == nil {
		e.log.Debug("input: answer paused request", "err", err)
	}
}

// cdpError reports a protocol error whose message contains sub.
func cdpError(err error, sub string) bool {
	var ce *cdproto.Error
	return errors.As(err, &ce) && strings.Contains(ce.Message, sub)
}

// NewRevision gives the page a new revision, as a main-frame navigation
// does. A session calls it when this page becomes the one it streams and
// drives (a tab switch): coordinates and refs aimed at the page shown
// before are then stale. It returns the new revision.
func (e *Executor) NewRevision() uint64 {
	r := revisions.Add(1)
	e.rev.Store(r)
	e.poke() // page_state carries the revision
	return r
}

// HandOver gives the session's clipboard (clipboard_write, copies) to the
// executor of the page the session switches to: it is the session's, not
// one tab's.
func (e *Executor) HandOver(to *Executor) {
	if to == e {
		return
	}
	e.mu.Lock()
	clip := e.clip
	e.mu.Unlock()
	to.mu.Lock()
	to.clip = clip
	to.mu.Unlock()
}

// OpenDialog is the JavaScript dialog waiting for an answer, if any.
func (e *Executor) OpenDialog() (Dialog, bool) {
	e.smu.Lock()
	defer e.smu.Unlock()
	if e.dialog == nil {
		return Dialog{}, false
	}
	return *e.dialog, true
}
