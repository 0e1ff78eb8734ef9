package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/tabcast/tabcast/core/errcode"
)

// Element is a handle on one DOM element: its backend node id in the CDP
// session of its frame's target. It does not keep the element alive; every
// operation checks that the element is still in its document and fails with
// errcode.StaleRef otherwise.
type Element struct {
	Ref           string            // the ref it was resolved from, if any
	BackendNodeID cdp.BackendNodeID // identity in its renderer
	FrameID       cdp.FrameID
	// Session is the CDP session of the frame's target: the page session,
	// or an OOPIF session from the FrameAttacher.
	Session cdp.Session

	frame *frameInfo
	// entry and objects are set on an element looked up by ref: its JS
	// object is then resolved once per snapshot (refEntry.obj).
	entry   *refEntry
	objects *objectGroup
}

// Rect is a box in top-level viewport CSS pixels.
type Rect struct {
	X      float64 `json:"x"`
	Y      float64 `json:"y"`
	Width  float64 `json:"width"`
	Height float64 `json:"height"`
}

var groupSeq atomic.Int64

func (e *Element) label() string {
	if e.Ref != "" {
		return e.Ref
	}
	return "node " + strconv.FormatInt(int64(e.BackendNodeID), 10)
}

// object resolves the element to a JS object in group. With keep (group is
// its snapshot's, see group) the object resolved before is reused, or the
// new one kept.
func (e *Element) object(ctx context.Context, group string, keep bool) (runtime.RemoteObjectID, error) {
	if keep {
		e.entry.mu.Lock()
		obj := e.entry.obj
		e.entry.mu.Unlock()
		if obj != "" {
			return obj, nil
		}
	}
	r, err := cdp.Call(ctx, e.Session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: e.BackendNodeID, ObjectGroup: group})
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		return "", staleRef(e.label(), "the element no longer exists", err)
	}
	if r.Object == nil || r.Object.ObjectID == "" {
		return "", staleRef(e.label(), "the element no longer exists", nil)
	}
	if keep {
		e.entry.mu.Lock()
		e.entry.obj = r.Object.ObjectID
		e.entry.mu.Unlock()
	}
	return r.Object.ObjectID, nil
}

// forget drops the element's kept JS object if it is obj (a call on it
// failed: the next call resolves the node again, or finds it gone).
func (e *Element) forget(obj runtime.RemoteObjectID) {
	e.entry.mu.Lock()
	if e.entry.obj == obj {
		e.entry.obj = ""
	}
	e.entry.mu.Unlock()
}

// group is the object group for a call on e: for an element looked up by
// ref, its snapshot's (keep: objects stay until the snapshot is replaced),
// else a new one that done releases.
func (e *Element) group(ctx context.Context) (name string, keep bool, done func()) {
	if e.entry != nil && e.objects != nil {
		if g := e.objects.use(e.Session); g != "" {
			return g, true, func() {}
		}
	}
	name, done = throwawayGroup(ctx, e.Session)
	return name, false, done
}

// throwawayGroup is a new object group in sess and the func that releases it.
func throwawayGroup(ctx context.Context, sess cdp.Session) (string, func()) {
	name := "tabcast-snapshot-" + strconv.FormatInt(groupSeq.Add(1), 10)
	return name, func() { releaseGroup(ctx, sess, name) }
}

