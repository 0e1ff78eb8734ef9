// Package snapshot turns a page into a compact, agent-readable accessibility
// snapshot with refs (e1, e2, ...) and resolves those refs back to live DOM
// elements, with stale detection, click points in top-level viewport CSS
// pixels and element queries. It never dispatches input: the core clicks at
// ClickPoint through its own dispatcher.
//
// A snapshot is built from Chromium's accessibility tree
// (Accessibility.getFullAXTree per frame document; ignored nodes are
// dropped or spliced, aria-hidden/display:none subtrees are dropped);
// same-process iframes and, through a FrameAttacher, out-of-process iframes
// are inlined under their iframe node. With Options.Boxes the nodes with
// refs carry their boxes from DOMSnapshot.captureSnapshot.
//
// A ref names a node identity: (backend DOM node id, frame, page revision).
// A ref never resolves to another element: a re-rendered element is a new
// DOM node with a new backend node id, and the old ref is reported stale
// (errcode.StaleRef), as is any ref after the caller's page revision changed.
// Only the latest snapshot stored in a Refs (one per page, see Snapshotter)
// is valid.
//
// What the core supplies: a Page (Target() *chromedp.Target; *browser.Page
// has it), the page revision it bumps on main-frame navigation, and, for
// cross-site iframes, an Attacher over the browser's shared
// connection (browser.Browser.Conn), joined with WithFrames. Close the
// Attacher when the browser goes; Forget a page in the Snapshotter when it
// closes.
package snapshot

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/accessibility"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/errcode"
)

// Defaults of Options.
const (
	DefaultMaxNodes = 2000
	DefaultMaxChars = 50000
)

// Options shape a snapshot. The zero value is a full snapshot of the page
// with frames, at most 2000 nodes and 50000 characters of text.
type Options struct {
	// Revision is the caller's page revision (bumped on main-frame
	// navigation). Refs of this snapshot resolve only at this revision.
	Revision int64
	// Interactive lists only interactive or focusable elements (and the
	// iframes that contain them), flattened.
	Interactive bool
	// Compact drops unnamed generic/none wrappers (their children move up).
	Compact bool
	// MaxDepth limits the depth of the output tree (0: no limit).
	MaxDepth int
	// Selector scopes the snapshot to the first element of the main document
	// that matches this CSS selector.
	Selector string
	// Within scopes the snapshot to a resolved element (any frame).
	// Snapshotter.Take sets it from Ref.
	Within *Element
	// Ref scopes the snapshot to a ref of the previous snapshot (only with
	// Snapshotter/Refs, which hold that table).
	Ref string
	// ExcludeFrames leaves iframe contents out (IncludeFrames is the default).
	ExcludeFrames bool
	// MaxNodes (default 2000) and MaxChars (default 50000) bound the output;
	// Snapshot.Truncated reports a cut. Negative means no limit.
	MaxNodes int
	MaxChars int
	// Boxes adds the border box (top-level viewport CSS pixels, at the
	// time of the snapshot) of every node with a ref to the JSON form, from
	// one DOMSnapshot.captureSnapshot per target.
	Boxes bool
	// IncludeValues includes the values of editable fields. Values of
	// checkboxes, radios, selects and sliders are always included; password
	// fields are always redacted ("••••").
	IncludeValues bool
}

// Node is one element of the snapshot.
type Node struct {
	Ref      string  `json:"ref,omitempty"`
	Role     string  `json:"role"`
	Name     string  `json:"name,omitempty"`
	Value    *string `json:"value,omitempty"`
	Checked  string  `json:"checked,omitempty"` // "true", "false" or "mixed"
	Pressed  string  `json:"pressed,omitempty"`
	Disabled bool    `json:"disabled,omitempty"`
	Focused  bool    `json:"focused,omitempty"`
	Selected bool    `json:"selected,omitempty"`
	Required bool    `json:"required,omitempty"`
	Expanded *bool   `json:"expanded,omitempty"`
	Level    int     `json:"level,omitempty"`
	// Frame is the frame id of an iframe node's document; Unreachable marks
	// an OOPIF that could not be attached.
	Frame       string  `json:"frame,omitempty"`
	Unreachable bool    `json:"unreachable,omitempty"`
	Box         *Rect   `json:"box,omitempty"` // with Options.Boxes, for nodes with a ref
	Children    []*Node `json:"children,omitempty"`
}

