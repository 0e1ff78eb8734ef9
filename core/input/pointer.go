package input

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
)

const (
	doubleClickTime = 500 * time.Millisecond
	doubleClickDist = 4.0 // CSS px
	maxWheelDelta   = 10000.0
)

// Button bits as CDP's buttons field numbers them (action.Action.Buttons).
const (
	bitLeft   = action.ButtonLeft
	bitRight  = action.ButtonRight
	bitMiddle = action.ButtonMiddle
)

// click is the last press, for counting multi-clicks.
type click struct {
	at     time.Time
	x, y   float64
	button int
	count  int
}

// mouseEvent is Input.dispatchMouseEvent's params. cdproto's struct omits
// zero deltas, and Chromium refuses a mouseWheel without both.
type mouseEvent struct {
	Type        string  `json:"type"`
	X           float64 `json:"x"`
	Y           float64 `json:"y"`
	Modifiers   int     `json:"modifiers"`
	Button      string  `json:"button"`
	Buttons     int     `json:"buttons"`
	ClickCount  int     `json:"clickCount"`
	DeltaX      float64 `json:"deltaX"`
	DeltaY      float64 `json:"deltaY"`
	PointerType string  `json:"pointerType"`
}

var dispatchMouse = cdp.Command[mouseEvent, cdp.Empty]{Method: input.CommandDispatchMouseEvent}

func buttonName(bits int) string {
	switch {
	case bits&bitLeft != 0:
		return "left"
	case bits&bitRight != 0:
		return "right"
	case bits&bitMiddle != 0:
		return "middle"
	}
	return "none"
}

// mapPoint turns normalized coordinates into CSS pixels of the viewport.
func (e *Executor) mapPoint(nx, ny float64) (float64, float64, error) {
	if math.IsNaN(nx) || math.IsNaN(ny) || math.IsInf(nx, 0) || math.IsInf(ny, 0) {
		return 0, 0, errcode.Newf(errcode.InvalidArgument, "coordinates must be finite")
	}
	w, h := e.Viewport()
	// A drag that leaves the video goes on along its edge.
	x := math.Min(math.Max(nx, 0), 1) * float64(w)
	y := math.Min(math.Max(ny, 0), 1) * float64(h)
	return math.Min(x, float64(w)-1), math.Min(y, float64(h)-1), nil
}

func (e *Executor) button(name string) (int, error) {
	switch name {
	case "", "left":
		return bitLeft, nil
	case "right":
		if !e.pol.AllowRightClick {
			return 0, errcode.Newf(errcode.NotAllowed, "right click is disabled by policy")
		}
		return bitRight, nil
	case "middle":
		// Middle click pastes the PRIMARY selection, which Chromium shares
		// across all its pages: another session's selected text.
		return 0, errcode.Newf(errcode.NotAllowed, "middle click is not allowed")
	}
	return 0, errcode.Newf(errcode.InvalidArgument, "unknown button")
}

// pointer performs a move, wheel, press or release. What is held is the
// dispatcher's (it owns held input): a.Buttons is the buttons down as the
// action starts, and a release of a button not among them lifts nothing.
func (e *Executor) pointer(ctx context.Context, a action.Action) error {
	x, y, err := e.mapPoint(a.X, a.Y)
	if err != nil {
		return err
	}
	mods := a.Modifiers & 0xf
	held := a.Buttons & (bitLeft | bitRight | bitMiddle)
	ev := mouseEvent{X: x, Y: y, Modifiers: mods, PointerType: "mouse"}
	switch a.Kind {
	case action.PointerMove:
		ev.Type = "mouseMoved"
		ev.Buttons = held
		ev.Button = buttonName(ev.Buttons)

	case action.Wheel:
		if math.IsNaN(a.DeltaX) || math.IsNaN(a.DeltaY) || math.IsInf(a.DeltaX, 0) || math.IsInf(a.DeltaY, 0) {
			return errcode.Newf(errcode.InvalidArgument, "wheel deltas must be finite")
		}
		ev.Type = "mouseWheel"
		ev.Buttons = held
		ev.Button = "none"
		ev.DeltaX = math.Max(-maxWheelDelta, math.Min(maxWheelDelta, a.DeltaX))
		ev.DeltaY = math.Max(-maxWheelDelta, math.Min(maxWheelDelta, a.DeltaY))

	case action.PointerDown:
		bit, err := e.button(a.Button)
		if err != nil {
			return err
		}
		ev.Type = "mousePressed"
		ev.Button = buttonName(bit)
		ev.Buttons = held | bit
		ev.ClickCount = e.countClick(bit, x, y, a.ClickCount)

	case action.PointerUp:
		bit, err := e.button(a.Button)
		if err != nil {
			return err
		}
		if held&bit == 0 {
			return nil // not held (never pressed, or released already)
		}
		ev.Type = "mouseReleased"
		ev.Button = buttonName(bit)
		ev.Buttons = held &^ bit
		ev.ClickCount = e.releaseCount(bit, a.ClickCount)
	}
	e.pos = [2]float64{x, y}
	_, err = call(ctx, e, dispatchMouse, ev)
	return pendingOK(err)
}

