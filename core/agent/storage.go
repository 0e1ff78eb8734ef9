package agent

// Cookies and web storage.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/chromedp/cdproto"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/storage"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
)

// browserConn is the session's browser's shared connection, for the
// commands of the browser endpoint (the page's session may not name a
// browser context).
func (d *driver) browserConn(ctx context.Context) (*browser.BrowserConn, error) {
	conn, err := d.s.BrowserConn(ctx)
	if errors.Is(err, session.ErrNoBrowser) {
		return nil, errorf(errcode.NotReady, true, "", "the session's browser is not reachable")
	}
	return conn, err
}

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
		conn, err := d.browserConn(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: get cookies: %w", err)
		}
		res, err := cdp.Call(ctx, conn, storage.GetCookies, storage.GetCookiesParams{BrowserContextID: bctx})
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
			return nil, errorf(errcode.InvalidArgument, false, "cookie: {name, value (at most 4096 bytes), url or domain, path, secure, httpOnly, sameSite, expires}", "bad cookie")
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
			return nil, errorf(errcode.InvalidArgument, false, "sameSite: Strict, Lax or None", "bad sameSite")
		}
		if p.URL == "" && p.Domain == "" {
			// The current page's URL scopes it.
			var href string
			if err := pg.Evaluate(ctx, "location.href", &href); err != nil {
				return nil, err
			}
			if !strings.HasPrefix(href, "http://") && !strings.HasPrefix(href, "https://") {
				return nil, errorf(errcode.InvalidArgument, false, "give cookie.url or cookie.domain", "the current page has no http(s) origin")
			}
			p.URL = href
		}
		conn, err := d.browserConn(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: set cookie: %w", err)
		}
		_, err = cdp.Call(ctx, conn, storage.SetCookies, storage.SetCookiesParams{Cookies: []*network.CookieParam{p}, BrowserContextID: bctx})
		var ce *cdproto.Error
		if errors.As(err, &ce) {
			return nil, errorf(errcode.InvalidArgument, false, "check the cookie's name, domain, url and flags", "the browser refused the cookie")
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
				return nil, errorf(errcode.InvalidArgument, false, "give cookie.url or cookie.domain with cookie.name, or no cookie to clear all", "which cookie?")
			}
			if _, err := cdp.Call(ctx, pg.Target(), network.DeleteCookies, network.DeleteCookiesParams{Name: c.Name, URL: c.URL, Domain: c.Domain, Path: c.Path}); err != nil {
				return nil, fmt.Errorf("agent: delete cookies: %w", err)
			}
			return &Result{OK: true, Summary: "deleted the matching cookies"}, nil
		}
		conn, err := d.browserConn(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: clear cookies: %w", err)
		}
		if _, err := cdp.Call(ctx, conn, storage.ClearCookies, storage.ClearCookiesParams{BrowserContextID: bctx}); err != nil {
			return nil, fmt.Errorf("agent: clear cookies: %w", err)
		}
		return &Result{OK: true, Summary: "cleared every cookie of the session"}, nil
	}
	return nil, errorf(errcode.InvalidArgument, false, "op: get, set, clear", "cookies %q", r.Op)
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
		return nil, errorf(errcode.InvalidArgument, false, "area: local or session", "storage area %q", r.Area)
	}
	op := strings.ToLower(r.Op)
	switch op {
	case "":
		op = "get"
	case "get", "clear":
	case "set":
		if r.Key == "" {
			return nil, errorf(errcode.InvalidArgument, false, "give key and value", "storage set needs a key")
		}
		if len(r.Key)+len(r.Value) > maxStorageBytes {
			return nil, errorf(errcode.TooLarge, false, "", "storage set: key and value over %d bytes", maxStorageBytes)
		}
	default:
		return nil, errorf(errcode.InvalidArgument, false, "op: get, set, clear", "storage %q", r.Op)
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
		var ae *errcode.Error
		if errors.As(err, &ae) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err
		}
		return nil, errorf(errcode.InvalidArgument, true, "storage needs an http(s) page", "the page's storage is not reachable")
	}
	if out.Err != "" {
		return nil, errorf(errcode.InvalidArgument, true, "storage needs an http(s) page", "this page has no %sStorage", area)
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
			return nil, errorf(errcode.NotFound, true, "", "no %sStorage item of that key", area)
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