// Snapshot is the result of Take.
type Snapshot struct {
	Revision  int64         `json:"revision"`
	URL       string        `json:"url"`
	Title     string        `json:"title,omitempty"`
	Nodes     []*Node       `json:"nodes"`
	NodeCount int           `json:"nodeCount"`
	RefCount  int           `json:"refCount"`
	Truncated bool          `json:"truncated"`
	Took      time.Duration `json:"-"`

	text string
	refs map[string]*refEntry
	// objects are the JS objects its refs were resolved to (refEntry.obj).
	objects objectGroup
}

// Text is the compact text tree ("- role "name" [attr] [ref=eN]: value").
func (s *Snapshot) Text() string { return s.text }

// JSON is the JSON form of the snapshot.
func (s *Snapshot) JSON() ([]byte, error) { return json.Marshal(s) }

type refEntry struct {
	backend cdp.BackendNodeID
	frame   *frameInfo
	rev     int64

	// obj is the node resolved to a JS object on first use, kept in the
	// snapshot's object group: acting on a ref again costs no
	// DOM.resolveNode (nor a release) round trip. It refers to that node
	// only — a re-rendered element is another node, and the call on a
	// detached one fails with errcode.StaleRef as before.
	mu  sync.Mutex
	obj runtime.RemoteObjectID
}

// Take builds a snapshot of p. The refs in it resolve through
// Snapshot.Resolve, or through a Refs/Snapshotter that stores it.
func Take(ctx context.Context, p Page, o Options) (*Snapshot, error) {
	start := time.Now()
	if o.MaxNodes == 0 {
		o.MaxNodes = DefaultMaxNodes
	}
	if o.MaxChars == 0 {
		o.MaxChars = DefaultMaxChars
	}
	if o.Ref != "" && o.Within == nil {
		return nil, newErr(errcode.InvalidArgument, "use Snapshotter.Take or Refs.Take to scope by ref", "Options.Ref needs the previous snapshot's refs")
	}
	main, err := mainFrame(ctx, p)
	if err != nil {
		return nil, err
	}
	b := &builder{ctx: ctx, o: o, refs: map[string]*refEntry{}, local: map[cdp.Session]map[cdp.FrameID]bool{}}
	if a, ok := p.(FrameAttacher); ok {
		b.attacher = a
	}
	s := &Snapshot{Revision: o.Revision, URL: main.url}

	root, scope := main, cdp.BackendNodeID(0)
	switch {
	case o.Within != nil:
		root, scope = o.Within.frame, o.Within.BackendNodeID
		if err := o.Within.check(ctx); err != nil {
			return nil, err
		}
	case o.Selector != "":
		el, _, err := querySelector(ctx, main, o.Selector, false)
		if err != nil {
			return nil, err
		}
		scope = el.BackendNodeID
	}
	tree, err := b.fetch(root)
	if err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	start2 := tree.root
	if scope != 0 {
		start2 = nil
		for _, n := range tree.byID {
			if n.BackendDOMNodeID == scope {
				start2 = n
				break
			}
		}
		if start2 == nil {
			return nil, newErr(errcode.NotFound, "the scope element has no accessibility node (it may be hidden)", "scope element not in the accessibility tree")
		}
	}
	if start2 != nil && start2.Role != nil && axString(start2.Role) == "RootWebArea" && start2.Name != nil {
		s.Title = RedactTokens(axString(start2.Name))
	}
	if start2 != nil {
		b.walk(tree, start2, 0, &s.Nodes, "")
	}
	s.text = b.text.String()
	s.refs = b.refs
	s.NodeCount = b.count
	s.RefCount = len(b.refs)
	s.Truncated = b.truncated
	s.Took = time.Since(start)
	return s, nil
}

