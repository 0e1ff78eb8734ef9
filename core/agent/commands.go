package agent

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/snapshot"
)

// Request is one agent command (docs/protocol.md, "Agent API"). Only the
// fields its command uses are read.
type Request struct {
	Command string `json:"command"`
	// ActionID makes the request idempotent: a repeat returns the first
	// result and does nothing.
	ActionID  string `json:"actionId,omitempty"`
	TimeoutMs int    `json:"timeoutMs,omitempty"`

	// Target element: a ref of the latest snapshot ("e3" or "@e3"), a CSS
	// selector, or a role and accessible name; X/Y (CSS px) as a fallback.
	Ref      string   `json:"ref,omitempty"`
	Selector string   `json:"selector,omitempty"`
	Role     string   `json:"role,omitempty"`
	Name     string   `json:"name,omitempty"`
	X        *float64 `json:"x,omitempty"`
	Y        *float64 `json:"y,omitempty"`

	Text  string `json:"text,omitempty"`  // fill, type; wait: text to appear
	Key   string `json:"key,omitempty"`   // press: "Enter", "Control+a", "Shift+Tab"
	URL   string `json:"url,omitempty"`   // navigate; wait: URL substring
	Attr  string `json:"attr,omitempty"`  // get attr
	What  string `json:"what,omitempty"`  // get: text|value|attr|title|url|count|box; is: visible|enabled|checked
	Value string `json:"value,omitempty"` // select: the option's value or label

	// snapshot
	Interactive   bool `json:"interactive,omitempty"`
	Compact       bool `json:"compact,omitempty"`
	MaxDepth      int  `json:"maxDepth,omitempty"`
	IncludeValues bool `json:"includeValues,omitempty"`
	NoFrames      bool `json:"noFrames,omitempty"`
	MaxNodes      int  `json:"maxNodes,omitempty"`

	// scroll
	DeltaX float64 `json:"deltaX,omitempty"`
	DeltaY float64 `json:"deltaY,omitempty"`

	// dialog
	Accept     bool   `json:"accept,omitempty"`
	PromptText string `json:"promptText,omitempty"`

	// screenshot: png (default) or jpeg
	Format string `json:"format,omitempty"`

	// request_human: what the person should do (shown in the panel).
	Reason string `json:"reason,omitempty"`

	// upload: base names of files in the session's upload area.
	Files []string `json:"files,omitempty"`

	// tabs (list|new|switch|close), cookies and storage (get|set|clear).
	Op string `json:"op,omitempty"`
	// tabs switch/close: the tab's index in the list or its id.
	Index *int   `json:"index,omitempty"`
	TabID string `json:"tabId,omitempty"`
	// tabs new: open the tab without switching to it.
	Background bool `json:"background,omitempty"`
	// cookies set: the cookie; cookies get: name/domain filter it.
	Cookie *CookieInput `json:"cookie,omitempty"`
	// storage: local or session; the item is Key (and Value to set).
	Area string `json:"area,omitempty"`
	// cookies, storage get: show values (redacted by default).
	Reveal bool `json:"reveal,omitempty"`

	// eval: a JavaScript expression (its JSON value is returned).
	Expression string `json:"expression,omitempty"`
	// wait: a load state (load, domcontentloaded, networkidle) and a
	// JavaScript predicate polled until truthy.
	Load     string `json:"load,omitempty"`
	Function string `json:"function,omitempty"`
}

// Result of a command. Data depends on the command.
type Result struct {
	OK       bool   `json:"ok"`
	Command  string `json:"command"`
	ActionID string `json:"actionId,omitempty"`
	// Duplicate: this actionId was done before; nothing ran now.
	Duplicate bool `json:"duplicate,omitempty"`
	// ActionRevision is the last action's place in the session's one order
	// (people and agents); PageRevision the page's after the command.
	ActionRevision uint64 `json:"actionRevision,omitempty"`
	PageRevision   uint64 `json:"pageRevision"`
	// Summary says what happened, safely (never typed text).
	Summary string `json:"summary,omitempty"`
	Data    any    `json:"data,omitempty"`
}

// Screenshot limits.
const maxScreenshotBytes = 8 << 20

// reads (the commands that never touch the page, so a person holding
// control does not stop them) and Commands come from Table (table.go).

// readOp: tabs list, cookies get and storage get are reads too.
func readOp(r Request) bool {
	op := strings.ToLower(r.Op)
	switch strings.ToLower(r.Command) {
	case "tabs":
		return op == "" || op == "list"
	case "cookies", "storage":
		return op == "" || op == "get"
	}
	return false
}