// click presses and releases a button at one point as one action. The
// release goes out right behind the press, without waiting for the press's
// reply: the pair costs one round trip to the page instead of two. Nothing
// is left held, whatever happens: the release is sent even when the press
// failed, as a person's pointer_up would be.
func (e *Executor) click(ctx context.Context, a action.Action) error {
	x, y, err := e.mapPoint(a.X, a.Y)
	if err != nil {
		return err
	}
	bit, err := e.button(a.Button)
	if err != nil {
		return err
	}
	held := a.Buttons & (bitLeft | bitRight | bitMiddle)
	press := mouseEvent{Type: "mousePressed", X: x, Y: y, Modifiers: a.Modifiers & 0xf, PointerType: "mouse",
		Button: buttonName(bit), Buttons: held | bit, ClickCount: e.countClick(bit, x, y, a.ClickCount)}
	release := press
	release.Type, release.Buttons = "mouseReleased", held
	e.pos = [2]float64{x, y}
	return pendingOK(e.guard(ctx, func(ctx context.Context) error {
		return e.sequence(ctx, pipeCmd{dispatchMouse.Method, press}, pipeCmd{dispatchMouse.Method, release})
	}))
}

// pipeCmd is one CDP command of a sequence.
type pipeCmd struct {
	method string
	params any
}

// sequence sends input commands in order, pipelined on the executor's own
// connection when it has one, else one after the other on the page's. Every
// command is sent even when an earlier one failed: the later ones end what
// the earlier began (a release after its press).
func (e *Executor) sequence(ctx context.Context, cmds ...pipeCmd) error {
	var replies []browser.Reply
	if p := e.inputPipe(ctx); p != nil {
		for _, c := range cmds {
			r, err := p.Send(c.method, c.params)
			if err != nil {
				break // the rest go the slow way, after the ones sent
			}
			replies = append(replies, r)
		}
	}
	var errs []error
	closed := false
	for _, r := range replies {
		err := r.Wait(ctx)
		closed = closed || errors.Is(err, browser.ErrConnClosed)
		errs = append(errs, err)
	}
	if closed && len(replies) == len(cmds) {
		// All went out, and the page's own socket closed before the
		// replies: the page closed (a click on "close" does that), and
		// what it closed on was this input.
		return nil
	}
	for _, c := range cmds[len(replies):] {
		errs = append(errs, e.t.Call(ctx, c.method, c.params, nil))
	}
	return errors.Join(errs...)
}

// inputPipe returns the executor's own connection to the page, dialing it
// when there is none (at most every pipeRetry after a failure), or nil:
// callers then fall back to the page's shared connection.
func (e *Executor) inputPipe(ctx context.Context) *browser.PageConn {
	if e.pipe != nil && e.pipe.Closed() {
		e.pipe.Close()
		e.pipe = nil
	}
	if e.pipe != nil || e.page == nil || e.now().Sub(e.pipeTried) < pipeRetry {
		return e.pipe
	}
	e.pipeTried = e.now()
	dctx, cancel := context.WithTimeout(ctx, pipeDial)
	defer cancel()
	p, err := e.page.DialConn(dctx)
	if err != nil {
		// The error would name the DevTools address: logs get none.
		e.log.Debug("input: own connection to the page failed; a click or key press takes two round trips", "timeout", errors.Is(err, context.DeadlineExceeded))
		return nil
	}
	e.pipe = p
	return p
}

// countClick numbers a press: the client's count when given, else one more
// than the previous press of the same button within 500 ms and 4 px.
func (e *Executor) countClick(bit int, x, y float64, given int) int {
	now := e.now()
	count := 1
	switch {
	case given > 0:
		count = min(given, 3)
	case e.last.button == bit && now.Sub(e.last.at) <= doubleClickTime && math.Hypot(x-e.last.x, y-e.last.y) <= doubleClickDist:
		count = min(e.last.count+1, 3)
	}
	e.last = click{at: now, x: x, y: y, button: bit, count: count}
	return count
}

// releaseCount numbers a release: the client's count when given, else its
// press's (the last press, when it was of this button).
func (e *Executor) releaseCount(bit, given int) int {
	switch {
	case given > 0:
		return min(given, 3)
	case e.last.button == bit:
		return e.last.count
	}
	return 1
}