type axTree struct {
	frame *frameInfo
	byID  map[string]*axNode
	root  *axNode
}

type builder struct {
	ctx      context.Context
	o        Options
	attacher FrameAttacher
	local    map[cdp.Session]map[cdp.FrameID]bool

	text      strings.Builder
	count     int
	chars     int
	truncated bool
	refs      map[string]*refEntry
	next      int
	geo       map[cdp.Session]geometry
}

// axNode is the subset of Accessibility.AXNode the snapshot reads: decoding
// only it (not the name sources) is several times faster on big pages.
type axNode struct {
	NodeID           string            `json:"nodeId"`
	Ignored          bool              `json:"ignored"`
	IgnoredReasons   []axProp          `json:"ignoredReasons"`
	Role             *axValue          `json:"role"`
	Name             *axValue          `json:"name"`
	Value            *axValue          `json:"value"`
	Properties       []axProp          `json:"properties"`
	ParentID         string            `json:"parentId"`
	ChildIDs         []string          `json:"childIds"`
	BackendDOMNodeID cdp.BackendNodeID `json:"backendDOMNodeId"`
}

type axValue struct {
	Value json.RawMessage `json:"value"`
}

type axProp struct {
	Name  string   `json:"name"`
	Value *axValue `json:"value"`
}

func (b *builder) fetch(f *frameInfo) (*axTree, error) {
	var r struct {
		Nodes []*axNode `json:"nodes"`
	}
	if err := f.sess.Call(b.ctx, accessibility.CommandGetFullAXTree, accessibility.GetFullAXTreeParams{FrameID: f.id}, &r); err != nil {
		return nil, fmt.Errorf("get AX tree of frame %s: %w", f.id, err)
	}
	t := &axTree{frame: f, byID: make(map[string]*axNode, len(r.Nodes))}
	for _, n := range r.Nodes {
		t.byID[n.NodeID] = n
	}
	for _, n := range r.Nodes {
		if n.ParentID == "" || t.byID[n.ParentID] == nil {
			t.root = n
			break
		}
	}
	if t.root == nil && len(r.Nodes) > 0 {
		t.root = r.Nodes[0]
	}
	return t, nil
}

func (b *builder) full() bool {
	return (b.o.MaxNodes > 0 && b.count >= b.o.MaxNodes)
}

// hiddenReasons are ignoredReasons that hide a whole subtree.
var hiddenReasons = map[string]bool{
	"ariaHiddenElement": true, "ariaHiddenSubtree": true, "notRendered": true,
	"notVisible": true, "inertElement": true, "inertSubtree": true,
}

var skipRoles = map[string]bool{"InlineTextBox": true, "LineBreak": true, "ListMarker": true}

var interactiveRoles = map[string]bool{
	"button": true, "link": true, "textbox": true, "searchbox": true, "checkbox": true,
	"radio": true, "combobox": true, "listbox": true, "option": true, "menuitem": true,
	"menuitemcheckbox": true, "menuitemradio": true, "tab": true, "switch": true,
	"slider": true, "spinbutton": true, "treeitem": true, "ListBoxOption": true,
	"PopUpButton": true, "ToggleButton": true,
}

var wrapperRoles = map[string]bool{"generic": true, "LabelText": true, "none": true, "presentation": true, "GenericContainer": true, "Section": true, "LayoutTable": true, "LayoutTableRow": true, "LayoutTableCell": true}