// call runs fn (a JS function declaration) with this = the element, after
// checking that the element is connected, and decodes its JSON result.
func (e *Element) call(ctx context.Context, fn string, out any, args ...runtime.RemoteObjectID) error {
	group, keep, done := e.group(ctx)
	defer done()
	obj, err := e.object(ctx, group, keep)
	if err != nil {
		return err
	}
	r, err := e.callOn(ctx, obj, group, fn, args)
	if err != nil && keep && ctx.Err() == nil {
		// The kept object is gone: its snapshot was replaced (and its group
		// released) while this element was in use, or its document went.
		// Resolve the node again, in a throwaway group, to tell which.
		e.forget(obj)
		tmp, release := throwawayGroup(ctx, e.Session)
		defer release()
		if obj, err = e.object(ctx, tmp, false); err != nil {
			return err
		}
		r, err = e.callOn(ctx, obj, tmp, fn, args)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return staleRef(e.label(), "the element's document is gone", err)
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("snapshot: %w", &chromedp.ExceptionError{ExceptionDetails: r.ExceptionDetails})
	}
	var res struct {
		Stale bool            `json:"stale"`
		V     json.RawMessage `json:"v"`
	}
	if r.Result == nil || json.Unmarshal(r.Result.Value, &res) != nil {
		return fmt.Errorf("snapshot: unexpected result of element call")
	}
	if res.Stale {
		return staleRef(e.label(), "the element was removed from the document (re-rendered?)", nil)
	}
	if out != nil && len(res.V) > 0 {
		if err := json.Unmarshal(res.V, out); err != nil {
			return fmt.Errorf("snapshot: decode element result: %w", err)
		}
	}
	return nil
}

func (e *Element) callOn(ctx context.Context, obj runtime.RemoteObjectID, group, fn string, args []runtime.RemoteObjectID) (runtime.CallFunctionOnResult, error) {
	yes := true
	cargs := make([]*runtime.CallArgument, len(args))
	for i, a := range args {
		cargs[i] = &runtime.CallArgument{ObjectID: a}
	}
	wrapped := `function(...a){ if (!this.isConnected) return {"stale": true}; return {"v": (` + fn + `).apply(this, a)}; }`
	return cdp.Call(ctx, e.Session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: wrapped, ObjectID: obj, Arguments: cargs,
		ReturnByValue: &yes, AwaitPromise: &yes, ObjectGroup: group,
	})
}

const releaseTimeout = 2 * time.Second

// releaseGroup releases an object group without waiting for the answer:
// nothing after it depends on it, and waiting cost every element operation
// (every click) one more round trip.
func releaseGroup(ctx context.Context, s cdp.Session, group string) {
	ctx = context.WithoutCancel(ctx)
	go func() {
		rctx, cancel := context.WithTimeout(ctx, releaseTimeout)
		defer cancel()
		_, _ = cdp.Call(rctx, s, runtime.ReleaseObjectGroup, runtime.ReleaseObjectGroupParams{ObjectGroup: group})
	}()
}

// check fails with errcode.StaleRef unless the element is in its document.
func (e *Element) check(ctx context.Context) error {
	return e.call(ctx, `function(){ return true; }`, nil)
}

// Text is the element's rendered text (innerText), token-redacted.
func (e *Element) Text(ctx context.Context) (string, error) {
	var s string
	err := e.call(ctx, `function(){ return (this.innerText !== undefined ? this.innerText : this.textContent) || ""; }`, &s)
	return RedactTokens(s), err
}

// Value is the value of a form field (or the text of a contenteditable).
// A password field's value is always "••••" (or "" when empty).
func (e *Element) Value(ctx context.Context) (string, error) {
	var r struct {
		PW bool   `json:"pw"`
		V  string `json:"v"`
	}
	err := e.call(ctx, `function(){
		const t = String(this.type || "").toLowerCase();
		const ac = String((this.getAttribute && this.getAttribute("autocomplete")) || "").toLowerCase();
		let v = "value" in this ? String(this.value ?? "") : (this.isContentEditable ? this.innerText : "");
		if (t === "password" || ac.includes("password")) return {pw: true, v: v.length ? "x" : ""};
		return {v};
	}`, &r)
	if err != nil {
		return "", err
	}
	if r.PW {
		if r.V == "" {
			return "", nil
		}
		return RedactedPassword, nil
	}
	return RedactTokens(r.V), nil
}

// Attr is an attribute of the element; ok is false when it is absent. The
// value attribute of a password field is redacted.
func (e *Element) Attr(ctx context.Context, name string) (val string, ok bool, err error) {
	var r *struct {
		V  string `json:"v"`
		PW bool   `json:"pw"`
	}
	nameJS, _ := json.Marshal(name)
	err = e.call(ctx, `function(){
		const n = `+string(nameJS)+`;
		if (!this.hasAttribute || !this.hasAttribute(n)) return null;
		const pw = String(this.type || "").toLowerCase() === "password" && n.toLowerCase() === "value";
		return {v: this.getAttribute(n), pw};
	}`, &r)
	if err != nil || r == nil {
		return "", false, err
	}
	if r.PW && r.V != "" {
		return RedactedPassword, true, nil
	}
	return RedactTokens(r.V), true, nil
}