func (d *driver) run(ctx context.Context, r Request) (*Result, error) {
	pg := d.s.Page()
	if pg == nil {
		return nil, errorf(errcode.NotReady, true, "", "the session has no page yet")
	}
	res := &Result{OK: true}
	if !reads[strings.ToLower(r.Command)] && !readOp(r) {
		if err := d.s.AgentMayAct(); err != nil {
			return nil, errorf(errcode.HumanInControl, true, "a person has taken control of this session; wait and retry, or use request_human", "a person holds control")
		}
	}
	switch strings.ToLower(r.Command) {
	case "request_human":
		return d.requestHuman(ctx, r)
	case "snapshot":
		return d.snapshot(ctx, r)
	case "click", "dblclick":
		n := 1
		if strings.EqualFold(r.Command, "dblclick") {
			n = 2
		}
		rev, what, err := d.click(ctx, r, n)
		res.ActionRevision, res.Summary = rev, "clicked "+what
		return res, err
	case "hover":
		x, y, what, err := d.point(ctx, r)
		if err != nil {
			return nil, err
		}
		_, _, err = d.submit(ctx, d.pointer(action.PointerMove, x, y, 0))
		res.Summary = "hovered " + what
		return res, err
	case "focus":
		el, what, err := d.element(ctx, r)
		if err != nil {
			return nil, err
		}
		res.Summary = "focused " + what
		return res, el.Focus(ctx)
	case "fill":
		// A real click focuses the field (as a person would), then the
		// keyboard selects all and the text replaces the selection (or
		// Backspace deletes it, to fill with nothing): every input and
		// change event the page listens to fires.
		rev, what, err := d.click(ctx, r, 1)
		if err != nil {
			return nil, err
		}
		if rev, _, err = d.submit(ctx, action.Action{Kind: action.TextInsert, Text: r.Text, Replace: true}); err != nil {
			return nil, err
		}
		res.ActionRevision, res.Summary = rev, fmt.Sprintf("filled %s (%d characters)", what, len([]rune(r.Text)))
		return res, nil
	case "type":
		if r.Ref != "" || r.Selector != "" || r.Role != "" {
			if _, _, err := d.click(ctx, r, 1); err != nil {
				return nil, err
			}
		}
		var rev uint64
		for _, ch := range r.Text {
			var err error
			if rev, _, err = d.submit(ctx, action.Action{Kind: action.TextInsert, Text: string(ch)}); err != nil {
				return nil, err
			}
		}
		res.ActionRevision, res.Summary = rev, fmt.Sprintf("typed %d characters", len([]rune(r.Text)))
		return res, nil
	case "press":
		rev, err := d.press(ctx, r.Key)
		res.ActionRevision, res.Summary = rev, "pressed "+r.Key
		return res, err
	case "check", "uncheck":
		el, what, err := d.element(ctx, r)
		if err != nil {
			return nil, err
		}
		want := strings.EqualFold(r.Command, "check")
		on, err := el.IsChecked(ctx)
		if err != nil {
			return nil, err
		}
		if on != want {
			rev, _, err := d.click(ctx, r, 1)
			if err != nil {
				return nil, err
			}
			res.ActionRevision = rev
		}
		res.Summary = fmt.Sprintf("%s is %sed", what, strings.ToLower(r.Command))
		return res, nil
	case "select":
		return d.selectOption(ctx, r)
	case "scroll":
		x, y := 0.5, 0.5
		if r.Ref != "" || r.Selector != "" || r.Role != "" || r.X != nil {
			px, py, _, err := d.point(ctx, r)
			if err != nil {
				return nil, err
			}
			x, y = px, py
		} else {
			w, h := d.s.InputViewport()
			x, y = float64(w)/2, float64(h)/2
		}
		if r.DeltaX == 0 && r.DeltaY == 0 {
			return nil, errorf(errcode.InvalidArgument, false, "", "scroll needs deltaX or deltaY")
		}
		a := d.pointer(action.Wheel, x, y, 0)
		a.DeltaX, a.DeltaY = r.DeltaX, r.DeltaY
		_, _, err := d.submit(ctx, a)
		res.Summary = fmt.Sprintf("scrolled by %.0f,%.0f", r.DeltaX, r.DeltaY)
		return res, err
	case "scrollintoview":
		el, what, err := d.element(ctx, r)
		if err != nil {
			return nil, err
		}
		_, _, err = snapshot.ClickPoint(ctx, el)
		res.Summary = "scrolled " + what + " into view"
		return res, err
	case "navigate", "back", "forward", "reload":
		a := action.Action{Kind: action.Kind(strings.ToLower(r.Command)), URL: r.URL}
		before := d.p.PageRevision()
		rev, _, err := d.submit(ctx, a)
		if err != nil {
			return nil, err
		}
		res.ActionRevision, res.Summary = rev, d.settle(ctx, before)
		return res, nil
	case "dialog":
		rev, _, err := d.submit(ctx, action.Action{Kind: action.DialogResponse, Accept: r.Accept, PromptText: r.PromptText})
		res.ActionRevision, res.Summary = rev, map[bool]string{true: "accepted the dialog", false: "dismissed the dialog"}[r.Accept]
		return res, err
	case "wait":
		return d.wait(ctx, r)
	case "get":
		return d.get(ctx, r)
	case "is":
		return d.is(ctx, r)
	case "screenshot":
		return d.screenshot(ctx, r)
	case "upload":
		return d.upload(ctx, r)
	case "tabs":
		return d.tabs(ctx, r)
	case "cookies":
		return d.cookies(ctx, r)
	case "storage":
		return d.storage(ctx, r)
	case "eval":
		return d.eval(ctx, r)
	}
	return nil, errorf(errcode.UnknownCommand, false, "commands: "+strings.Join(Commands, ", "), "unknown command %q", r.Command)
}

