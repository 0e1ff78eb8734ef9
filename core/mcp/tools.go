package mcp

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
)

// Base names the session of a tool call.
type Base struct {
	Session   string `json:"session" jsonschema:"Session id, from sessions_list or session_create."`
	TimeoutMs int    `json:"timeoutMs,omitempty" jsonschema:"Optional time limit in milliseconds (default 15000, at most 120000)."`
}

// Target is the element a tool acts on: a ref, a selector, a role and
// name, or (where allowed) x and y.
type Target struct {
	Ref      string `json:"ref,omitempty" jsonschema:"Element ref from the latest browser_snapshot, written \"e12\" or \"@e12\". Preferred way to target an element."`
	Selector string `json:"selector,omitempty" jsonschema:"CSS selector of the element (when you have no ref)."`
	Role     string `json:"role,omitempty" jsonschema:"ARIA role of the element, e.g. \"button\", \"link\", \"textbox\" (with name; when you have no ref)."`
	Name     string `json:"name,omitempty" jsonschema:"Accessible name of the element, used with role."`
}

func (t Target) apply(r *agent.Request) {
	r.Ref, r.Selector, r.Role, r.Name = t.Ref, t.Selector, t.Role, t.Name
}

// Point is a fallback target in viewport CSS pixels.
type Point struct {
	X *float64 `json:"x,omitempty" jsonschema:"Viewport x in CSS pixels; with y, a fallback target when the element has no ref."`
	Y *float64 `json:"y,omitempty" jsonschema:"Viewport y in CSS pixels; with x, a fallback target."`
}

// Action marks a call that changes the page.
type Action struct {
	ActionID string `json:"actionId,omitempty" jsonschema:"Optional idempotency key (up to 128 bytes). Repeating a call with the same actionId returns the first result and does nothing again; use a fresh one per intended action."`
}