// IsVisible reports whether the element has a non-empty box and is not
// hidden by CSS (display, visibility, content-visibility, opacity 0).
func (e *Element) IsVisible(ctx context.Context) (bool, error) {
	var v bool
	err := e.call(ctx, visibleJS, &v)
	return v, err
}

const visibleJS = `function(){
	const r = this.getBoundingClientRect();
	if (r.width === 0 && r.height === 0) return false;
	if (this.checkVisibility) return this.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
	const s = getComputedStyle(this);
	return s.display !== "none" && s.visibility !== "hidden" && s.opacity !== "0";
}`

// IsEnabled is false for disabled form controls (also inside a disabled
// fieldset) and for aria-disabled="true".
func (e *Element) IsEnabled(ctx context.Context) (bool, error) {
	var v bool
	err := e.call(ctx, `function(){
		if (this.matches && this.matches(":disabled")) return false;
		return !(this.closest && this.closest("[aria-disabled=true]"));
	}`, &v)
	return v, err
}

// IsChecked is the checked state of a checkbox/radio (or aria-checked).
func (e *Element) IsChecked(ctx context.Context) (bool, error) {
	var v bool
	err := e.call(ctx, `function(){
		if ("checked" in this && (this.type === "checkbox" || this.type === "radio")) return this.checked;
		return this.getAttribute && this.getAttribute("aria-checked") === "true";
	}`, &v)
	return v, err
}

// Focus focuses the element (DOM.focus).
func (e *Element) Focus(ctx context.Context) error {
	if err := e.check(ctx); err != nil {
		return err
	}
	if _, err := cdp.Call(ctx, e.Session, dom.Focus, dom.FocusParams{BackendNodeID: e.BackendNodeID}); err != nil {
		return fmt.Errorf("snapshot: focus %s: %w", e.label(), err)
	}
	return nil
}

// Box is the element's border box in top-level viewport CSS pixels.
func (e *Element) Box(ctx context.Context) (Rect, error) {
	if err := e.check(ctx); err != nil {
		return Rect{}, err
	}
	bm, err := cdp.Call(ctx, e.Session, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: e.BackendNodeID})
	if err != nil || bm.Model == nil {
		return Rect{}, newErr(errcode.NotVisible, "the element is not rendered (display:none?)", "%s has no box", e.label())
	}
	r := quadRect(bm.Model.Border)
	ox, oy, err := frameOffset(ctx, e.frame)
	if err != nil {
		return Rect{}, err
	}
	r.X += ox
	r.Y += oy
	return r, nil
}

func quadRect(q dom.Quad) Rect {
	if len(q) < 8 {
		return Rect{}
	}
	minX, minY, maxX, maxY := q[0], q[1], q[0], q[1]
	for i := 0; i+1 < len(q); i += 2 {
		minX, maxX = math.Min(minX, q[i]), math.Max(maxX, q[i])
		minY, maxY = math.Min(minY, q[i+1]), math.Max(maxY, q[i+1])
	}
	return Rect{X: minX, Y: minY, Width: maxX - minX, Height: maxY - minY}
}

func quadArea(q dom.Quad) float64 {
	if len(q) < 8 {
		return 0
	}
	a := 0.0
	for i := 0; i < 4; i++ {
		j := (i + 1) % 4
		a += q[2*i]*q[2*j+1] - q[2*j]*q[2*i+1]
	}
	return math.Abs(a) / 2
}