// settle waits, after a navigation command, until the page has moved to
// its new document (the revision changed) and loaded, so the agent's next
// snapshot sees the new page. A same-document navigation never changes the
// revision: after navSettle it only waits for the load.
func (d *driver) settle(ctx context.Context, before uint64) string {
	const navSettle = 3 * time.Second
	deadline := time.Now().Add(navSettle)
	for d.p.PageRevision() == before && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	for ctx.Err() == nil {
		var state string
		if err := d.s.Page().Evaluate(ctx, "document.readyState", &state); err == nil && state == "complete" {
			return "loaded"
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "still loading"
}

// requestHuman shows the reason in the panel and waits until a person marks
// it done; running out of time is a result (done: false), not an error.
func (d *driver) requestHuman(ctx context.Context, r Request) (*Result, error) {
	reason := strings.TrimSpace(r.Reason)
	if reason == "" || len(reason) > 500 {
		return nil, errorf(errcode.InvalidArgument, false, "", "reason: 1..500 characters saying what the person should do")
	}
	out, err := d.s.RequestHuman(ctx, d.user, reason)
	if err != nil {
		return nil, errorf(errcode.NotReady, false, "", "the session ended while waiting for a person")
	}
	res := &Result{OK: out.Done, Data: out, Summary: "a person marked it done"}
	if !out.Done {
		res.Summary = "no person answered in time"
	}
	return res, nil
}

func (d *driver) snapshot(ctx context.Context, r Request) (*Result, error) {
	o := snapshot.Options{
		Revision: int64(d.p.PageRevision()), Interactive: r.Interactive, Compact: r.Compact, MaxDepth: r.MaxDepth,
		Selector: r.Selector, Ref: strings.TrimPrefix(r.Ref, "@"), ExcludeFrames: r.NoFrames,
		IncludeValues: r.IncludeValues, MaxNodes: r.MaxNodes,
	}
	snap, err := d.sv.snap.Take(ctx, d.page(ctx), o)
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, Summary: fmt.Sprintf("%d nodes, %d refs", snap.NodeCount, snap.RefCount),
		Data: map[string]any{"text": snap.Text(), "snapshot": snap}}, nil
}

// element resolves the request's target to an element.
func (d *driver) element(ctx context.Context, r Request) (*snapshot.Element, string, error) {
	switch {
	case r.Ref != "":
		ref := strings.TrimPrefix(r.Ref, "@")
		el, err := d.sv.snap.Resolve(ctx, d.page(ctx), ref, int64(d.p.PageRevision()))
		return el, "@" + ref, err
	case r.Selector != "":
		el, err := snapshot.ResolveSelector(ctx, d.page(ctx), r.Selector)
		return el, "the element matching the selector", err
	case r.Role != "":
		el, err := snapshot.ResolveRole(ctx, d.page(ctx), r.Role, r.Name)
		return el, fmt.Sprintf("%s %q", r.Role, r.Name), err
	}
	return nil, "", errorf(errcode.InvalidArgument, false, "give ref, selector or role (+name)", "no target element")
}

// point is where to act, in CSS pixels: the element's hit-tested centre,
// or the given coordinates.
func (d *driver) point(ctx context.Context, r Request) (float64, float64, string, error) {
	if r.Ref == "" && r.Selector == "" && r.Role == "" {
		if r.X == nil || r.Y == nil {
			return 0, 0, "", errorf(errcode.InvalidArgument, false, "give ref, selector, role (+name) or x and y", "no target")
		}
		return *r.X, *r.Y, fmt.Sprintf("(%.0f, %.0f)", *r.X, *r.Y), nil
	}
	var el *snapshot.Element
	var what string
	var err error
	if r.Ref != "" {
		// ClickPoint's first call fails with stale_ref on a node that is
		// gone or detached: checking it here as well would cost a round trip.
		ref := strings.TrimPrefix(r.Ref, "@")
		what = "@" + ref
		el, err = d.sv.snap.Lookup(d.page(ctx), ref, int64(d.p.PageRevision()))
	} else {
		el, what, err = d.element(ctx, r)
	}
	if err != nil {
		return 0, 0, "", err
	}
	x, y, err := snapshot.ClickPoint(ctx, el)
	return x, y, what, err
}

// pointer builds a pointer action at CSS pixel (x, y).
func (d *driver) pointer(kind action.Kind, x, y float64, clicks int) action.Action {
	// The executor maps normalized coordinates to its current viewport,
	// which a panel's viewport action may have changed since the start.
	w, h := d.s.InputViewport()
	return action.Action{Kind: kind, X: clamp01(x / float64(w)), Y: clamp01(y / float64(h)), Button: "left", ClickCount: clicks}
}

func clamp01(v float64) float64 { return math.Min(1, math.Max(0, v)) }

func (d *driver) click(ctx context.Context, r Request, n int) (uint64, string, error) {
	x, y, what, err := d.point(ctx, r)
	if err != nil {
		return 0, "", err
	}
	var rev uint64
	for i := 1; i <= n; i++ {
		if rev, _, err = d.submit(ctx, d.pointer(action.Click, x, y, i)); err != nil {
			return rev, "", err
		}
	}
	return rev, what, nil
}

// press sends a key chord such as "Enter", "Control+a" or "Shift+Tab".
func (d *driver) press(ctx context.Context, chord string) (uint64, error) {
	parts := strings.Split(chord, "+")
	if chord == "" || len(parts) > 5 {
		return 0, errorf(errcode.InvalidArgument, false, `e.g. "Enter", "Control+a", "Shift+Tab"`, "bad key chord")
	}
	key := parts[len(parts)-1]
	if key == "" && strings.HasSuffix(chord, "+") { // "Control++"
		key = "+"
	}
	mods := 0
	for _, m := range parts[:len(parts)-1] {
		switch strings.ToLower(m) {
		case "control", "ctrl":
			mods |= action.ModCtrl
		case "shift":
			mods |= action.ModShift
		case "alt":
			mods |= action.ModAlt
		case "meta", "cmd", "command":
			mods |= action.ModMeta
		case "":
		default:
			return 0, errorf(errcode.InvalidArgument, false, "modifiers: Control, Shift, Alt, Meta", "unknown modifier %q", m)
		}
	}
	rev, _, err := d.submit(ctx, action.Action{Kind: action.KeyPress, Key: key, Modifiers: mods})
	return rev, err
}

func (d *driver) selectOption(ctx context.Context, r Request) (*Result, error) {
	el, what, err := d.element(ctx, r)
	if err != nil {
		return nil, err
	}
	// Choose the option with the keyboard, as a person would: focus the
	// select and type the option's label (selects jump to typed text).
	opts, err := selectOptions(ctx, el)
	if err != nil {
		return nil, err
	}
	label := ""
	for _, o := range opts {
		if o.Value == r.Value || o.Label == r.Value {
			label = o.Label
			break
		}
	}
	if label == "" {
		return nil, errorf(errcode.NotFound, false, "list the options with a snapshot", "%s has no option %q", what, r.Value)
	}
	if err := el.Focus(ctx); err != nil {
		return nil, err
	}
	rev, _, err := d.submit(ctx, action.Action{Kind: action.TextInsert, Text: label})
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, ActionRevision: rev, Summary: "selected an option of " + what}, nil
}

