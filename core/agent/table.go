package agent

import (
	"encoding/json"
	"strings"
)

// The agent's commands are described here once: their names, arguments and
// help. The MCP tools (core/mcp) build their input schemas and requests
// from this table and `tabcast browser` its flags and help, so adding a
// command or an argument is one edit here (plus its code in run).

// ArgType is the JSON type of an argument.
type ArgType string

const (
	String  ArgType = "string"
	Bool    ArgType = "boolean"
	Int     ArgType = "integer"
	Number  ArgType = "number"
	OptInt  ArgType = "?integer" // may be absent; 0 is a value (an index)
	OptNum  ArgType = "?number"  // may be absent; 0 is a value (a coordinate)
	Strings ArgType = "[]string"
)

// Arg is one argument of a command.
type Arg struct {
	// Key names the argument in an MCP tool's input.
	Key string
	// Field is where it goes in the Request's JSON when not at Key: a key
	// ("what") or a path into an object ("cookie.name").
	Field string
	Type  ArgType
	// Help describes the argument (the MCP property's description).
	Help     string
	Enum     []string
	Required bool
	// Switch, on a Bool argument, is the command that runs instead when it
	// is true (click with double runs dblclick).
	Switch string

	// The `tabcast browser` flag that sets it ("" for none: a positional
	// or no CLI form), its one-letter form, help and default.
	Flag, Short, FlagHelp, FlagDefault string
	// FlagPerValue: the CLI has one bool flag per Enum value (--visible,
	// --hidden) instead of one flag taking the value.
	FlagPerValue bool
}

// Command is one agent command.
type Command struct {
	// Name is Request.Command.
	Name string
	// Tool and Title: the MCP tool serving it ("" for none).
	Tool, Title string
	// Help says what it does (the MCP tool's description).
	Help string
	// Read: it never acts on the page, so it runs while a person holds
	// control (tabs, cookies and storage reads: see readOp).
	Read bool
	// ToolReadOnly is the MCP read-only hint; request_human runs under a
	// person's control but hands the session to them, so it is not.
	ToolReadOnly bool
	// Usage is its synopsis in `tabcast browser --help` ("" when the CLI
	// does not offer it); Aliases are other CLI names.
	Usage   string
	Aliases []string
	Args    []Arg
}

// Argument groups several commands share.
var (
	// TimeoutArg is taken by every command; a command may describe it anew.
	TimeoutArg = Arg{Key: "timeoutMs", Type: Int, Help: "Optional time limit in milliseconds (default 15000, at most 120000)."}
	actionArg  = Arg{Key: "actionId", Type: String, Help: "Optional idempotency key (up to 128 bytes). Repeating a call with the same actionId returns the first result and does nothing again; use a fresh one per intended action."}
	targetArgs = []Arg{
		{Key: "ref", Type: String, Help: `Element ref from the latest browser_snapshot, written "e12" or "@e12". Preferred way to target an element.`},
		{Key: "selector", Type: String, Help: "CSS selector of the element (when you have no ref).", Flag: "selector", FlagHelp: "CSS selector target"},
		{Key: "role", Type: String, Help: `ARIA role of the element, e.g. "button", "link", "textbox" (with name; when you have no ref).`, Flag: "role", FlagHelp: "ARIA role target"},
		{Key: "name", Type: String, Help: "Accessible name of the element, used with role.", Flag: "name", FlagHelp: "accessible name (with --role)"},
	}
	pointArgs = []Arg{
		{Key: "x", Type: OptNum, Help: "Viewport x in CSS pixels; with y, a fallback target when the element has no ref."},
		{Key: "y", Type: OptNum, Help: "Viewport y in CSS pixels; with x, a fallback target."},
	}
)