// frameOffset is the offset of f's local-root viewport in the top-level
// viewport: the content-box origin of each OOPIF owner, summed upwards.
// (Same-process frames already report root-relative coordinates.)
func frameOffset(ctx context.Context, f *frameInfo) (float64, float64, error) {
	var ox, oy float64
	for ; f != nil && f.parent != nil; f = f.parent {
		if !f.oopif() {
			continue
		}
		bm, err := cdp.Call(ctx, f.parent.sess, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: f.owner})
		if err != nil || bm.Model == nil || len(bm.Model.Content) < 2 {
			return 0, 0, newErr(errcode.NotVisible, "the iframe holding the element is not rendered", "iframe of frame %s has no box: %v", f.id, err)
		}
		ox += bm.Model.Content[0]
		oy += bm.Model.Content[1]
	}
	return ox, oy, nil
}

// ClickPoint scrolls the element into view if needed and returns the centre
// of its largest content quad in top-level viewport CSS pixels (translated
// through OOPIF owners). The point is hit-tested: it must hit the element
// or a descendant (or a label of it), and every OOPIF owner on the way up
// must be hit at the translated point; otherwise errcode.Obscured. An element
// with no box is errcode.NotVisible. It does not dispatch input.
func ClickPoint(ctx context.Context, e *Element) (x, y float64, err error) {
	if e.frame == nil || e.frame.parent == nil {
		return clickPointMain(ctx, e)
	}
	var owners []*frameInfo // the OOPIFs on the way up, innermost first
	root := e.frame
	for f := e.frame; f != nil && f.parent != nil; f = f.parent {
		if f.oopif() {
			owners = append(owners, f)
		}
		root = f.parent
	}
	// Where the element and its iframes are before any scroll (read side by
	// side: they are independent), to know whether scrolling moved them.
	var vis bool
	var visErr error
	quads := func() ([]dom.Quad, error) {
		qs, err := cdp.Call(ctx, e.Session, dom.GetContentQuads, dom.GetContentQuadsParams{BackendNodeID: e.BackendNodeID})
		return qs.Quads, err
	}
	boxes := make([]dom.Quad, len(owners))
	readBoxes := func() func() error {
		errs := make([]error, len(owners))
		fns := make([]func(), len(owners))
		for i, f := range owners {
			fns[i] = func() {
				bm, err := cdp.Call(ctx, f.parent.sess, dom.GetBoxModel, dom.GetBoxModelParams{BackendNodeID: f.owner})
				if err == nil && (bm.Model == nil || len(bm.Model.Content) < 2) {
					err = errors.New("no content box")
				}
				if err != nil {
					errs[i] = newErr(errcode.NotVisible, "the iframe holding the element is not rendered", "iframe of frame %s has no box: %v", f.id, err)
					return
				}
				boxes[i] = bm.Model.Content
			}
		}
		return func() error { parallel(fns...); return errors.Join(errs...) }
	}
	var q0 []dom.Quad
	var q0Err, b0Err error
	var b0 []dom.Quad
	parallel(
		func() { visErr = e.call(ctx, visibleJS, &vis) }, // also the stale check
		func() { q0, q0Err = quads() },
		func() { b0Err = readBoxes()(); b0 = append([]dom.Quad(nil), boxes...) },
	)
	if visErr != nil {
		return 0, 0, visErr
	}
	if !vis {
		return 0, 0, newErr(errcode.NotVisible, "the element is hidden by CSS", "%s is not visible", e.label())
	}
	if _, err := cdp.Call(ctx, e.Session, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{BackendNodeID: e.BackendNodeID}); err != nil {
		return 0, 0, newErr(errcode.NotVisible, "the element is not rendered (display:none?)", "%s cannot be scrolled into view: %v", e.label(), err)
	}
	for _, f := range owners {
		_, _ = cdp.Call(ctx, f.parent.sess, dom.ScrollIntoViewIfNeeded, dom.ScrollIntoViewIfNeededParams{BackendNodeID: f.owner})
	}
	var q []dom.Quad
	var qErr, bErr error
	parallel(func() { q, qErr = quads() }, func() { bErr = readBoxes()() })
	if q0Err != nil || b0Err != nil || !sameQuads(q0, q) || !sameQuads(b0, boxes) {
		// The browser routes input to an out-of-process frame by the
		// hit-test regions of the last composited frame: after a scroll,
		// wait for two frames of the page or the click lands where the
		// iframe was (measured: 3 clicks in 8 missed without this). Without
		// a scroll there is nothing to wait for.
		yes := true
		_, _ = cdp.Call(ctx, root.sess, runtime.Evaluate, runtime.EvaluateParams{
			Expression:   "new Promise(r => requestAnimationFrame(() => requestAnimationFrame(() => r(1))))",
			AwaitPromise: &yes,
		})
		parallel(func() { q, qErr = quads() }, func() { bErr = readBoxes()() })
	}
	if qErr != nil {
		return 0, 0, newErr(errcode.NotVisible, "the element is not rendered", "%s has no layout: %v", e.label(), qErr)
	}
	if bErr != nil {
		return 0, 0, bErr
	}
	var best dom.Quad
	for _, c := range q {
		if quadArea(c) > quadArea(best) {
			best = c
		}
	}
	if quadArea(best) < 1 {
		return 0, 0, newErr(errcode.NotVisible, "the element has no visible area", "%s has an empty box", e.label())
	}
	for i := 0; i < 4; i++ {
		x += best[2*i] / 4
		y += best[2*i+1] / 4
	}
	// Hit-test the point in the element's document and, translated, at
	// each OOPIF owner on the way up: independent calls, run side by side;
	// the innermost failure is reported.
	errs := make([]error, 1+len(owners))
	ex, ey := x, y
	fns := []func(){func() { errs[0] = hitTest(ctx, e, ex, ey) }}
	for i, f := range owners {
		x += boxes[i][0]
		y += boxes[i][1]
		owner := &Element{Ref: e.Ref, BackendNodeID: f.owner, FrameID: f.parent.id, Session: f.parent.sess, frame: f.parent}
		hx, hy := x, y
		fns = append(fns, func() { errs[i+1] = hitTest(ctx, owner, hx, hy) })
	}
	parallel(fns...)
	for _, err := range errs {
		if err != nil {
			return 0, 0, err
		}
	}
	return x, y, nil
}