// walk emits n (maybe) and its descendants. It returns false once a limit
// is hit, to stop the whole walk.
func (b *builder) walk(t *axTree, n *axNode, depth int, out *[]*Node, ctxName string) bool {
	if n.Ignored {
		for _, r := range n.IgnoredReasons {
			if hiddenReasons[r.Name] {
				return true
			}
		}
		return b.walkChildren(t, n, depth, out, ctxName)
	}
	role := axString(n.Role)
	if skipRoles[role] {
		return true
	}
	name := strings.TrimSpace(axString(n.Name))
	props := axProps(n)
	if role == "StaticText" {
		if b.o.Interactive || name == "" || strings.Contains(ctxName, name) {
			return true
		}
		role = "text"
	}
	iframe := role == "Iframe"
	editable := props["editable"] != "" || role == "textbox" || role == "searchbox"

	emit := true
	switch {
	case role == "RootWebArea" || role == "WebArea":
		emit = false
	case b.o.Interactive:
		emit = iframe || isInteractive(role, props)
	case b.o.Compact:
		emit = !(wrapperRoles[role] && name == "")
	}
	if emit && b.o.MaxDepth > 0 && depth >= b.o.MaxDepth {
		return true
	}
	if !emit {
		return b.walkChildren(t, n, depth, out, ctxName)
	}

	nd := &Node{Role: roleName(role), Name: RedactTokens(name)}
	applyProps(nd, props)
	if v := strings.TrimSpace(axString(n.Value)); v != "" && !iframe {
		switch {
		case editable && !b.o.IncludeValues:
		case editable && b.isPassword(t.frame, n.BackendDOMNodeID):
			s := RedactedPassword
			nd.Value = &s
		default:
			s := RedactTokens(v)
			nd.Value = &s
		}
	}
	if n.BackendDOMNodeID != 0 && (isInteractive(role, props) || iframe) {
		b.next++
		nd.Ref = "e" + strconv.Itoa(b.next)
	}
	var child *frameInfo
	if iframe && !b.o.ExcludeFrames && n.BackendDOMNodeID != 0 {
		child = b.prepareFrame(t.frame, n.BackendDOMNodeID, nd)
	}
	line := formatLine(nd, depth)
	if b.full() || (b.o.MaxChars > 0 && b.chars+len(line) > b.o.MaxChars) {
		if nd.Ref != "" {
			b.next--
		}
		b.truncated = true
		return false
	}
	if nd.Ref != "" {
		b.refs[nd.Ref] = &refEntry{backend: n.BackendDOMNodeID, frame: t.frame, rev: b.o.Revision}
		if b.o.Boxes {
			nd.Box = b.box(t.frame, n.BackendDOMNodeID)
		}
	}
	b.count++
	b.chars += len(line)
	b.text.WriteString(line)
	*out = append(*out, nd)

	if name != "" {
		ctxName = name
	}
	switch {
	case iframe:
		if child == nil {
			return true
		}
		ct, err := b.fetch(child)
		if err != nil || ct.root == nil {
			nd.Unreachable = true
			return true
		}
		return b.walk(ct, ct.root, depth+1, &nd.Children, "")
	case editable && role != "text":
		return true // the inner editor text is the value
	}
	return b.walkChildren(t, n, depth+1, &nd.Children, ctxName)
}

func (b *builder) walkChildren(t *axTree, n *axNode, depth int, out *[]*Node, ctxName string) bool {
	for _, id := range n.ChildIDs {
		c := t.byID[id]
		if c == nil {
			continue
		}
		if !b.walk(t, c, depth, out, ctxName) {
			return false
		}
	}
	return true
}

// prepareFrame finds the document of the iframe element id (in parent) and
// its session; nil (and nd marked) when it cannot be reached.
func (b *builder) prepareFrame(parent *frameInfo, id cdp.BackendNodeID, nd *Node) *frameInfo {
	d, err := cdp.Call(b.ctx, parent.sess, dom.DescribeNode, dom.DescribeNodeParams{BackendNodeID: id})
	if err != nil || d.Node == nil || d.Node.FrameID == "" {
		return nil
	}
	fid := d.Node.FrameID
	nd.Frame = string(fid)
	child := &frameInfo{id: fid, parent: parent, owner: id}
	switch {
	case b.isLocal(parent.sess, fid):
		child.sess = parent.sess
	case b.attacher != nil:
		s, err := b.attacher.AttachFrame(b.ctx, string(fid))
		if err != nil {
			nd.Unreachable = true
			return nil
		}
		child.sess = s
	default:
		nd.Unreachable = true
		return nil
	}
	return child
}