// Inputs of the tools.
type (
	listIn   struct{}
	createIn struct {
		URL string `json:"url,omitempty" jsonschema:"Page to open (http or https); empty for the default page."`
	}
	snapshotIn struct {
		Base
		Interactive   bool   `json:"interactive,omitempty" jsonschema:"Only interactive elements (buttons, links, inputs…) and their context: much shorter. Recommended first."`
		Compact       bool   `json:"compact,omitempty" jsonschema:"Drop structural nodes without names to shorten the tree."`
		MaxDepth      int    `json:"maxDepth,omitempty" jsonschema:"Limit the tree depth (0: no limit)."`
		Selector      string `json:"selector,omitempty" jsonschema:"Only the subtree of the element matching this CSS selector."`
		Ref           string `json:"ref,omitempty" jsonschema:"Only the subtree of this ref (\"e12\" or \"@e12\") of the previous snapshot."`
		IncludeValues bool   `json:"includeValues,omitempty" jsonschema:"Include the current values of form fields (passwords are never shown)."`
	}
	clickIn struct {
		Base
		Action
		Target
		Point
		Double bool `json:"double,omitempty" jsonschema:"Double-click instead of a single click."`
	}
	hoverIn struct {
		Base
		Action
		Target
		Point
	}
	fillIn struct {
		Base
		Action
		Target
		Text string `json:"text" jsonschema:"Text that replaces the field's content (empty clears it)."`
	}
	typeIn struct {
		Base
		Action
		Target
		Text string `json:"text" jsonschema:"Text typed character by character. With a target the element is clicked first; without one the text goes to the focused element."`
	}
	pressIn struct {
		Base
		Action
		Key string `json:"key" jsonschema:"Key or chord to press on the focused element, e.g. \"Enter\", \"Tab\", \"Escape\", \"ArrowDown\", \"Control+a\", \"Shift+Tab\"."`
	}
	selectIn struct {
		Base
		Action
		Target
		Value string `json:"value" jsonschema:"The option to choose: its value or its visible label."`
	}
	checkIn struct {
		Base
		Action
		Target
	}
	scrollIn struct {
		Base
		Action
		Target
		Point
		DeltaX float64 `json:"deltaX,omitempty" jsonschema:"Horizontal scroll in CSS pixels (positive: right)."`
		DeltaY float64 `json:"deltaY,omitempty" jsonschema:"Vertical scroll in CSS pixels (positive: down), e.g. 600 for about a screen."`
	}
	navigateIn struct {
		Base
		Action
		URL string `json:"url" jsonschema:"Absolute URL to open (http or https)."`
	}
	historyIn struct {
		Base
		Action
	}
	waitIn struct {
		Base
		Text       string `json:"text,omitempty" jsonschema:"Wait until this text appears on the page."`
		Selector   string `json:"selector,omitempty" jsonschema:"Wait until an element matches this CSS selector (see state)."`
		State      string `json:"state,omitempty" jsonschema:"With selector: \"visible\" waits until it is visible, \"hidden\" until it is hidden or gone; default: until it exists."`
		URL        string `json:"url,omitempty" jsonschema:"Wait until the page URL contains this substring."`
		URLPattern string `json:"urlPattern,omitempty" jsonschema:"Wait until the page URL matches this regular expression."`
		Load       string `json:"load,omitempty" jsonschema:"Wait for a load state: domcontentloaded, load, or networkidle (loaded and no network request in flight for 500 ms)."`
		Function   string `json:"function,omitempty" jsonschema:"Wait until this JavaScript predicate is truthy, e.g. \"() => window.app?.ready\" (polled; a promise is awaited). Needs eval allowed on the appliance and an admin-scoped caller."`
	}
	uploadIn struct {
		Base
		Action
		Target
		Files []string `json:"files" jsonschema:"Names of files in the session's upload area (a person or script puts them with PUT /api/v1/sessions/{id}/uploads/{name}); plain names such as \"cv.pdf\", no paths."`
	}
	tabsIn struct {
		Base
		Action
		Op         string `json:"op,omitempty" jsonschema:"list (default): the session's tabs (the current one is streamed and driven; popups the page opens are followed); new: open url in a new tab and switch to it; switch: make a tab current (refs of the old page go stale: snapshot again); close: close a tab (closing the current one shows its opener or the tab used last)."`
		URL        string `json:"url,omitempty" jsonschema:"With op=new: the URL to open (default about:blank)."`
		Background bool   `json:"background,omitempty" jsonschema:"With op=new: open the tab without switching to it."`
		Index      *int   `json:"index,omitempty" jsonschema:"With op=switch or close: the tab's index from op=list."`
		TabID      string `json:"tabId,omitempty" jsonschema:"With op=switch or close: the tab's id from op=list (instead of index)."`
	}
	cookiesIn struct {
		Base
		Action
		Op       string  `json:"op,omitempty" jsonschema:"get (default): the session's cookies; set: set one cookie; clear: delete the cookie named name (with url or domain), or every cookie when no name is given."`
		Name     string  `json:"name,omitempty" jsonschema:"Cookie name (set; filter of get; the cookie to delete with clear)."`
		Value    string  `json:"value,omitempty" jsonschema:"Cookie value, with op=set."`
		URL      string  `json:"url,omitempty" jsonschema:"URL the cookie belongs to (set, clear); default for set: the current page."`
		Domain   string  `json:"domain,omitempty" jsonschema:"Cookie domain (set, clear; filter of get)."`
		Path     string  `json:"path,omitempty" jsonschema:"Cookie path (set, clear)."`
		Secure   bool    `json:"secure,omitempty" jsonschema:"Set a Secure cookie."`
		HTTPOnly bool    `json:"httpOnly,omitempty" jsonschema:"Set an HttpOnly cookie."`
		SameSite string  `json:"sameSite,omitempty" jsonschema:"SameSite of a cookie to set: Strict, Lax or None."`
		Expires  float64 `json:"expires,omitempty" jsonschema:"Expiry of a cookie to set, in seconds since the Unix epoch; omitted: a session cookie."`
		Reveal   bool    `json:"reveal,omitempty" jsonschema:"With op=get: show cookie values (they are [redacted] by default). Ask only when you need a value."`
	}
	storageIn struct {
		Base
		Action
		Op     string `json:"op,omitempty" jsonschema:"get (default): the items (or the item key); set: set key to value; clear: remove key, or every item when no key is given."`
		Area   string `json:"area,omitempty" jsonschema:"local (default) for localStorage or session for sessionStorage, of the current page's origin."`
		Key    string `json:"key,omitempty" jsonschema:"Item key."`
		Value  string `json:"value,omitempty" jsonschema:"Item value, with op=set."`
		Reveal bool   `json:"reveal,omitempty" jsonschema:"With op=get: show the values (they are [redacted] by default). Ask only when you need a value."`
	}
	evalIn struct {
		Base
		Action
		Expression string `json:"expression" jsonschema:"JavaScript expression evaluated in the page; its JSON value is returned (a promise is awaited; at most 64 KiB, else truncated). Off unless the appliance allows eval; admin scope only."`
	}
	getIn struct {
		Base
		Target
		What string `json:"what" jsonschema:"What to read: text, value, attr (with attr), title, url, count (of selector matches) or box (position and size)."`
		Attr string `json:"attr,omitempty" jsonschema:"Attribute name, with what=attr."`
	}
	isIn struct {
		Base
		Target
		What string `json:"what" jsonschema:"State to test: visible, enabled or checked."`
	}
	screenshotIn struct {
		Base
		Format string `json:"format,omitempty" jsonschema:"Image format: png (default) or jpeg (smaller)."`
	}
	dialogIn struct {
		Base
		Action
		Accept     bool   `json:"accept,omitempty" jsonschema:"True to accept (OK) the open JavaScript dialog, false to dismiss it (Cancel)."`
		PromptText string `json:"promptText,omitempty" jsonschema:"Text to answer a prompt() dialog with, when accepting."`
	}
	humanIn struct {
		Session   string `json:"session" jsonschema:"Session id, from sessions_list or session_create."`
		Reason    string `json:"reason" jsonschema:"What the person should do and why, shown to them, e.g. \"Log in with your account\" or \"Solve the CAPTCHA\"."`
		TimeoutMs int    `json:"timeoutMs,omitempty" jsonschema:"How long to wait for the person in milliseconds (default 300000)."`
	}
)