func (d *driver) get(ctx context.Context, r Request) (*Result, error) {
	switch r.What {
	case "title", "url":
		var v string
		expr := map[string]string{"title": "document.title", "url": "location.href"}[r.What]
		if err := d.s.Page().Evaluate(ctx, expr, &v); err != nil {
			return nil, err
		}
		return &Result{OK: true, Data: map[string]any{r.What: snapshot.RedactTokens(v)}}, nil
	case "count":
		n, err := snapshot.Count(ctx, d.page(ctx), r.Selector)
		if err != nil {
			return nil, err
		}
		return &Result{OK: true, Data: map[string]any{"count": n}}, nil
	}
	el, _, err := d.element(ctx, r)
	if err != nil {
		return nil, err
	}
	var v any
	switch r.What {
	case "text":
		v, err = el.Text(ctx)
	case "value":
		v, err = el.Value(ctx)
	case "attr":
		var s string
		var ok bool
		s, ok, err = el.Attr(ctx, r.Attr)
		if ok {
			v = s
		}
	case "box":
		v, err = el.Box(ctx)
	default:
		return nil, errorf(errcode.InvalidArgument, false, "what: text, value, attr, title, url, count, box", "get %q", r.What)
	}
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, Data: map[string]any{r.What: v}}, nil
}