// parallel runs fns side by side and returns when all have.
func parallel(fns ...func()) {
	if len(fns) == 1 {
		fns[0]()
		return
	}
	var wg sync.WaitGroup
	wg.Add(len(fns))
	for _, fn := range fns {
		go func() {
			defer wg.Done()
			fn()
		}()
	}
	wg.Wait()
}

func sameQuads(a, b []dom.Quad) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !slices.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// documentObject is the main document of the session's target. (Not
// DOM.getDocument: it discards the DOM agent's node ids, which chromedp and
// other clients of the session rely on.)
func documentObject(ctx context.Context, s cdp.Session, group string) (runtime.RemoteObjectID, error) {
	r, err := cdp.Call(ctx, s, runtime.Evaluate, runtime.EvaluateParams{Expression: "document", ObjectGroup: group})
	if err != nil {
		return "", fmt.Errorf("get document: %w", err)
	}
	if r.ExceptionDetails != nil || r.Result == nil || r.Result.ObjectID == "" {
		return "", fmt.Errorf("get document: no object")
	}
	return r.Result.ObjectID, nil
}

// hitJS hit-tests (x, y), in the viewport of the document this, descending
// into shadow roots and into iframes whose documents it can reach; an
// unreachable (out-of-process) iframe is returned itself.
const hitJS = `function(x, y) {
	let doc = this, el = null;
	for (let i = 0; i < 32; i++) {
		el = doc.elementFromPoint(x, y);
		if (!el) return null;
		for (let j = 0; j < 32 && el.shadowRoot; j++) {
			const inner = el.shadowRoot.elementFromPoint(x, y);
			if (!inner || inner === el) break;
			el = inner;
		}
		if ((el.localName === "iframe" || el.localName === "frame") && el.contentDocument) {
			const r = el.getBoundingClientRect(), cs = getComputedStyle(el);
			x -= r.left + parseFloat(cs.borderLeftWidth) + parseFloat(cs.paddingLeft);
			y -= r.top + parseFloat(cs.borderTopWidth) + parseFloat(cs.paddingTop);
			doc = el.contentDocument;
			continue;
		}
		return el;
	}
	return el;
}`