const defaultHumanTimeout = 5 * time.Minute

// enums of some inputs, added to the inferred schemas.
var enums = map[string]map[string][]any{
	"browser_get":        {"what": {"text", "value", "attr", "title", "url", "count", "box"}},
	"browser_is":         {"what": {"visible", "enabled", "checked"}},
	"browser_screenshot": {"format": {"png", "jpeg"}},
	"browser_wait":       {"state": {"visible", "hidden"}, "load": {"domcontentloaded", "load", "networkidle"}},
	"browser_tabs":       {"op": {"list", "new", "switch", "close"}},
	"browser_cookies":    {"op": {"get", "set", "clear"}, "sameSite": {"Strict", "Lax", "None"}},
	"browser_storage":    {"op": {"get", "set", "clear"}, "area": {"local", "session"}},
}

// inputSchemas are built once, so the SDK's schema cache (keyed by
// pointer) serves every server of the HTTP handler.
var (
	schemaMu     sync.Mutex
	inputSchemas = map[string]*jsonschema.Schema{}
)

func inputSchema[In any](tool string) *jsonschema.Schema {
	schemaMu.Lock()
	defer schemaMu.Unlock()
	if s := inputSchemas[tool]; s != nil {
		return s
	}
	s, err := jsonschema.For[In](nil)
	if err != nil {
		panic(fmt.Sprintf("mcp: schema of %s: %v", tool, err))
	}
	for prop, vals := range enums[tool] {
		if p := s.Properties[prop]; p != nil {
			p.Enum = vals
		}
	}
	inputSchemas[tool] = s
	return s
}

func add[In any](s *mcp.Server, name, title, desc string, readOnly bool, h func(context.Context, In) *mcp.CallToolResult) {
	t := &mcp.Tool{
		Name: name, Description: desc, InputSchema: inputSchema[In](name),
		Annotations: &mcp.ToolAnnotations{Title: title, ReadOnlyHint: readOnly},
	}
	mcp.AddTool(s, t, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, any, error) {
		return h(ctx, in), nil, nil
	})
}