func (d *driver) is(ctx context.Context, r Request) (*Result, error) {
	el, _, err := d.element(ctx, r)
	if err != nil {
		return nil, err
	}
	var v bool
	switch r.What {
	case "visible":
		v, err = el.IsVisible(ctx)
	case "enabled":
		v, err = el.IsEnabled(ctx)
	case "checked":
		v, err = el.IsChecked(ctx)
	default:
		return nil, errorf(errcode.InvalidArgument, false, "what: visible, enabled, checked", "is %q", r.What)
	}
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, Data: map[string]any{r.What: v}}, nil
}

func (d *driver) screenshot(ctx context.Context, r Request) (*Result, error) {
	p := page.CaptureScreenshotParams{Format: page.CaptureScreenshotFormatPng}
	mime := "image/png"
	switch r.Format {
	case "", "png":
	case "jpeg", "jpg":
		q := int64(80)
		p.Format, p.Quality, mime = page.CaptureScreenshotFormatJpeg, &q, "image/jpeg"
	default:
		return nil, errorf(errcode.InvalidArgument, false, "", "format: png or jpeg")
	}
	start := time.Now()
	out, err := cdp.Call(ctx, d.s.Page().Target(), page.CaptureScreenshot, p)
	if err != nil {
		return nil, err
	}
	if len(out.Data) > maxScreenshotBytes {
		return nil, errorf(errcode.TooLarge, true, "use format jpeg", "screenshot of %d bytes over the %d byte cap", len(out.Data), maxScreenshotBytes)
	}
	return &Result{OK: true, Summary: fmt.Sprintf("%d bytes in %v", len(out.Data), time.Since(start).Round(time.Millisecond)),
		Data: map[string]any{"mimeType": mime, "base64": base64.StdEncoding.EncodeToString(out.Data)}}, nil
}

type option struct {
	Value string `json:"value"`
	Label string `json:"label"`
}

// selectOptions lists a <select>'s options.
func selectOptions(ctx context.Context, el *snapshot.Element) ([]option, error) {
	obj, err := cdp.Call(ctx, el.Session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: el.BackendNodeID})
	if err != nil || obj.Object == nil {
		return nil, errorf(errcode.StaleRef, true, "take a new snapshot", "the element is gone")
	}
	defer cdp.Call(context.WithoutCancel(ctx), el.Session, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: obj.Object.ObjectID})
	yes := true
	out, err := cdp.Call(ctx, el.Session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: `function() { if (this.tagName !== "SELECT") return null;
			return Array.from(this.options).map(o => ({value: o.value, label: o.label || o.text})); }`,
		ObjectID: obj.Object.ObjectID, ReturnByValue: &yes,
	})
	if err != nil {
		return nil, err
	}
	var opts []option
	if out.Result == nil || json.Unmarshal(out.Result.Value, &opts) != nil || opts == nil {
		return nil, errorf(errcode.InvalidArgument, false, "select works on <select> elements", "the element is not a <select>")
	}
	return opts, nil
}

// HumanOutcomeOf reads the outcome of a request_human result (also one
// that came back over the API as JSON).
func HumanOutcomeOf(res *Result) session.HumanOutcome {
	var out session.HumanOutcome
	if res == nil {
		return out
	}
	if o, ok := res.Data.(session.HumanOutcome); ok {
		return o
	}
	if b, err := json.Marshal(res.Data); err == nil {
		_ = json.Unmarshal(b, &out)
	}
	return out
}