// hitTest checks that (x, y), in the viewport of e's local root (the main
// document of e's target), hits e, a descendant of e, or a label of e.
// (DOM.getNodeForLocation is not used: it misses nodes after a scroll that
// an out-of-process iframe caused.)
func hitTest(ctx context.Context, e *Element, x, y float64) error {
	if e.frame == nil || e.frame.parent == nil || e.frame.oopif() {
		return hitTestRoot(ctx, e, x, y)
	}
	group := "tabcast-snapshot-hit-" + strconv.FormatInt(groupSeq.Add(1), 10)
	defer releaseGroup(ctx, e.Session, group)
	docObj, err := documentObject(ctx, e.Session, group)
	if err != nil {
		return fmt.Errorf("snapshot: hit test: %w", err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	r, err := cdp.Call(ctx, e.Session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: hitJS, ObjectID: docObj, ObjectGroup: group,
		Arguments: []*runtime.CallArgument{{Value: xs}, {Value: ys}},
	})
	if err != nil {
		return fmt.Errorf("snapshot: hit test: %w", err)
	}
	if r.ExceptionDetails != nil {
		return fmt.Errorf("snapshot: hit test: %w", &chromedp.ExceptionError{ExceptionDetails: r.ExceptionDetails})
	}
	if r.Result == nil || r.Result.ObjectID == "" {
		return newErr(errcode.NotVisible, "scroll the element into the viewport or enlarge the viewport", "%s: nothing at (%.0f, %.0f)", e.label(), x, y)
	}
	d, err := cdp.Call(ctx, e.Session, dom.DescribeNode, dom.DescribeNodeParams{ObjectID: r.Result.ObjectID})
	if err != nil || d.Node == nil {
		return fmt.Errorf("snapshot: hit test: describe: %v", err)
	}
	hit := d.Node.BackendNodeID
	if hit == e.BackendNodeID {
		return nil
	}
	// A same-process frame whose document the hit test could not enter
	// (cross-origin, same site): accept a hit on its owner.
	for f := e.frame; f != nil && f.parent != nil && !f.oopif(); f = f.parent {
		if hit == f.owner {
			return nil
		}
	}
	h, err := cdp.Call(ctx, e.Session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: hit, ObjectGroup: group})
	if err != nil || h.Object == nil {
		return newErr(errcode.Obscured, "another element covers it; close overlays or scroll", "%s is covered at (%.0f, %.0f)", e.label(), x, y)
	}
	var res struct {
		OK  bool   `json:"ok"`
		Hit string `json:"hit"`
	}
	err = e.call(ctx, `function(n){
		for (let c = n; c; c = c.parentNode || c.host) { if (c === this) return {ok: true}; }
		const l = n.closest ? n.closest("label") : null;
		if (l && l.control === this) return {ok: true};
		let d = n.nodeName ? n.nodeName.toLowerCase() : "?";
		if (n.id) d += "#" + n.id;
		return {ok: false, hit: d};
	}`, &res, h.Object.ObjectID)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The hit node lives in another frame (another JS world): not e.
		return newErr(errcode.Obscured, "another element covers it; close overlays or scroll", "%s is covered at (%.0f, %.0f): %v", e.label(), x, y, err)
	}
	if !res.OK {
		return newErr(errcode.Obscured, "another element covers it; close overlays or scroll", "%s is covered by <%s> at (%.0f, %.0f)", e.label(), res.Hit, x, y)
	}
	return nil
}

// hitTestRoot is hitTest for an element of its local root's own document:
// one call on the element (hitJS from its document, then the same checks),
// where hitTest needs three to five round trips.
func hitTestRoot(ctx context.Context, e *Element, x, y float64) error {
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	var r struct {
		Code string `json:"code"`
		Hit  string `json:"hit"`
	}
	err := e.call(ctx, `function(){
		const n = (`+hitJS+`).call(this.ownerDocument, `+string(xs)+`, `+string(ys)+`);
		if (!n) return {code: "none"};
		for (let c = n; c; c = c.parentNode || c.host) { if (c === this) return {code: ""}; }
		const l = n.closest ? n.closest("label") : null;
		if (l && l.control === this) return {code: ""};
		let d = n.nodeName ? n.nodeName.toLowerCase() : "?";
		if (n.id) d += "#" + n.id;
		return {code: "obscured", hit: d};
	}`, &r)
	switch {
	case err != nil:
		return err
	case r.Code == "none":
		return newErr(errcode.NotVisible, "scroll the element into the viewport or enlarge the viewport", "%s: nothing at (%.0f, %.0f)", e.label(), x, y)
	case r.Code != "":
		return newErr(errcode.Obscured, "another element covers it; close overlays or scroll", "%s is covered by <%s> at (%.0f, %.0f)", e.label(), r.Hit, x, y)
	}
	return nil
}