func addTools(s *mcp.Server, b Backend) {
	do := func(ctx context.Context, sess Base, r agent.Request) *mcp.CallToolResult {
		if sess.Session == "" {
			return errorResult(errcode.New(errcode.InvalidArgument, "session is required").WithHint("get one from sessions_list or session_create"))
		}
		r.TimeoutMs = sess.TimeoutMs
		res, err := b.Agent(ctx, sess.Session, r)
		if err != nil {
			return errorResult(err)
		}
		if res == nil {
			res = &agent.Result{OK: true, Command: r.Command}
		}
		return agentResult(r, res)
	}

	add(s, "sessions_list", "List sessions",
		"List the browser sessions you may drive: id, state, title and URL. Use an id as the session of the browser_* tools.",
		true, func(ctx context.Context, _ listIn) *mcp.CallToolResult {
			list, err := b.ListSessions(ctx)
			if err != nil {
				return errorResult(err)
			}
			if list == nil {
				list = []SessionInfo{}
			}
			return jsonResult(fmt.Sprintf("%d sessions", len(list)), map[string]any{"sessions": list})
		})
	add(s, "session_create", "Create a session",
		"Open a new browser session, optionally on a URL, and return its id. Prefer an existing session from sessions_list when one fits.",
		false, func(ctx context.Context, in createIn) *mcp.CallToolResult {
			si, err := b.CreateSession(ctx, in.URL)
			if err != nil {
				return errorResult(err)
			}
			return jsonResult("created session "+si.ID, si)
		})

	add(s, "browser_snapshot", "Read the page",
		`Read the page as an accessibility tree (text). Elements you can act on carry refs like [ref=e12]; pass "e12" as the ref of browser_click, browser_fill, etc. Take a new snapshot after the page changes: old refs go stale. Start with interactive=true on large pages.`,
		true, func(ctx context.Context, in snapshotIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "snapshot", Interactive: in.Interactive, Compact: in.Compact,
				MaxDepth: in.MaxDepth, Selector: in.Selector, Ref: in.Ref, IncludeValues: in.IncludeValues})
		})
	add(s, "browser_click", "Click",
		"Click an element, by ref (preferred), CSS selector, or role and name; or at viewport x,y. Set double for a double-click. The click is a real pointer event, in order with the people using the session.",
		false, func(ctx context.Context, in clickIn) *mcp.CallToolResult {
			r := agent.Request{Command: "click", ActionID: in.ActionID, X: in.X, Y: in.Y}
			if in.Double {
				r.Command = "dblclick"
			}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_hover", "Hover",
		"Move the pointer over an element (by ref, selector, or role and name) or to viewport x,y, e.g. to open a hover menu.",
		false, func(ctx context.Context, in hoverIn) *mcp.CallToolResult {
			r := agent.Request{Command: "hover", ActionID: in.ActionID, X: in.X, Y: in.Y}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_fill", "Fill a field",
		"Replace the content of a text field (input, textarea, contenteditable) with text: clicks it, selects all and inserts the text over the selection (Backspace for empty text), firing the page's input events.",
		false, func(ctx context.Context, in fillIn) *mcp.CallToolResult {
			r := agent.Request{Command: "fill", ActionID: in.ActionID, Text: in.Text}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_type", "Type text",
		"Type text character by character, without clearing first. With a target the element is clicked first; otherwise the text goes to the focused element.",
		false, func(ctx context.Context, in typeIn) *mcp.CallToolResult {
			r := agent.Request{Command: "type", ActionID: in.ActionID, Text: in.Text}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_press", "Press a key",
		`Press a key or chord on the focused element: "Enter", "Tab", "Escape", "ArrowDown", "Control+a", "Shift+Tab". Browser shortcuts the appliance blocks are refused with shortcut_blocked.`,
		false, func(ctx context.Context, in pressIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "press", ActionID: in.ActionID, Key: in.Key})
		})
	add(s, "browser_select", "Choose an option",
		"Choose an option of a <select> element by its value or visible label.",
		false, func(ctx context.Context, in selectIn) *mcp.CallToolResult {
			r := agent.Request{Command: "select", ActionID: in.ActionID, Value: in.Value}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_check", "Check",
		"Make sure a checkbox or radio button is checked (clicks it only if it is not).",
		false, func(ctx context.Context, in checkIn) *mcp.CallToolResult {
			r := agent.Request{Command: "check", ActionID: in.ActionID}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_uncheck", "Uncheck",
		"Make sure a checkbox is unchecked (clicks it only if it is checked).",
		false, func(ctx context.Context, in checkIn) *mcp.CallToolResult {
			r := agent.Request{Command: "uncheck", ActionID: in.ActionID}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_scroll", "Scroll",
		"Scroll with the mouse wheel by deltaX/deltaY CSS pixels (positive deltaY scrolls down), over an element (ref, selector, role+name), at x,y, or at the centre of the viewport.",
		false, func(ctx context.Context, in scrollIn) *mcp.CallToolResult {
			r := agent.Request{Command: "scroll", ActionID: in.ActionID, X: in.X, Y: in.Y, DeltaX: in.DeltaX, DeltaY: in.DeltaY}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_navigate", "Open a URL",
		"Navigate the session's tab to a URL and wait for it to load. URLs outside the appliance's policy are refused with navigation_blocked.",
		false, func(ctx context.Context, in navigateIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "navigate", ActionID: in.ActionID, URL: in.URL})
		})
	for _, h := range []struct{ name, cmd, title, desc string }{
		{"browser_back", "back", "Go back", "Go back one page in the tab's history and wait for it to load."},
		{"browser_forward", "forward", "Go forward", "Go forward one page in the tab's history and wait for it to load."},
		{"browser_reload", "reload", "Reload", "Reload the page and wait for it to load."},
	} {
		add(s, h.name, h.title, h.desc, false, func(ctx context.Context, in historyIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: h.cmd, ActionID: in.ActionID})
		})
	}
	add(s, "browser_wait", "Wait for a condition",
		"Wait until every given condition holds: text appears, an element matching selector exists (or is visible/hidden, see state), the URL contains url or matches urlPattern, the page reached a load state, a JavaScript function is truthy. Ends at timeoutMs with a summary of what held; that is a result, not an error.",
		true, func(ctx context.Context, in waitIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "wait", Text: in.Text, Selector: in.Selector, What: in.State,
				URL: in.URL, Value: in.URLPattern, Load: in.Load, Function: in.Function})
		})
	add(s, "browser_get", "Read a value",
		"Read something from the page: an element's text, value, attribute (attr) or box; or the page's title, url, or the count of elements matching selector.",
		true, func(ctx context.Context, in getIn) *mcp.CallToolResult {
			r := agent.Request{Command: "get", What: in.What, Attr: in.Attr}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_is", "Test an element",
		"Test whether an element is visible, enabled or checked.",
		true, func(ctx context.Context, in isIn) *mcp.CallToolResult {
			r := agent.Request{Command: "is", What: in.What}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_screenshot", "Screenshot",
		"Capture the visible part of the page as an image. Prefer browser_snapshot to find elements; use a screenshot to check the layout or read images.",
		true, func(ctx context.Context, in screenshotIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "screenshot", Format: in.Format})
		})
	add(s, "browser_dialog", "Answer a dialog",
		"Accept or dismiss the open JavaScript dialog (alert, confirm, prompt, beforeunload); promptText answers a prompt. Fails with no_dialog when none is open.",
		false, func(ctx context.Context, in dialogIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "dialog", ActionID: in.ActionID, Accept: in.Accept, PromptText: in.PromptText})
		})
	add(s, "browser_upload", "Upload files",
		"Set files on a file input (<input type=file>, by ref, selector, or role and name), as if a person chose them. The files must be in the session's upload area already; you give their plain names. Fails with not_found for a name not there.",
		false, func(ctx context.Context, in uploadIn) *mcp.CallToolResult {
			r := agent.Request{Command: "upload", ActionID: in.ActionID, Files: in.Files}
			in.Target.apply(&r)
			return do(ctx, in.Base, r)
		})
	add(s, "browser_tabs", "Tabs",
		"List the session's tabs (its own tab, which is streamed and driven, and popups the page opened), open a URL (op=new, in the session's own tab), or close a popup. Switching to another tab is not supported (unsupported): navigate to its URL instead.",
		false, func(ctx context.Context, in tabsIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "tabs", ActionID: in.ActionID, Op: in.Op, URL: in.URL, Background: in.Background, Index: in.Index, TabID: in.TabID})
		})
	add(s, "browser_cookies", "Cookies",
		"Read, set or clear the session's cookies (its own browser profile only). Values are [redacted] unless reveal is true.",
		false, func(ctx context.Context, in cookiesIn) *mcp.CallToolResult {
			r := agent.Request{Command: "cookies", ActionID: in.ActionID, Op: in.Op, Reveal: in.Reveal}
			if in.Name != "" || in.Value != "" || in.URL != "" || in.Domain != "" || in.Path != "" || in.Secure || in.HTTPOnly || in.SameSite != "" || in.Expires != 0 {
				r.Cookie = &agent.CookieInput{Name: in.Name, Value: in.Value, URL: in.URL, Domain: in.Domain, Path: in.Path,
					Secure: in.Secure, HTTPOnly: in.HTTPOnly, SameSite: in.SameSite, Expires: in.Expires}
			}
			return do(ctx, in.Base, r)
		})
	add(s, "browser_storage", "Web storage",
		"Read, set or clear localStorage or sessionStorage of the current page's origin. Values are [redacted] unless reveal is true.",
		false, func(ctx context.Context, in storageIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "storage", ActionID: in.ActionID, Op: in.Op, Area: in.Area, Key: in.Key, Value: in.Value, Reveal: in.Reveal})
		})
	add(s, "browser_eval", "Run JavaScript",
		"Evaluate a JavaScript expression in the page and return its JSON value. Off by default: the appliance must allow it (agent.allowEval) and the caller needs the admin scope, else forbidden. Prefer snapshots and the other tools.",
		false, func(ctx context.Context, in evalIn) *mcp.CallToolResult {
			return do(ctx, in.Base, agent.Request{Command: "eval", ActionID: in.ActionID, Expression: in.Expression})
		})
	add(s, "request_human", "Ask a person",
		"Ask a person to take over the session (log in, solve a CAPTCHA, confirm a payment, decide) and wait until they hand back or timeoutMs passes. Explain in reason what they should do. Take a new snapshot afterwards.",
		false, func(ctx context.Context, in humanIn) *mcp.CallToolResult {
			if in.Session == "" || strings.TrimSpace(in.Reason) == "" {
				return errorResult(errcode.New(errcode.InvalidArgument, "session and reason are required"))
			}
			timeout := defaultHumanTimeout
			if in.TimeoutMs > 0 {
				timeout = time.Duration(in.TimeoutMs) * time.Millisecond
			}
			hr, err := b.RequestHuman(ctx, in.Session, in.Reason, timeout)
			if err != nil {
				return errorResult(err)
			}
			return jsonResult("human: "+hr.Status, hr)
		})
}