func (b *builder) box(f *frameInfo, id cdp.BackendNodeID) *Rect {
	g, ok := b.geo[f.sess]
	if !ok {
		g, _ = sessionGeometry(b.ctx, f) // no geometry is not fatal
		if b.geo == nil {
			b.geo = map[cdp.Session]geometry{}
		}
		b.geo[f.sess] = g
	}
	if r, ok := g[id]; ok {
		return &r
	}
	return nil
}

func (b *builder) isLocal(s cdp.Session, fid cdp.FrameID) bool {
	set, ok := b.local[s]
	if !ok {
		_, set, _ = frameTree(b.ctx, s)
		b.local[s] = set
	}
	return set[fid]
}

func (b *builder) isPassword(f *frameInfo, id cdp.BackendNodeID) bool {
	if id == 0 {
		return true // cannot tell: fail closed
	}
	d, err := cdp.Call(b.ctx, f.sess, dom.DescribeNode, dom.DescribeNodeParams{BackendNodeID: id})
	if err != nil || d.Node == nil {
		return true
	}
	return isPasswordAttrs(d.Node.Attributes)
}

func isPasswordAttrs(attrs []string) bool {
	for i := 0; i+1 < len(attrs); i += 2 {
		k, v := strings.ToLower(attrs[i]), strings.ToLower(attrs[i+1])
		if (k == "type" && v == "password") || (k == "autocomplete" && strings.Contains(v, "password")) {
			return true
		}
	}
	return false
}

func isInteractive(role string, props map[string]string) bool {
	if interactiveRoles[role] {
		return true
	}
	if props["focusable"] == "true" && !wrapperRoles[role] && role != "RootWebArea" && role != "Iframe" {
		return true
	}
	return false
}

func roleName(r string) string {
	switch r {
	case "Iframe":
		return "iframe"
	case "GenericContainer", "Section":
		return "generic"
	}
	return r
}

func axString(v *axValue) string {
	if v == nil || len(v.Value) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(v.Value, &s) == nil {
		return s
	}
	return strings.Trim(string(v.Value), `"`)
}

func axProps(n *axNode) map[string]string {
	m := make(map[string]string, len(n.Properties))
	for _, p := range n.Properties {
		m[p.Name] = axString(p.Value)
	}
	return m
}

func applyProps(nd *Node, p map[string]string) {
	if v, ok := p["checked"]; ok && v != "" {
		nd.Checked = v
	}
	if v := p["pressed"]; v == "true" || v == "mixed" {
		nd.Pressed = v
	}
	nd.Disabled = p["disabled"] == "true"
	nd.Focused = p["focused"] == "true"
	nd.Selected = p["selected"] == "true"
	nd.Required = p["required"] == "true"
	if v, ok := p["expanded"]; ok && v != "" {
		e := v == "true"
		nd.Expanded = &e
	}
	if v, err := strconv.Atoi(p["level"]); err == nil {
		nd.Level = v
	}
}

func formatLine(n *Node, depth int) string {
	var sb strings.Builder
	sb.WriteString(strings.Repeat("  ", depth))
	sb.WriteString("- ")
	sb.WriteString(n.Role)
	if n.Name != "" {
		sb.WriteString(" ")
		sb.WriteString(strconv.Quote(n.Name))
	}
	attr := func(s string) { sb.WriteString(" [" + s + "]") }
	if n.Checked != "" {
		attr("checked=" + n.Checked)
	}
	if n.Pressed != "" {
		attr("pressed=" + n.Pressed)
	}
	if n.Disabled {
		attr("disabled")
	}
	if n.Focused {
		attr("focused")
	}
	if n.Selected {
		attr("selected")
	}
	if n.Required {
		attr("required")
	}
	if n.Expanded != nil {
		attr("expanded=" + strconv.FormatBool(*n.Expanded))
	}
	if n.Level > 0 {
		attr("level=" + strconv.Itoa(n.Level))
	}
	if n.Unreachable {
		attr("unreachable")
	}
	if n.Ref != "" {
		attr("ref=" + n.Ref)
	}
	if n.Value != nil {
		sb.WriteString(": ")
		sb.WriteString(strconv.Quote(*n.Value))
	}
	sb.WriteString("\n")
	return sb.String()
}