// clickPointJS does for an element of the main document, in one call, what
// ClickPoint does step by step for frames: take the centre of its largest
// box, check it is visible and that a hit test there lands on it (or a
// descendant, or its label). Only when that fails is the element scrolled
// to the centre of the view, instantly (a page's scroll-behavior: smooth
// would leave it still on its way), and measured again; an element already
// there is not scrolled.
const clickPointJS = `function() {
	const at = () => {
		let best = null, area = 0;
		for (const r of this.getClientRects()) { const a = r.width * r.height; if (a > area) { area = a; best = r; } }
		if (!best || area < 1) return {code: "not_visible", why: "an empty box"};
		const x = best.left + best.width / 2, y = best.top + best.height / 2;
		let n = this.ownerDocument.elementFromPoint(x, y);
		for (let j = 0; j < 32 && n && n.shadowRoot; j++) { const inner = n.shadowRoot.elementFromPoint(x, y); if (!inner || inner === n) break; n = inner; }
		if (!n) return {code: "not_visible", why: "nothing at its centre", x, y};
		for (let c = n; c; c = c.parentNode || c.host) { if (c === this) return {code: "", x, y}; }
		const l = n.closest ? n.closest("label") : null;
		if (l && l.control === this) return {code: "", x, y};
		let d = n.nodeName ? n.nodeName.toLowerCase() : "?";
		if (n.id) d += "#" + n.id;
		return {code: "obscured", why: d, x, y};
	};
	let r = at();
	if (r.code === "not_visible" && !("x" in r)) return r;
	if (this.checkVisibility && !this.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return {code: "hidden", why: "hidden by CSS"};
	if (r.code === "") return r;
	this.scrollIntoView({block: "center", inline: "center", behavior: "instant"});
	return at();
}`

func clickPointMain(ctx context.Context, e *Element) (float64, float64, error) {
	var r struct {
		Code string  `json:"code"`
		Why  string  `json:"why"`
		X    float64 `json:"x"`
		Y    float64 `json:"y"`
	}
	if err := e.call(ctx, clickPointJS, &r); err != nil {
		return 0, 0, err
	}
	switch r.Code {
	case "":
		return r.X, r.Y, nil
	case "hidden":
		return 0, 0, newErr(errcode.NotVisible, "the element is hidden by CSS", "%s is not visible", e.label())
	case "obscured":
		return 0, 0, newErr(errcode.Obscured, "another element covers it; close overlays or scroll", "%s is covered by <%s> at (%.0f, %.0f)", e.label(), r.Why, r.X, r.Y)
	}
	return 0, 0, newErr(errcode.NotVisible, "the element is not rendered or not in the viewport", "%s: %s", e.label(), r.Why)
}