// errorResult reports err to the model: the stable code first, then the
// message and the hint.
func errorResult(err error) *mcp.CallToolResult {
	e := errcode.From(err)
	text := e.Code + ": " + e.Message
	if e.Hint != "" {
		text += " — hint: " + e.Hint
	}
	if e.Recoverable {
		text += " (recoverable)"
	}
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: text}}}
}

// jsonResult is a short summary and the data as JSON.
func jsonResult(summary string, data any) *mcp.CallToolResult {
	js, err := json.Marshal(data)
	if err != nil {
		return errorResult(errcode.New(errcode.Internal, "unencodable result").WithRecoverable(false))
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: summary + "\n" + string(js)}}}
}

// agentResult renders an agent command's result: the snapshot text, the
// screenshot image, or a summary line and the result as JSON.
func agentResult(r agent.Request, res *agent.Result) *mcp.CallToolResult {
	head := fmt.Sprintf("pageRevision: %d", res.PageRevision)
	if res.ActionRevision != 0 {
		head += fmt.Sprintf(", actionRevision: %d", res.ActionRevision)
	}
	if res.Duplicate {
		head += ", duplicate: this actionId was done before, nothing ran now"
	}
	switch r.Command {
	case "snapshot":
		if text, ok := field(res.Data, "text").(string); ok {
			out := head
			if res.Summary != "" {
				out += "\n" + res.Summary
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out + "\n\n" + text}}}
		}
	case "screenshot":
		b64, _ := field(res.Data, "base64").(string)
		mime, _ := field(res.Data, "mimeType").(string)
		if img, err := base64.StdEncoding.DecodeString(b64); err == nil && b64 != "" {
			if mime == "" {
				mime = "image/png"
			}
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.ImageContent{Data: img, MIMEType: mime},
				&mcp.TextContent{Text: head + "\n" + res.Summary},
			}}
		}
		return errorResult(errcode.New(errcode.Internal, "the screenshot came back without an image"))
	}
	summary := res.Summary
	if summary == "" {
		summary = r.Command + " done"
	}
	if !res.OK {
		summary = "not ok: " + summary
	}
	out := summary + "\n" + head
	if res.Data != nil {
		if js, err := json.Marshal(res.Data); err == nil {
			out += "\n" + string(js)
		}
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out}}}
}

// field reads key from data, a map or anything that encodes as a JSON
// object (the in-process and the remote Backend give different types).
func field(data any, key string) any {
	if m, ok := data.(map[string]any); ok {
		return m[key]
	}
	js, err := json.Marshal(data)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(js, &m) != nil {
		return nil
	}
	return m[key]
}
