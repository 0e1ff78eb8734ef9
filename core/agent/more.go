package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/cdproto/storage"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/snapshot"
)

// ---- Upload area -------------------------------------------------------

// Upload area limits: one file, and how many files a session holds.
const (
	MaxUploadBytes = 64 << 20
	MaxUploadFiles = 64
)

// Upload is a file in a session's upload area.
type Upload struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// CheckUploadName accepts a plain file name for the upload area: no path
// (no "/", "\", ".."), not hidden, no control characters, at most 255
// bytes. Anything else is invalid_argument.
func CheckUploadName(name string) error {
	bad := name == "" || len(name) > 255 || !utf8.ValidString(name) || strings.HasPrefix(name, ".") ||
		strings.ContainsAny(name, `/\`) || filepath.IsAbs(name) || name != filepath.Base(name) || strings.Contains(name, "..")
	for _, c := range name {
		bad = bad || unicode.IsControl(c)
	}
	if bad {
		return errorf(action.CodeInvalidArgument, false, "a plain file name such as report.pdf: no path, no \"..\", not starting with \".\"", "bad upload file name")
	}
	return nil
}

// ListUploads lists the files in the session's upload area.
func ListUploads(s *session.Session) ([]Upload, error) {
	dir, err := s.UploadDir()
	if err != nil {
		return nil, errorf(CodeNotReady, false, "", "the session has no upload area (it ended)")
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("agent: list uploads: %w", err)
	}
	out := []Upload{}
	for _, e := range ents {
		if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out = append(out, Upload{Name: e.Name(), Size: fi.Size(), Modified: fi.ModTime().UTC()})
		}
	}
	return out, nil
}

// SaveUpload stores r as name in the session's upload area (replacing a
// file of that name), at most MaxUploadBytes; the area holds at most
// MaxUploadFiles files. The file appears whole or not at all.
func SaveUpload(s *session.Session, name string, r io.Reader) (Upload, error) {
	if err := CheckUploadName(name); err != nil {
		return Upload{}, err
	}
	list, err := ListUploads(s)
	if err != nil {
		return Upload{}, err
	}
	if len(list) >= MaxUploadFiles {
		exists := false
		for _, u := range list {
			exists = exists || u.Name == name
		}
		if !exists {
			return Upload{}, errorf(action.CodeTooLarge, true, "", "the upload area holds at most %d files", MaxUploadFiles)
		}
	}
	dir, err := s.UploadDir()
	if err != nil {
		return Upload{}, errorf(CodeNotReady, false, "", "the session has no upload area (it ended)")
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return Upload{}, fmt.Errorf("agent: upload area: %w", err)
	}
	defer root.Close()
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".part-" + hex.EncodeToString(rnd[:])
	f, err := root.OpenFile(tmp, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return Upload{}, fmt.Errorf("agent: upload: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(r, MaxUploadBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > MaxUploadBytes {
		err = errorf(action.CodeTooLarge, false, "", "a file may have at most %d bytes", MaxUploadBytes)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		var e *Error
		if errors.As(err, &e) {
			return Upload{}, e
		}
		return Upload{}, fmt.Errorf("agent: upload: %w", err)
	}
	return Upload{Name: name, Size: n, Modified: time.Now().UTC()}, nil
}

// upload sets files of the upload area on an <input type=file>.
func (d *driver) upload(ctx context.Context, r Request) (*Result, error) {
	if len(r.Files) == 0 || len(r.Files) > MaxUploadFiles {
		return nil, errorf(action.CodeInvalidArgument, false, "files: 1..64 names of files in the session's upload area", "no files to upload")
	}
	for _, name := range r.Files {
		if err := CheckUploadName(name); err != nil {
			return nil, err
		}
	}
	dir, err := d.s.UploadDir()
	if err != nil {
		return nil, errorf(CodeNotReady, false, "", "the session has no upload area (it ended)")
	}
	paths := make([]string, 0, len(r.Files))
	files := make([]Upload, 0, len(r.Files))
	for _, name := range r.Files {
		p := filepath.Join(dir, name)
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() {
			return nil, errorf(snapshot.CodeNotFound, false, "put it first with PUT /api/v1/sessions/{id}/uploads/{name}; list them with GET …/uploads",
				"no file %q in the session's upload area", name)
		}
		paths = append(paths, p)
		files = append(files, Upload{Name: name, Size: fi.Size(), Modified: fi.ModTime().UTC()})
	}
	el, what, err := d.element(ctx, r)
	if err != nil {
		return nil, err
	}
	var kind struct {
		File     bool `json:"file"`
		Multiple bool `json:"multiple"`
		Disabled bool `json:"disabled"`
	}
	if err := callOn(ctx, el, `function() { return {file: this.tagName === "INPUT" && this.type === "file", multiple: !!this.multiple, disabled: !!this.disabled}; }`, &kind); err != nil {
		return nil, err
	}
	switch {
	case !kind.File:
		return nil, errorf(action.CodeInvalidArgument, false, "target an <input type=file>", "%s is not a file input", what)
	case kind.Disabled:
		return nil, errorf(action.CodeInvalidArgument, true, "", "%s is disabled", what)
	case len(paths) > 1 && !kind.Multiple:
		return nil, errorf(action.CodeInvalidArgument, false, "give one file", "%s takes one file", what)
	}
	if _, err := cdp.Call(ctx, el.Session, dom.SetFileInputFiles, dom.SetFileInputFilesParams{Files: paths, BackendNodeID: el.BackendNodeID}); err != nil {
		return nil, fmt.Errorf("agent: set files: %w", err)
	}
	return &Result{OK: true, Summary: fmt.Sprintf("set %d file(s) on %s", len(paths), what), Data: map[string]any{"files": files}}, nil
}

// callOn runs fn on the element and decodes its JSON result into out.
func callOn(ctx context.Context, el *snapshot.Element, fn string, out any) error {
	obj, err := cdp.Call(ctx, el.Session, dom.ResolveNode, dom.ResolveNodeParams{BackendNodeID: el.BackendNodeID})
	if err != nil || obj.Object == nil {
		return errorf(snapshot.CodeStaleRef, true, "take a new snapshot", "the element is gone")
	}
	defer cdp.Call(context.WithoutCancel(ctx), el.Session, runtime.ReleaseObject, runtime.ReleaseObjectParams{ObjectID: obj.Object.ObjectID})
	yes := true
	res, err := cdp.Call(ctx, el.Session, runtime.CallFunctionOn, runtime.CallFunctionOnParams{
		FunctionDeclaration: fn, ObjectID: obj.Object.ObjectID, ReturnByValue: &yes,
	})
	if err != nil {
		return fmt.Errorf("agent: call on element: %w", err)
	}
	if res.ExceptionDetails != nil || res.Result == nil || json.Unmarshal(res.Result.Value, out) != nil {
		return errorf(snapshot.CodeStaleRef, true, "take a new snapshot", "the element cannot be read")
	}
	return nil
}

// ---- Tabs ----------------------------------------------------------------

// Tab is a page of the session's browser context: the current one (the
// one streamed and driven), tabs opened with tabs new and popups the pages
// opened. Indices follow the order the session saw the tabs, so they stay
// put across switches.
type Tab struct {
	Index    int    `json:"index"`
	ID       string `json:"id"`
	URL      string `json:"url"`
	Title    string `json:"title"`
	Current  bool   `json:"current"`
	OpenerID string `json:"openerId,omitempty"`
}

// CodeTooManyTabs: tabs new over the session's limit (session.MaxTabs).
const CodeTooManyTabs = "too_many_tabs"

// listTabs lists the session's tabs.
func (d *driver) listTabs() []Tab {
	out := []Tab{}
	for i, t := range d.s.Tabs() {
		out = append(out, Tab{Index: i, ID: t.ID, URL: snapshot.RedactTokens(t.URL), Title: snapshot.RedactTokens(t.Title),
			Current: t.Current, OpenerID: t.OpenerID})
	}
	return out
}

// findTab resolves the request's index or tabId.
func findTab(tabs []Tab, r Request) (Tab, error) {
	if (r.Index == nil) == (r.TabID == "") {
		return Tab{}, errorf(action.CodeInvalidArgument, false, "give index or tabId from tabs list", "which tab?")
	}
	for _, t := range tabs {
		if (r.Index != nil && t.Index == *r.Index) || (r.TabID != "" && t.ID == r.TabID) {
			return t, nil
		}
	}
	return Tab{}, errorf(snapshot.CodeNotFound, true, "list them with tabs list", "no such tab")
}

// tabErr maps the session's tab errors to the API's codes.
func tabErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, session.ErrNoTab):
		return errorf(snapshot.CodeNotFound, true, "list them with tabs list", "no such tab (it closed)")
	case errors.Is(err, session.ErrTooManyTabs):
		return errorf(CodeTooManyTabs, true, "close a tab first (tabs close)", "the session holds at most %d tabs", session.MaxTabs)
	case errors.Is(err, session.ErrLastTab):
		return errorf(CodeUnsupported, false, "close the session instead: DELETE /api/v1/sessions/{id}", "the session's last tab cannot be closed")
	case errors.Is(err, session.ErrNotReady):
		return errorf(CodeNotReady, true, "", "the session is not ready")
	}
	return err
}

// tabs: list, new, switch, close. The current tab is the one streamed to
// viewers and driven by people and agents; new opens a tab and switches to
// it (unless background), switch changes the current tab (pageRevision
// rises: refs and coordinates of the old page are stale), close closes a
// tab (the current one is left first for its opener or the tab used most
// recently).
func (d *driver) tabs(ctx context.Context, r Request) (*Result, error) {
	op := strings.ToLower(r.Op)
	if op == "" {
		op = "list"
	}
	switch op {
	case "list":
		tabs := d.listTabs()
		return &Result{OK: true, Summary: fmt.Sprintf("%d tab(s)", len(tabs)), Data: map[string]any{"tabs": tabs}}, nil
	case "new":
		t, err := d.s.TabNew(ctx, r.URL, r.Background)
		if err != nil {
			return nil, tabErr(err)
		}
		sum := "opened a new tab"
		if t.Current {
			sum += " and switched to it: " + d.loaded(ctx)
		} else {
			sum += " in the background"
		}
		return &Result{OK: true, Summary: sum, Data: map[string]any{"tabId": t.ID, "tabs": d.listTabs()}}, nil
	case "switch", "close":
		tabs := d.listTabs()
		t, err := findTab(tabs, r)
		if err != nil {
			return nil, err
		}
		if op == "switch" {
			if t.Current {
				return &Result{OK: true, Summary: "already the current tab", Data: map[string]any{"tabs": tabs}}, nil
			}
			if err := d.s.SwitchPage(ctx, t.ID); err != nil {
				return nil, tabErr(err)
			}
			return &Result{OK: true, Summary: fmt.Sprintf("switched to tab %d: %s", t.Index, d.loaded(ctx)), Data: map[string]any{"tabs": d.listTabs()}}, nil
		}
		if err := d.s.CloseTab(ctx, t.ID); err != nil {
			return nil, tabErr(err)
		}
		d.sv.snap.Forget(tabKey(t.ID)) // its refs go with it
		return &Result{OK: true, Summary: fmt.Sprintf("closed tab %d", t.Index), Data: map[string]any{"tabs": d.listTabs()}}, nil
	}
	return nil, errorf(action.CodeInvalidArgument, false, "op: list, new, switch, close", "tabs %q", r.Op)
}

// tabKey names a tab for the Snapshotter, which keys pages by target id.
type tabKey string

func (k tabKey) Target() *chromedp.Target { return &chromedp.Target{TargetID: target.ID(k)} }

// loaded waits until the current page's document has loaded, so the
// agent's next snapshot sees it.
func (d *driver) loaded(ctx context.Context) string {
	for ctx.Err() == nil {
		var state string
		if pg := d.s.Page(); pg != nil && pg.Evaluate(ctx, "document.readyState", &state) == nil && state == "complete" {
			return "loaded"
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "still loading"
}

// onBrowser runs fn with a chromedp context on the session's browser over
// a connection of its own, for the commands of the browser endpoint (the
// page's session may not name a browser context).
func (d *driver) onBrowser(ctx context.Context, fn func(bctx context.Context) error) error {
	url := d.s.BrowserWSURL()
	if url == "" {
		return errorf(CodeNotReady, true, "", "the session's browser is not reachable")
	}
	actx, acancel := remote.NewAllocator(context.Background(), url, remote.NoModifyURL)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	stop := context.AfterFunc(ctx, bcancel)
	defer stop()
	return fn(bctx)
}

// ---- Cookies and storage --------------------------------------------------

// CookieInput is a cookie to set, or (get, clear) a filter by name and
// domain.
type CookieInput struct {
	Name     string  `json:"name,omitempty"`
	Value    string  `json:"value,omitempty"`
	URL      string  `json:"url,omitempty"`
	Domain   string  `json:"domain,omitempty"`
	Path     string  `json:"path,omitempty"`
	Secure   bool    `json:"secure,omitempty"`
	HTTPOnly bool    `json:"httpOnly,omitempty"`
	SameSite string  `json:"sameSite,omitempty"` // Strict, Lax, None
	Expires  float64 `json:"expires,omitempty"`  // seconds since the epoch; 0 = a session cookie
}

// Cookie is a cookie of the session's browser context; Value is
// "[redacted]" unless asked for with reveal.
type Cookie struct {
	Name        string  `json:"name"`
	Value       string  `json:"value"`
	ValueLength int     `json:"valueLength"`
	Domain      string  `json:"domain"`
	Path        string  `json:"path"`
	Expires     float64 `json:"expires,omitempty"`
	Session     bool    `json:"session"`
	Secure      bool    `json:"secure"`
	HTTPOnly    bool    `json:"httpOnly"`
	SameSite    string  `json:"sameSite,omitempty"`
}

// Redaction of values an agent did not ask to see.
const redacted = "[redacted]"

// Cookie and storage limits.
const (
	maxCookiesListed = 1000
	maxCookieValue   = 4096
	maxStorageItems  = 1000
	maxStorageBytes  = 64 << 10
)

func (d *driver) cookies(ctx context.Context, r Request) (*Result, error) {
	// The cookie jar is the browser context's: Storage.* on the browser
	// endpoint with its id (on the page's session they would reach the
	// default context's). A persistent profile's own Chromium has only the
	// default context, which is the session's.
	pg := d.s.Page()
	bctx := cdp.BrowserContextID(pg.BrowserContextID())
	var c CookieInput
	if r.Cookie != nil {
		c = *r.Cookie
	}
	switch strings.ToLower(r.Op) {
	case "", "get":
		var res storage.GetCookiesResult
		err := d.onBrowser(ctx, func(b context.Context) (err error) {
			res, err = chromedp.CallBrowser(b, storage.GetCookies, storage.GetCookiesParams{BrowserContextID: bctx})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("agent: get cookies: %w", err)
		}
		out := []Cookie{}
		for _, k := range res.Cookies {
			if k == nil || (c.Name != "" && k.Name != c.Name) || (c.Domain != "" && strings.TrimPrefix(k.Domain, ".") != strings.TrimPrefix(c.Domain, ".")) {
				continue
			}
			if len(out) >= maxCookiesListed {
				break
			}
			v := redacted
			if r.Reveal {
				v = k.Value
			}
			out = append(out, Cookie{Name: k.Name, Value: v, ValueLength: len(k.Value), Domain: k.Domain, Path: k.Path,
				Expires: max(k.Expires, 0), Session: k.Session, Secure: k.Secure, HTTPOnly: k.HTTPOnly, SameSite: string(k.SameSite)})
		}
		sum := fmt.Sprintf("%d cookie(s)", len(out))
		if !r.Reveal && len(out) > 0 {
			sum += ", values redacted (reveal: true shows them)"
		}
		return &Result{OK: true, Summary: sum, Data: map[string]any{"cookies": out, "revealed": r.Reveal}}, nil
	case "set":
		if c.Name == "" || len(c.Value) > maxCookieValue || len(c.Name) > 256 {
			return nil, errorf(action.CodeInvalidArgument, false, "cookie: {name, value (at most 4096 bytes), url or domain, path, secure, httpOnly, sameSite, expires}", "bad cookie")
		}
		p := &network.CookieParam{Name: c.Name, Value: c.Value, URL: c.URL, Domain: c.Domain, Path: c.Path, Secure: c.Secure, HTTPOnly: c.HTTPOnly,
			Expires: cdp.TimeSinceEpoch(c.Expires)}
		switch strings.ToLower(c.SameSite) {
		case "":
		case "strict":
			p.SameSite = network.CookieSameSiteStrict
		case "lax":
			p.SameSite = network.CookieSameSiteLax
		case "none":
			p.SameSite = network.CookieSameSiteNone
		default:
			return nil, errorf(action.CodeInvalidArgument, false, "sameSite: Strict, Lax or None", "bad sameSite")
		}
		if p.URL == "" && p.Domain == "" {
			// The current page's URL scopes it.
			var href string
			if err := pg.Evaluate(ctx, "location.href", &href); err != nil {
				return nil, err
			}
			if !strings.HasPrefix(href, "http://") && !strings.HasPrefix(href, "https://") {
				return nil, errorf(action.CodeInvalidArgument, false, "give cookie.url or cookie.domain", "the current page has no http(s) origin")
			}
			p.URL = href
		}
		err := d.onBrowser(ctx, func(b context.Context) error {
			_, err := chromedp.CallBrowser(b, storage.SetCookies, storage.SetCookiesParams{Cookies: []*network.CookieParam{p}, BrowserContextID: bctx})
			return err
		})
		var ce *cdproto.Error
		if errors.As(err, &ce) {
			return nil, errorf(action.CodeInvalidArgument, false, "check the cookie's name, domain, url and flags", "the browser refused the cookie")
		}
		if err != nil {
			return nil, fmt.Errorf("agent: set cookie: %w", err)
		}
		return &Result{OK: true, Summary: "set a cookie"}, nil
	case "clear":
		if c.Name != "" {
			// Network.deleteCookies on the page's session reaches its
			// context's jar.
			if c.URL == "" && c.Domain == "" {
				return nil, errorf(action.CodeInvalidArgument, false, "give cookie.url or cookie.domain with cookie.name, or no cookie to clear all", "which cookie?")
			}
			if _, err := cdp.Call(ctx, pg.Target(), network.DeleteCookies, network.DeleteCookiesParams{Name: c.Name, URL: c.URL, Domain: c.Domain, Path: c.Path}); err != nil {
				return nil, fmt.Errorf("agent: delete cookies: %w", err)
			}
			return &Result{OK: true, Summary: "deleted the matching cookies"}, nil
		}
		err := d.onBrowser(ctx, func(b context.Context) error {
			_, err := chromedp.CallBrowser(b, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: bctx})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("agent: clear cookies: %w", err)
		}
		return &Result{OK: true, Summary: "cleared every cookie of the session"}, nil
	}
	return nil, errorf(action.CodeInvalidArgument, false, "op: get, set, clear", "cookies %q", r.Op)
}

// storageJS does one op on localStorage or sessionStorage of the main
// document's origin.
const storageJS = `((a) => {
	let s;
	try { s = a.area === "session" ? window.sessionStorage : window.localStorage; } catch (e) { return {err: "denied"}; }
	if (!s) return {err: "denied"};
	const origin = location.origin;
	switch (a.op) {
	case "get": {
		const items = [];
		let bytes = 0, truncated = false;
		const keys = a.key !== "" ? [a.key] : Array.from({length: s.length}, (_, i) => s.key(i));
		for (const k of keys) {
			const v = s.getItem(k);
			if (v === null) continue;
			if (items.length >= a.maxItems || bytes + k.length + (a.reveal ? v.length : 0) > a.maxBytes) { truncated = true; break; }
			bytes += k.length + (a.reveal ? v.length : 0);
			items.push({key: k, value: a.reveal ? v : null, valueLength: v.length});
		}
		return {origin, items, truncated};
	}
	case "set": s.setItem(a.key, a.value); return {origin};
	case "clear": if (a.key !== "") s.removeItem(a.key); else s.clear(); return {origin};
	}
	return {err: "op"};
})`

// StorageItem is one item of localStorage or sessionStorage; Value is
// "[redacted]" unless asked for with reveal.
type StorageItem struct {
	Key         string `json:"key"`
	Value       string `json:"value"`
	ValueLength int    `json:"valueLength"`
}

func (d *driver) storage(ctx context.Context, r Request) (*Result, error) {
	area := strings.ToLower(r.Area)
	switch area {
	case "", "local":
		area = "local"
	case "session":
	default:
		return nil, errorf(action.CodeInvalidArgument, false, "area: local or session", "storage area %q", r.Area)
	}
	op := strings.ToLower(r.Op)
	switch op {
	case "":
		op = "get"
	case "get", "clear":
	case "set":
		if r.Key == "" {
			return nil, errorf(action.CodeInvalidArgument, false, "give key and value", "storage set needs a key")
		}
		if len(r.Key)+len(r.Value) > maxStorageBytes {
			return nil, errorf(action.CodeTooLarge, false, "", "storage set: key and value over %d bytes", maxStorageBytes)
		}
	default:
		return nil, errorf(action.CodeInvalidArgument, false, "op: get, set, clear", "storage %q", r.Op)
	}
	args, _ := json.Marshal(map[string]any{"area": area, "op": op, "key": r.Key, "value": r.Value, "reveal": r.Reveal,
		"maxItems": maxStorageItems, "maxBytes": maxStorageBytes})
	var out struct {
		Err    string `json:"err"`
		Origin string `json:"origin"`
		Items  []struct {
			Key         string  `json:"key"`
			Value       *string `json:"value"`
			ValueLength int     `json:"valueLength"`
		} `json:"items"`
		Truncated bool `json:"truncated"`
	}
	if err := d.s.Page().Evaluate(ctx, storageJS+"("+string(args)+")", &out); err != nil {
		var ae *Error
		if errors.As(err, &ae) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, errorf(action.CodeInvalidArgument, true, "storage needs an http(s) page", "the page's storage is not reachable")
	}
	if out.Err != "" {
		return nil, errorf(action.CodeInvalidArgument, true, "storage needs an http(s) page", "this page has no %sStorage", area)
	}
	res := &Result{OK: true, Data: map[string]any{"origin": out.Origin, "area": area}}
	switch op {
	case "get":
		items := make([]StorageItem, 0, len(out.Items))
		for _, it := range out.Items {
			v := redacted
			if r.Reveal && it.Value != nil {
				v = *it.Value
			}
			items = append(items, StorageItem{Key: it.Key, Value: v, ValueLength: it.ValueLength})
		}
		if r.Key != "" && len(items) == 0 {
			return nil, errorf(snapshot.CodeNotFound, true, "", "no %sStorage item of that key", area)
		}
		res.Data.(map[string]any)["items"] = items
		res.Data.(map[string]any)["truncated"] = out.Truncated
		res.Data.(map[string]any)["revealed"] = r.Reveal
		res.Summary = fmt.Sprintf("%d item(s) of %sStorage", len(items), area)
		if !r.Reveal && len(items) > 0 {
			res.Summary += ", values redacted (reveal: true shows them)"
		}
	case "set":
		res.Summary = "set an item of " + area + "Storage"
	case "clear":
		res.Summary = "cleared " + area + "Storage"
		if r.Key != "" {
			res.Summary = "removed an item of " + area + "Storage"
		}
	}
	return res, nil
}

// ---- Eval ------------------------------------------------------------------

// maxEvalBytes caps the JSON of an eval result.
const maxEvalBytes = 64 << 10

// evalAllowed: the appliance allows it (agent.allowEval) and the caller
// holds the admin scope.
func (d *driver) evalAllowed(ctx context.Context, what string) error {
	if !d.sv.currentPolicy().AllowEval {
		return errorf(CodeForbidden, false, "an operator may allow it with the config key agent.allowEval: true (admin-scoped callers only)",
			"%s is turned off on this appliance", what)
	}
	if p, ok := access.FromContext(ctx); !ok || !p.Has(access.ScopeAdmin) {
		return errorf(CodeForbidden, false, "use an admin's token with the admin scope (agent.allowEval is on)", "%s needs the admin scope", what)
	}
	return nil
}

// evalTimeout leaves the page's script at most what is left of ctx, so a
// runaway loop is stopped in the renderer, not only abandoned here.
func evalTimeout(ctx context.Context) runtime.TimeDelta {
	dl, ok := ctx.Deadline()
	if !ok {
		return runtime.TimeDelta(maxTimeout.Milliseconds())
	}
	return runtime.TimeDelta(max(time.Until(dl).Milliseconds()-50, 10))
}

func (d *driver) eval(ctx context.Context, r Request) (*Result, error) {
	if err := d.evalAllowed(ctx, "eval"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.Expression) == "" || len(r.Expression) > maxEvalBytes {
		return nil, errorf(action.CodeInvalidArgument, false, `expression: JavaScript such as "document.title" (at most 64 KiB)`, "no expression")
	}
	yes := true
	out, err := cdp.Call(ctx, d.s.Page().Target(), runtime.Evaluate, runtime.EvaluateParams{
		Expression: r.Expression, ReturnByValue: &yes, AwaitPromise: &yes, Timeout: evalTimeout(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("agent: eval: %w", err)
	}
	if out.ExceptionDetails != nil {
		return nil, errorf(action.CodeInvalidArgument, true, "fix the expression", "the expression threw: %s", exceptionText(out.ExceptionDetails))
	}
	data := map[string]any{"value": nil, "truncated": false}
	if out.Result != nil {
		data["type"] = string(out.Result.Type)
		raw := []byte(out.Result.Value)
		switch {
		case len(raw) > maxEvalBytes:
			cut := raw[:maxEvalBytes]
			for len(cut) > 0 && !utf8.Valid(cut) {
				cut = cut[:len(cut)-1]
			}
			data["value"], data["truncated"] = string(cut), true
		case len(raw) > 0:
			data["value"] = json.RawMessage(raw)
		case out.Result.UnserializableValue != "":
			data["value"] = string(out.Result.UnserializableValue)
		}
	}
	sum := "evaluated"
	if data["truncated"] == true {
		sum += fmt.Sprintf("; the value's JSON was cut at %d bytes (value is a string)", maxEvalBytes)
	}
	return &Result{OK: true, Summary: sum, Data: data}, nil
}

// exceptionText is a short description of a page exception.
func exceptionText(e *runtime.ExceptionDetails) string {
	s := e.Text
	if e.Exception != nil && e.Exception.Description != "" {
		s = e.Exception.Description
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] // the message, not the stack
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// ---- Wait ------------------------------------------------------------------

// Load states of wait.
const (
	LoadDOMContentLoaded = "domcontentloaded"
	LoadLoad             = "load"
	LoadNetworkIdle      = "networkidle"
)

// networkQuiet is how long no request may be in flight for networkidle.
const networkQuiet = 500 * time.Millisecond

// predicateJS wraps a wait function: an expression, or a function to call;
// a promise is awaited; the answer is its truthiness.
func predicateJS(src string) string {
	return "(async () => { let v = (\n" + src + "\n); if (typeof v === \"function\") v = v(); return !!(await v); })()"
}

// wait waits until every condition holds: the page conditions of
// snapshot.Wait, a load state, a JavaScript predicate.
func (d *driver) wait(ctx context.Context, r Request) (*Result, error) {
	w := snapshot.WaitFor{Selector: r.Selector, Text: r.Text, URLContains: r.URL}
	if r.What == "visible" {
		w.Visible = true
	}
	if r.What == "hidden" {
		w.Hidden, w.Selector = r.Selector, ""
	}
	if r.Value != "" {
		re, err := regexp.Compile(r.Value)
		if err != nil {
			return nil, errorf(action.CodeInvalidArgument, false, "", "bad URL pattern: %v", err)
		}
		w.URLPattern = re
	}
	pageConds := w.Selector != "" || w.Hidden != "" || w.Text != "" || w.URLContains != "" || w.URLPattern != nil
	load := strings.ToLower(r.Load)
	switch load {
	case "", LoadLoad, LoadDOMContentLoaded, LoadNetworkIdle:
	default:
		return nil, errorf(action.CodeInvalidArgument, false, "load: load, domcontentloaded or networkidle", "load state %q", r.Load)
	}
	if r.Function != "" {
		if err := d.evalAllowed(ctx, "wait function"); err != nil {
			return nil, err
		}
		if len(r.Function) > maxEvalBytes {
			return nil, errorf(action.CodeInvalidArgument, false, "", "function over 64 KiB")
		}
	}
	if load == "" && r.Function == "" {
		if !pageConds {
			return nil, errorf(action.CodeInvalidArgument, false, "give text, selector, url, value (URL regexp), load or function", "no wait condition")
		}
		return waitResult(snapshot.Wait(ctx, d.page(ctx), w))
	}
	start := time.Now()
	var nt *netTracker
	if load == LoadNetworkIdle {
		var err error
		if nt, err = d.network(ctx); err != nil {
			return nil, err
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last []snapshot.Condition
	var lastPage *snapshot.WaitResult
	for {
		conds, err := d.moreConditions(ctx, load, r.Function, nt)
		if err != nil {
			return nil, err
		}
		if conds != nil {
			last = conds
		}
		if conds != nil && allMet(conds) {
			if !pageConds {
				return combined(true, start, conds, nil), nil
			}
			wr, err := snapshot.Wait(ctx, d.page(ctx), w)
			if wr != nil {
				lastPage = wr
			}
			if err != nil && snapshot.CodeOf(err) != snapshot.CodeTimeout {
				return nil, err
			}
			if err == nil {
				// Still true now that the page conditions hold?
				again, err := d.moreConditions(ctx, load, r.Function, nt)
				if err != nil {
					return nil, err
				}
				if again != nil && allMet(again) {
					return combined(true, start, again, wr), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if pageConds && lastPage == nil {
				// The page conditions' state for the report.
				qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
				lastPage, _ = snapshot.Wait(qctx, d.page(qctx), w)
				cancel()
			}
			return combined(false, start, last, lastPage), nil
		case <-tick.C:
		}
	}
}

func waitResult(wr *snapshot.WaitResult, err error) (*Result, error) {
	if wr != nil && snapshot.CodeOf(err) == snapshot.CodeTimeout {
		// A wait that runs out is a result, not a loss: it says what held.
		return &Result{OK: false, Summary: "timed out", Data: wr}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, Summary: "conditions met", Data: wr}, nil
}

func allMet(cs []snapshot.Condition) bool {
	for _, c := range cs {
		if !c.Met {
			return false
		}
	}
	return true
}

// combined joins the load and function conditions with the page's.
func combined(met bool, start time.Time, more []snapshot.Condition, page *snapshot.WaitResult) *Result {
	wr := &snapshot.WaitResult{Met: met, Conditions: append([]snapshot.Condition{}, more...), Elapsed: time.Since(start)}
	if page != nil {
		wr.Conditions = append(wr.Conditions, page.Conditions...)
		wr.URL = page.URL
	}
	if !met {
		wr.Met = false
		return &Result{OK: false, Summary: "timed out", Data: wr}
	}
	return &Result{OK: true, Summary: "conditions met", Data: wr}
}

// moreConditions evaluates the load state and the predicate once. nil
// conditions: the page could not be asked now (navigating); try again.
func (d *driver) moreConditions(ctx context.Context, load, fn string, nt *netTracker) ([]snapshot.Condition, error) {
	var out []snapshot.Condition
	pg := d.s.Page()
	if load != "" {
		var state string
		if err := pg.Evaluate(ctx, "document.readyState", &state); err != nil {
			return nil, nil
		}
		c := snapshot.Condition{Name: "load", Want: load, Detail: "readyState " + state}
		switch load {
		case LoadDOMContentLoaded:
			c.Met = state == "interactive" || state == "complete"
		case LoadLoad:
			c.Met = state == "complete"
		case LoadNetworkIdle:
			n, quiet := nt.state()
			c.Met = state == "complete" && n == 0 && quiet >= networkQuiet
			c.Detail += ", " + strconv.Itoa(n) + " request(s) in flight"
		}
		out = append(out, c)
	}
	if fn != "" {
		yes := true
		res, err := cdp.Call(ctx, pg.Target(), runtime.Evaluate, runtime.EvaluateParams{
			Expression: predicateJS(fn), ReturnByValue: &yes, AwaitPromise: &yes, Timeout: evalTimeout(ctx),
		})
		if err != nil {
			return nil, nil
		}
		c := snapshot.Condition{Name: "function", Want: "truthy"}
		if res.ExceptionDetails != nil {
			if res.ExceptionDetails.Exception != nil && res.ExceptionDetails.Exception.ClassName == "SyntaxError" {
				return nil, errorf(action.CodeInvalidArgument, false, "fix the function", "the function does not parse: %s", exceptionText(res.ExceptionDetails))
			}
			c.Detail = "threw: " + exceptionText(res.ExceptionDetails)
		} else if res.Result != nil {
			c.Met = string(res.Result.Value) == "true"
		}
		out = append(out, c)
	}
	return out, nil
}

// netTracker counts the page's requests in flight (Network events of the
// page session), for networkidle.
type netTracker struct {
	mu       sync.Mutex
	inflight map[network.RequestID]struct{}
	quietAt  time.Time // when the count last became 0
	stop     func()
	page     *browser.Page // the tab it listens to
}

func (n *netTracker) onEvent(ev any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		if len(n.inflight) < 10000 {
			n.inflight[e.RequestID] = struct{}{}
		}
	case *network.EventLoadingFinished:
		n.done(e.RequestID)
	case *network.EventLoadingFailed:
		n.done(e.RequestID)
	}
}

func (n *netTracker) done(id network.RequestID) {
	if _, ok := n.inflight[id]; !ok {
		return
	}
	delete(n.inflight, id)
	if len(n.inflight) == 0 {
		n.quietAt = time.Now()
	}
}

// state: requests in flight, and for how long none have been.
func (n *netTracker) state() (int, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.inflight) > 0 {
		return len(n.inflight), 0
	}
	return 0, time.Since(n.quietAt)
}

// network starts the driver's tracker once: listen, then enable the
// Network domain (response bodies are not kept). Requests that began
// before the first networkidle wait are not known to it.
func (d *driver) network(ctx context.Context) (*netTracker, error) {
	pg := d.s.Page()
	if d.net != nil && d.net.page == pg {
		return d.net, nil
	}
	if d.net != nil && d.net.stop != nil {
		d.net.stop() // the session switched tabs
	}
	d.net = nil
	n := &netTracker{inflight: map[network.RequestID]struct{}{}, quietAt: time.Now(), page: pg}
	stop, err := pg.Listen(n.onEvent)
	if err != nil {
		return nil, fmt.Errorf("agent: network listen: %w", err)
	}
	small := int64(1)
	if _, err := cdp.Call(ctx, pg.Target(), network.Enable, network.EnableParams{MaxTotalBufferSize: &small, MaxResourceBufferSize: &small, MaxPostDataSize: &small}); err != nil {
		stop()
		return nil, fmt.Errorf("agent: network enable: %w", err)
	}
	n.stop = stop
	d.net = n
	return n, nil
}

func (d *driver) stopNetwork() {
	d.mu.Lock()
	n := d.net
	d.net = nil
	d.mu.Unlock()
	if n != nil && n.stop != nil {
		n.stop()
	}
}