// args joins argument groups.
func args(groups ...[]Arg) []Arg {
	var out []Arg
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

func one(a ...Arg) []Arg { return a }

// Table lists the commands, in the order of the help and the tools.
var Table = []Command{
	{Name: "snapshot", Tool: "browser_snapshot", Title: "Read the page", Read: true, ToolReadOnly: true,
		Help:  `Read the page as an accessibility tree (text). Elements you can act on carry refs like [ref=e12]; pass "e12" as the ref of browser_click, browser_fill, etc. Take a new snapshot after the page changes: old refs go stale. Start with interactive=true on large pages.`,
		Usage: "snapshot [-i] [-c] [--depth N] [--selector S] [--ref @eN] [--values]",
		Args: one(
			Arg{Key: "interactive", Type: Bool, Help: "Only interactive elements (buttons, links, inputs…) and their context: much shorter. Recommended first.", Flag: "interactive", Short: "i", FlagHelp: "snapshot: interactive elements only"},
			Arg{Key: "compact", Type: Bool, Help: "Drop structural nodes without names to shorten the tree.", Flag: "compact", Short: "c", FlagHelp: "snapshot: drop unnamed wrappers"},
			Arg{Key: "maxDepth", Type: Int, Help: "Limit the tree depth (0: no limit).", Flag: "depth", FlagHelp: "snapshot: max depth"},
			Arg{Key: "selector", Type: String, Help: "Only the subtree of the element matching this CSS selector.", Flag: "selector"},
			Arg{Key: "ref", Type: String, Help: `Only the subtree of this ref ("e12" or "@e12") of the previous snapshot.`, Flag: "ref", FlagHelp: "snapshot: scope to this ref"},
			Arg{Key: "includeValues", Type: Bool, Help: "Include the current values of form fields (passwords are never shown).", Flag: "values", FlagHelp: "snapshot: include form values (passwords never)"},
		)},
	{Name: "click", Tool: "browser_click", Title: "Click",
		Help:  "Click an element, by ref (preferred), CSS selector, or role and name; or at viewport x,y. Set double for a double-click. The click is a real pointer event, in order with the people using the session.",
		Usage: "click @eN | --selector S | --role R --name N",
		Args:  args(one(actionArg), targetArgs, pointArgs, one(Arg{Key: "double", Type: Bool, Switch: "dblclick", Help: "Double-click instead of a single click."}))},
	{Name: "dblclick", Usage: "dblclick @eN | --selector S | --role R --name N", Args: args(one(actionArg), targetArgs, pointArgs)},
	{Name: "hover", Tool: "browser_hover", Title: "Hover",
		Help:  "Move the pointer over an element (by ref, selector, or role and name) or to viewport x,y, e.g. to open a hover menu.",
		Usage: "hover @eN | --selector S | --role R --name N",
		Args:  args(one(actionArg), targetArgs, pointArgs)},
	{Name: "focus", Usage: "focus @eN | --selector S | --role R --name N", Args: args(one(actionArg), targetArgs)},
	{Name: "fill", Tool: "browser_fill", Title: "Fill a field",
		Help:  "Replace the content of a text field (input, textarea, contenteditable) with text: clicks it, selects all and inserts the text over the selection (Backspace for empty text), firing the page's input events.",
		Usage: "fill @eN TEXT",
		Args:  args(one(actionArg), targetArgs, one(Arg{Key: "text", Type: String, Required: true, Help: "Text that replaces the field's content (empty clears it)."}))},
	{Name: "type", Tool: "browser_type", Title: "Type text",
		Help:  "Type text character by character, without clearing first. With a target the element is clicked first; otherwise the text goes to the focused element.",
		Usage: "type [@eN] TEXT",
		Args:  args(one(actionArg), targetArgs, one(Arg{Key: "text", Type: String, Required: true, Help: "Text typed character by character. With a target the element is clicked first; without one the text goes to the focused element."}))},
	{Name: "press", Tool: "browser_press", Title: "Press a key",
		Help:  `Press a key or chord on the focused element: "Enter", "Tab", "Escape", "ArrowDown", "Control+a", "Shift+Tab". Browser shortcuts the appliance blocks are refused with shortcut_blocked.`,
		Usage: "press KEY   (e.g. Enter, Control+a)",
		Args:  one(actionArg, Arg{Key: "key", Type: String, Required: true, Help: `Key or chord to press on the focused element, e.g. "Enter", "Tab", "Escape", "ArrowDown", "Control+a", "Shift+Tab".`})},
	{Name: "check", Tool: "browser_check", Title: "Check",
		Help:  "Make sure a checkbox or radio button is checked (clicks it only if it is not).",
		Usage: "check @eN", Args: args(one(actionArg), targetArgs)},
	{Name: "uncheck", Tool: "browser_uncheck", Title: "Uncheck",
		Help:  "Make sure a checkbox is unchecked (clicks it only if it is checked).",
		Usage: "uncheck @eN", Args: args(one(actionArg), targetArgs)},
	{Name: "select", Tool: "browser_select", Title: "Choose an option",
		Help:  "Choose an option of a <select> element by its value or visible label.",
		Usage: "select @eN VALUE",
		Args:  args(one(actionArg), targetArgs, one(Arg{Key: "value", Type: String, Required: true, Help: "The option to choose: its value or its visible label."}))},
	{Name: "scroll", Tool: "browser_scroll", Title: "Scroll",
		Help:  "Scroll with the mouse wheel by deltaX/deltaY CSS pixels (positive deltaY scrolls down), over an element (ref, selector, role+name), at x,y, or at the centre of the viewport.",
		Usage: "scroll [--dx N] [--dy N] [@eN]",
		Args: args(one(actionArg), targetArgs, pointArgs, one(
			Arg{Key: "deltaX", Type: Number, Help: "Horizontal scroll in CSS pixels (positive: right).", Flag: "dx", FlagHelp: "scroll: pixels right"},
			Arg{Key: "deltaY", Type: Number, Help: "Vertical scroll in CSS pixels (positive: down), e.g. 600 for about a screen.", Flag: "dy", FlagHelp: "scroll: pixels down"},
		))},
	{Name: "scrollintoview", Usage: "scrollintoview @eN", Args: args(one(actionArg), targetArgs)},
	{Name: "navigate", Tool: "browser_navigate", Title: "Open a URL",
		Help:  "Navigate the session's tab to a URL and wait for it to load. URLs outside the appliance's policy are refused with navigation_blocked.",
		Usage: "navigate URL", Aliases: []string{"open", "goto"},
		Args: one(actionArg, Arg{Key: "url", Type: String, Required: true, Help: "Absolute URL to open (http or https)."})},
	{Name: "back", Tool: "browser_back", Title: "Go back", Help: "Go back one page in the tab's history and wait for it to load.", Usage: "back", Args: one(actionArg)},
	{Name: "forward", Tool: "browser_forward", Title: "Go forward", Help: "Go forward one page in the tab's history and wait for it to load.", Usage: "forward", Args: one(actionArg)},
	{Name: "reload", Tool: "browser_reload", Title: "Reload", Help: "Reload the page and wait for it to load.", Usage: "reload", Args: one(actionArg)},
	{Name: "wait", Tool: "browser_wait", Title: "Wait for a condition", Read: true, ToolReadOnly: true,
		Help: "Wait until every given condition holds: text appears, an element matching selector exists (or is visible/hidden, see state), the URL contains url or matches urlPattern, the page reached a load state, a JavaScript function is truthy. Ends at timeoutMs with a summary of what held; that is a result, not an error.",
		Usage: "wait --text T | --selector S [--visible|--hidden] | --url-contains U   [--timeout 10s]\n" +
			`wait --load load|domcontentloaded|networkidle   wait --function "() => window.ok"`,
		Args: one(
			Arg{Key: "text", Type: String, Help: "Wait until this text appears on the page.", Flag: "text", FlagHelp: "wait: text to appear"},
			Arg{Key: "selector", Type: String, Help: "Wait until an element matches this CSS selector (see state).", Flag: "selector"},
			Arg{Key: "state", Field: "what", Type: String, Enum: []string{"visible", "hidden"}, FlagPerValue: true,
				Help: `With selector: "visible" waits until it is visible, "hidden" until it is hidden or gone; default: until it exists.`},
			Arg{Key: "url", Type: String, Help: "Wait until the page URL contains this substring.", Flag: "url-contains", FlagHelp: "wait: URL substring"},
			Arg{Key: "urlPattern", Field: "value", Type: String, Help: "Wait until the page URL matches this regular expression."},
			Arg{Key: "load", Type: String, Enum: []string{"domcontentloaded", "load", "networkidle"}, Flag: "load", FlagHelp: "wait: load, domcontentloaded or networkidle",
				Help: "Wait for a load state: domcontentloaded, load, or networkidle (loaded and no network request in flight for 500 ms)."},
			Arg{Key: "function", Type: String, Flag: "function", FlagHelp: "wait: a JavaScript predicate (needs agent.allowEval)",
				Help: `Wait until this JavaScript predicate is truthy, e.g. "() => window.app?.ready" (polled; a promise is awaited). Needs eval allowed on the appliance and an admin-scoped caller.`},
		)},
	{Name: "get", Tool: "browser_get", Title: "Read a value", Read: true, ToolReadOnly: true,
		Help:  "Read something from the page: an element's text, value, attribute (attr) or box; or the page's title, url, or the count of elements matching selector.",
		Usage: "get text|value|title|url|count|box [@eN|--selector S]   get attr NAME @eN",
		Args: args(targetArgs, one(
			Arg{Key: "what", Type: String, Required: true, Enum: []string{"text", "value", "attr", "title", "url", "count", "box"},
				Help: "What to read: text, value, attr (with attr), title, url, count (of selector matches) or box (position and size)."},
			Arg{Key: "attr", Type: String, Help: "Attribute name, with what=attr."},
		))},
	{Name: "is", Tool: "browser_is", Title: "Test an element", Read: true, ToolReadOnly: true,
		Help:  "Test whether an element is visible, enabled or checked.",
		Usage: "is visible|enabled|checked @eN",
		Args:  args(targetArgs, one(Arg{Key: "what", Type: String, Required: true, Enum: []string{"visible", "enabled", "checked"}, Help: "State to test: visible, enabled or checked."}))},
	{Name: "screenshot", Tool: "browser_screenshot", Title: "Screenshot", Read: true, ToolReadOnly: true,
		Help:  "Capture the visible part of the page as an image. Prefer browser_snapshot to find elements; use a screenshot to check the layout or read images.",
		Usage: "screenshot FILE [--format png|jpeg]",
		Args: one(Arg{Key: "format", Type: String, Enum: []string{"png", "jpeg"}, Help: "Image format: png (default) or jpeg (smaller).",
			Flag: "format", FlagDefault: "png", FlagHelp: "screenshot: png or jpeg"})},
	{Name: "dialog", Tool: "browser_dialog", Title: "Answer a dialog",
		Help:  "Accept or dismiss the open JavaScript dialog (alert, confirm, prompt, beforeunload); promptText answers a prompt. Fails with no_dialog when none is open.",
		Usage: "dialog accept|dismiss [--prompt TEXT]",
		Args: one(actionArg,
			Arg{Key: "accept", Type: Bool, Help: "True to accept (OK) the open JavaScript dialog, false to dismiss it (Cancel)."},
			Arg{Key: "promptText", Type: String, Help: "Text to answer a prompt() dialog with, when accepting.", Flag: "prompt", FlagHelp: "dialog: text for a prompt()"},
		)},
	{Name: "request_human", Tool: "request_human", Title: "Ask a person", Read: true,
		Help: "Ask a person to take over the session (log in, solve a CAPTCHA, confirm a payment, decide) and wait until they hand back or timeoutMs passes. Explain in reason what they should do. Take a new snapshot afterwards.",
		Args: one(
			Arg{Key: "reason", Type: String, Required: true, Help: `What the person should do and why, shown to them, e.g. "Log in with your account" or "Solve the CAPTCHA".`},
			Arg{Key: "timeoutMs", Type: Int, Help: "How long to wait for the person in milliseconds (default 300000)."},
		)},
	{Name: "upload", Tool: "browser_upload", Title: "Upload files",
		Help: "Set files on a file input (<input type=file>, by ref, selector, or role and name), as if a person chose them. The files must be in the session's upload area already; you give their plain names. Fails with not_found for a name not there.",
		Usage: "upload @eN FILE...                 local files are put in the session's upload\n" +
			"                                   area first; other names must be there already",
		Args: args(one(actionArg), targetArgs, one(Arg{Key: "files", Type: Strings, Required: true,
			Help: `Names of files in the session's upload area (a person or script puts them with PUT /api/v1/sessions/{id}/uploads/{name}); plain names such as "cv.pdf", no paths.`}))},
	{Name: "tabs", Tool: "browser_tabs", Title: "Tabs",
		Help:  "List the session's tabs (its own tab, which is streamed and driven, and popups the page opened), open a URL (op=new, in the session's own tab), or close a popup. Switching to another tab is not supported (unsupported): navigate to its URL instead.",
		Usage: "tabs | tabs new [URL] | tabs switch N|ID | tabs close N|ID",
		Args: one(actionArg,
			Arg{Key: "op", Type: String, Enum: []string{"list", "new", "switch", "close"},
				Help: "list (default): the session's tabs (the current one is streamed and driven; popups the page opens are followed); new: open url in a new tab and switch to it; switch: make a tab current (refs of the old page go stale: snapshot again); close: close a tab (closing the current one shows its opener or the tab used last)."},
			Arg{Key: "url", Type: String, Help: "With op=new: the URL to open (default about:blank)."},
			Arg{Key: "background", Type: Bool, Help: "With op=new: open the tab without switching to it."},
			Arg{Key: "index", Type: OptInt, Help: "With op=switch or close: the tab's index from op=list."},
			Arg{Key: "tabId", Type: String, Help: "With op=switch or close: the tab's id from op=list (instead of index)."},
		)},
	{Name: "cookies", Tool: "browser_cookies", Title: "Cookies",
		Help: "Read, set or clear the session's cookies (its own browser profile only). Values are [redacted] unless reveal is true.",
		Usage: "cookies [--name N] [--reveal]      cookies set NAME VALUE [--cookie-url U]\n" +
			"                                   [--domain D] [--path P] [--secure] [--http-only]\n" +
			"                                   [--same-site Lax]       cookies clear [NAME]",
		Args: one(actionArg,
			Arg{Key: "op", Type: String, Enum: []string{"get", "set", "clear"}, Help: "get (default): the session's cookies; set: set one cookie; clear: delete the cookie named name (with url or domain), or every cookie when no name is given."},
			Arg{Key: "name", Field: "cookie.name", Type: String, Help: "Cookie name (set; filter of get; the cookie to delete with clear).", Flag: "name"},
			Arg{Key: "value", Field: "cookie.value", Type: String, Help: "Cookie value, with op=set."},
			Arg{Key: "url", Field: "cookie.url", Type: String, Help: "URL the cookie belongs to (set, clear); default for set: the current page.", Flag: "cookie-url", FlagHelp: "cookies set/clear: the URL the cookie belongs to"},
			Arg{Key: "domain", Field: "cookie.domain", Type: String, Help: "Cookie domain (set, clear; filter of get).", Flag: "domain", FlagHelp: "cookies: the cookie's domain"},
			Arg{Key: "path", Field: "cookie.path", Type: String, Help: "Cookie path (set, clear).", Flag: "path", FlagHelp: "cookies set/clear: the cookie's path"},
			Arg{Key: "secure", Field: "cookie.secure", Type: Bool, Help: "Set a Secure cookie.", Flag: "secure", FlagHelp: "cookies set: a Secure cookie"},
			Arg{Key: "httpOnly", Field: "cookie.httpOnly", Type: Bool, Help: "Set an HttpOnly cookie.", Flag: "http-only", FlagHelp: "cookies set: an HttpOnly cookie"},
			Arg{Key: "sameSite", Field: "cookie.sameSite", Type: String, Enum: []string{"Strict", "Lax", "None"}, Help: "SameSite of a cookie to set: Strict, Lax or None.", Flag: "same-site", FlagHelp: "cookies set: Strict, Lax or None"},
			Arg{Key: "expires", Field: "cookie.expires", Type: Number, Help: "Expiry of a cookie to set, in seconds since the Unix epoch; omitted: a session cookie."},
			Arg{Key: "reveal", Type: Bool, Help: "With op=get: show cookie values (they are [redacted] by default). Ask only when you need a value.", Flag: "reveal", FlagHelp: "cookies, storage: show the values"},
		)},
	{Name: "storage", Tool: "browser_storage", Title: "Web storage",
		Help:  "Read, set or clear localStorage or sessionStorage of the current page's origin. Values are [redacted] unless reveal is true.",
		Usage: "storage local|session [get [KEY]] [--reveal]   storage local set KEY VALUE\nstorage local|session clear [KEY]",
		Args: one(actionArg,
			Arg{Key: "op", Type: String, Enum: []string{"get", "set", "clear"}, Help: "get (default): the items (or the item key); set: set key to value; clear: remove key, or every item when no key is given."},
			Arg{Key: "area", Type: String, Enum: []string{"local", "session"}, Help: "local (default) for localStorage or session for sessionStorage, of the current page's origin."},
			Arg{Key: "key", Type: String, Help: "Item key."},
			Arg{Key: "value", Type: String, Help: "Item value, with op=set."},
			Arg{Key: "reveal", Type: Bool, Help: "With op=get: show the values (they are [redacted] by default). Ask only when you need a value.", Flag: "reveal"},
		)},
	{Name: "eval", Tool: "browser_eval", Title: "Run JavaScript",
		Help:  "Evaluate a JavaScript expression in the page and return its JSON value. Off by default: the appliance must allow it (agent.allowEval) and the caller needs the admin scope, else forbidden. Prefer snapshots and the other tools.",
		Usage: "eval EXPRESSION                    (needs agent.allowEval and an admin-scoped token)",
		Args: one(actionArg, Arg{Key: "expression", Type: String, Required: true,
			Help: "JavaScript expression evaluated in the page; its JSON value is returned (a promise is awaited; at most 64 KiB, else truncated). Off unless the appliance allows eval; admin scope only."})},
}

// Commands names every command, in the table's order.
var Commands = func() []string {
	out := make([]string, len(Table))
	for i, c := range Table {
		out[i] = c.Name
	}
	return out
}()

// Lookup finds a command by its name or CLI alias, in any case.
func Lookup(name string) (*Command, bool) {
	for i := range Table {
		c := &Table[i]
		if strings.EqualFold(c.Name, name) {
			return c, true
		}
		for _, a := range c.Aliases {
			if strings.EqualFold(a, name) {
				return c, true
			}
		}
	}
	return nil, false
}

// AllArgs is the command's arguments with TimeoutArg first unless the
// command describes its own timeoutMs.
func (c *Command) AllArgs() []Arg {
	for _, a := range c.Args {
		if a.Key == TimeoutArg.Key {
			return c.Args
		}
	}
	return append([]Arg{TimeoutArg}, c.Args...)
}

// Set puts an argument's value into a request being built as JSON, at its
// Field. A zero value of a plain type is left out (it means "not given");
// absent optional numbers arrive as nil. A true Switch changes the command.
func (a Arg) Set(req map[string]any, v any) {
	if v == nil {
		return
	}
	switch a.Type {
	case String, Bool, Int, Number:
		if isZero(v) {
			return
		}
	}
	if a.Switch != "" {
		if b, _ := v.(bool); b {
			req["command"] = a.Switch
		}
		return
	}
	field := a.Field
	if field == "" {
		field = a.Key
	}
	SetPath(req, field, v)
}

// SetPath puts v at a key ("url") or a path ("cookie.name") of a request
// being built as JSON.
func SetPath(req map[string]any, field string, v any) {
	m := req
	parts := strings.Split(field, ".")
	for _, p := range parts[:len(parts)-1] {
		sub, ok := m[p].(map[string]any)
		if !ok {
			sub = map[string]any{}
			m[p] = sub
		}
		m = sub
	}
	m[parts[len(parts)-1]] = v
}

func isZero(v any) bool {
	switch v := v.(type) {
	case string:
		return v == ""
	case bool:
		return !v
	case int:
		return v == 0
	case int64:
		return v == 0
	case float64:
		return v == 0
	}
	return false
}

// RequestOf decodes a request built as JSON (with Arg.Set).
func RequestOf(m map[string]any) (Request, error) {
	var r Request
	b, err := json.Marshal(m)
	if err != nil {
		return r, err
	}
	err = json.Unmarshal(b, &r)
	return r, err
}

// reads are the commands that run while a person holds control.
var reads = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range Table {
		if c.Read {
			m[c.Name] = true
		}
	}
	return m
}()