// querySelector finds the element(s) matching sel in f's document. With
// unique, more than one match is errcode.Ambiguous; else the first is taken.
func querySelector(ctx context.Context, f *frameInfo, sel string, unique bool) (*Element, int, error) {
	selJS, _ := json.Marshal(sel)
	expr := `(() => { const l = document.querySelectorAll(` + string(selJS) + `); return l.length === 0 ? 0 : (` + strconv.FormatBool(unique) + ` && l.length > 1 ? l.length : l[0]); })()`
	group := "tabcast-snapshot-q-" + strconv.FormatInt(groupSeq.Add(1), 10)
	defer releaseGroup(ctx, f.sess, group)
	r, err := cdp.Call(ctx, f.sess, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ObjectGroup: group})
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot: query %q: %w", sel, err)
	}
	if r.ExceptionDetails != nil {
		return nil, 0, newErr(errcode.InvalidArgument, "check the CSS selector syntax", "bad selector %q", sel)
	}
	if r.Result.Type == runtime.RemoteObjectTypeNumber {
		n, _ := strconv.Atoi(string(r.Result.Value))
		if n == 0 {
			return nil, 0, newErr(errcode.NotFound, "take a snapshot to see what is on the page", "no element matches %q", sel)
		}
		return nil, n, newErr(errcode.Ambiguous, "use a more specific selector or a ref from a snapshot", "%d elements match %q", n, sel)
	}
	d, err := cdp.Call(ctx, f.sess, dom.DescribeNode, dom.DescribeNodeParams{ObjectID: r.Result.ObjectID})
	if err != nil || d.Node == nil {
		return nil, 0, fmt.Errorf("snapshot: describe match of %q: %v", sel, err)
	}
	return &Element{BackendNodeID: d.Node.BackendNodeID, FrameID: f.id, Session: f.sess, frame: f}, 1, nil
}

// ResolveSelector returns the only element of the main document matching
// the CSS selector sel: errcode.NotFound for none, errcode.Ambiguous (with the
// count in the message) for several.
func ResolveSelector(ctx context.Context, p Page, sel string) (*Element, error) {
	f, err := mainFrame(ctx, p)
	if err != nil {
		return nil, err
	}
	el, _, err := querySelector(ctx, f, sel, true)
	return el, err
}

// Count is the number of elements of the main document matching sel.
func Count(ctx context.Context, p Page, sel string) (int, error) {
	selJS, _ := json.Marshal(sel)
	yes := true
	r, err := cdp.Call(ctx, p.Target(), runtime.Evaluate, runtime.EvaluateParams{
		Expression: `document.querySelectorAll(` + string(selJS) + `).length`, ReturnByValue: &yes,
	})
	if err != nil {
		return 0, fmt.Errorf("snapshot: count %q: %w", sel, err)
	}
	if r.ExceptionDetails != nil {
		return 0, newErr(errcode.InvalidArgument, "check the CSS selector syntax", "bad selector %q", sel)
	}
	n, err := strconv.Atoi(string(r.Result.Value))
	if err != nil {
		return 0, fmt.Errorf("snapshot: count %q: %s", sel, r.Result.Value)
	}
	return n, nil
}

// ResolveRole returns the only element of the main document with the
// accessibility role and accessible name (exact match; empty name matches
// any), via Accessibility.queryAXTree.
func ResolveRole(ctx context.Context, p Page, role, name string) (*Element, error) {
	f, err := mainFrame(ctx, p)
	if err != nil {
		return nil, err
	}
	group := "tabcast-snapshot-role-" + strconv.FormatInt(groupSeq.Add(1), 10)
	defer releaseGroup(ctx, f.sess, group)
	doc, err := documentObject(ctx, f.sess, group)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	r, err := cdp.Call(ctx, f.sess, accessibility.QueryAXTree, accessibility.QueryAXTreeParams{
		ObjectID: doc, Role: role, AccessibleName: name,
	})
	if err != nil {
		return nil, fmt.Errorf("snapshot: query AX tree: %w", err)
	}
	var hits []*accessibility.Node
	for _, n := range r.Nodes {
		if !n.Ignored && n.BackendDOMNodeID != 0 {
			hits = append(hits, n)
		}
	}
	what := role
	if name != "" {
		what += " " + strconv.Quote(name)
	}
	switch len(hits) {
	case 0:
		return nil, newErr(errcode.NotFound, "take a snapshot to see the roles and names on the page", "no %s", what)
	case 1:
		return &Element{BackendNodeID: hits[0].BackendDOMNodeID, FrameID: f.id, Session: f.sess, frame: f}, nil
	}
	return nil, newErr(errcode.Ambiguous, "add a name, or use a ref from a snapshot", "%d elements are %s", len(hits), what)
}

// IsStale reports whether err says a ref or element is stale.
func IsStale(err error) bool { return errcode.CodeOf(err) == errcode.StaleRef }
