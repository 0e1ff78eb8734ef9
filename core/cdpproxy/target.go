package cdpproxy

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/chromedp/cdproto"
)

// The Target domain, emulated for one browser context. The client sees a
// browser whose only context is the session's, shown as the default one
// (getBrowserContexts answers none, so Playwright and Puppeteer put its
// pages in their default context). Discovery events are the proxy's own
// discovery filtered to that context. Browser-wide auto-attach is never
// forwarded: with waitForDebuggerOnStart it would pause every new target
// of every session. The proxy attaches the session's targets itself,
// existing and new, and Chromium reports each as attachedToTarget with
// waitingForDebugger false: nothing of the session waits for the client,
// and nothing of another session is ever paused.

// targetInfo is what the proxy keeps of a target in scope.
type targetInfo struct {
	Type string
	Raw  json.RawMessage // the TargetInfo as Chromium sent it
}

type rawTargetInfo struct {
	TargetID         string `json:"targetId"`
	Type             string `json:"type"`
	BrowserContextID string `json:"browserContextId"`
	URL              string `json:"url"`
}

// scopedTypes are the target types a client may see; the browser's own
// UI and extension pages are not the session's.
var scopedTypes = map[string]bool{"page": true, "tab": true, "iframe": true, "worker": true, "shared_worker": true, "service_worker": true}

// mine reports whether a target belongs to the session's context.
func (p *proxy) mine(ti rawTargetInfo) bool {
	if !scopedTypes[ti.Type] || ti.TargetID == "" {
		return false
	}
	if len(ti.URL) >= 19 && ti.URL[:19] == "chrome-extension://" {
		return false
	}
	return p.bctx == "" || ti.BrowserContextID == p.bctx
}

func (p *proxy) inScope(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.targets[id]
	return ok
}

// autoAttach is a client's browser-level Target.setAutoAttach.
type autoAttach struct {
	filter []filterEntry
}

type filterEntry struct {
	Type    string `json:"type,omitempty"`
	Exclude bool   `json:"exclude,omitempty"`
}

// topLevel are the types browser-level auto-attach reaches; frames and
// dedicated workers are attached under their page.
var topLevel = map[string]bool{"page": true, "tab": true, "service_worker": true, "shared_worker": true}

// defaultFilter is Chromium's when a client gives none.
var defaultFilter = []filterEntry{{Type: "browser", Exclude: true}, {Type: "tab", Exclude: true}, {}}

// matches applies a TargetFilter as Chromium does: the first entry whose
// type matches decides; none = not attached.
func matches(f []filterEntry, typ string) bool {
	if !topLevel[typ] {
		return false
	}
	for _, e := range f {
		if e.Type == "" || e.Type == typ {
			return !e.Exclude
		}
	}
	return false
}

// onBrowserEvent runs on the connection's reader: it must not wait.
func (p *proxy) onBrowserEvent(m *cdproto.Message) {
	switch m.Method {
	case cdproto.EventTargetTargetCreated, cdproto.EventTargetTargetInfoChanged:
		var ev struct {
			TargetInfo json.RawMessage `json:"targetInfo"`
		}
		var ti rawTargetInfo
		if json.Unmarshal(m.Params, &ev) != nil || json.Unmarshal(ev.TargetInfo, &ti) != nil || !p.mine(ti) {
			return
		}
		p.mu.Lock()
		_, known := p.targets[ti.TargetID]
		p.targets[ti.TargetID] = targetInfo{Type: ti.Type, Raw: ev.TargetInfo}
		disc, auto := p.discover && shown(p.discoverFilter, ti.Type), p.auto
		p.mu.Unlock()
		if disc {
			p.emit(string(m.Method), json.RawMessage(m.Params), "")
		}
		if !known && auto != nil && matches(auto.filter, ti.Type) {
			id := ti.TargetID
			// Attaching waits for Chromium: not on this goroutine.
			select {
			case p.tq <- func() { p.autoAttachTo(id) }:
			default:
				p.log.Warn("auto-attach queue full; a new target was not attached")
			}
		}
	case cdproto.EventTargetTargetDestroyed, cdproto.EventTargetTargetCrashed:
		var ev struct {
			TargetID string `json:"targetId"`
		}
		if json.Unmarshal(m.Params, &ev) != nil {
			return
		}
		p.mu.Lock()
		t, known := p.targets[ev.TargetID]
		known = known && shown(p.discoverFilter, t.Type)
		if m.Method == cdproto.EventTargetTargetDestroyed {
			delete(p.targets, ev.TargetID)
			delete(p.autoDone, ev.TargetID)
		}
		disc := p.discover
		p.mu.Unlock()
		if known && disc {
			p.emit(string(m.Method), json.RawMessage(m.Params), "")
		}
	case cdproto.EventTargetAttachedToTarget:
		if p.adopt(m.Params) {
			// Under the client's session that asked for it (its own
			// browser session), as Chromium would.
			var ev struct {
				TargetInfo rawTargetInfo `json:"targetInfo"`
			}
			_ = json.Unmarshal(m.Params, &ev)
			p.mu.Lock()
			to := p.redirect[ev.TargetInfo.TargetID]
			delete(p.redirect, ev.TargetInfo.TargetID)
			p.mu.Unlock()
			p.emit(string(m.Method), json.RawMessage(m.Params), to)
		}
	case cdproto.EventTargetDetachedFromTarget:
		if p.forget(m.Params) {
			p.emit(string(m.Method), json.RawMessage(m.Params), "")
		}
	case "Browser.downloadWillBegin", "Browser.downloadProgress":
		// Only the session's context has download events on this
		// connection: the client turned them on for it alone.
		p.emit(string(m.Method), json.RawMessage(m.Params), "")
	}
}

// adopt makes an attached session the client's when its target is in
// scope, and forwards its events; it runs on the connection's reader, so
// the listener is in place before the session's first event.
func (p *proxy) adopt(params []byte) bool {
	var ev struct {
		SessionID  string        `json:"sessionId"`
		TargetInfo rawTargetInfo `json:"targetInfo"`
	}
	if json.Unmarshal(params, &ev) != nil || ev.SessionID == "" {
		return false
	}
	if !p.mine(ev.TargetInfo) && !p.inScope(ev.TargetInfo.TargetID) {
		return false
	}
	p.mu.Lock()
	if p.children[ev.SessionID] != nil {
		p.mu.Unlock()
		return true
	}
	p.children[ev.SessionID] = &child{targetID: ev.TargetInfo.TargetID, typ: ev.TargetInfo.Type}
	if _, ok := p.targets[ev.TargetInfo.TargetID]; !ok {
		// A frame or worker under the client's page: discovery may not
		// list it yet.
		p.targets[ev.TargetInfo.TargetID] = targetInfo{Type: ev.TargetInfo.Type}
	}
	p.mu.Unlock()
	stop := p.up.Listen(ev.SessionID, p.onChildEvent(ev.SessionID), nil)
	p.addStop(stop)
	return true
}

func (p *proxy) forget(params []byte) bool {
	var ev struct {
		SessionID string `json:"sessionId"`
	}
	if json.Unmarshal(params, &ev) != nil {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.children[ev.SessionID] == nil {
		return false
	}
	delete(p.children, ev.SessionID)
	return true
}

// autoAttachTo attaches the client to a target of the session (the
// target worker's).
func (p *proxy) autoAttachTo(targetID string) {
	p.mu.Lock()
	done := p.autoDone[targetID]
	p.autoDone[targetID] = true
	p.mu.Unlock()
	if done {
		return
	}
	err := p.call("", "Target.attachToTarget", map[string]any{"targetId": targetID, "flatten": true}, nil)
	if err != nil && p.ctx.Err() == nil {
		p.log.Debug("auto-attach", "err", err)
	}
}

// allTargets is a filter that lists tabs too (Chromium's default leaves
// them out; Puppeteer attaches to tabs).
var allTargets = map[string]any{"filter": []filterEntry{{}}}

// discoveryDefault is Chromium's filter for discovery and getTargets.
var discoveryDefault = []filterEntry{{Type: "browser", Exclude: true}, {Type: "tab", Exclude: true}, {}}

// shown applies a client's discovery filter (nil: Chromium's default).
func shown(f []filterEntry, typ string) bool {
	if f == nil {
		f = discoveryDefault
	}
	for _, e := range f {
		if e.Type == "" || e.Type == typ {
			return !e.Exclude
		}
	}
	return false
}

// listTargets lists the scope's targets from Chromium (and refreshes the
// map), tabs included.
func (p *proxy) listTargets() ([]json.RawMessage, error) {
	var res struct {
		TargetInfos []json.RawMessage `json:"targetInfos"`
	}
	if err := p.call("", "Target.getTargets", allTargets, &res); err != nil {
		return nil, err
	}
	out := []json.RawMessage{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, raw := range res.TargetInfos {
		var ti rawTargetInfo
		if json.Unmarshal(raw, &ti) != nil || !p.mine(ti) {
			continue
		}
		p.targets[ti.TargetID] = targetInfo{Type: ti.Type, Raw: raw}
		out = append(out, raw)
	}
	return out, nil
}

// target answers a Target command (and Page.close) on the target worker.
func (p *proxy) target(m *message) {
	switch m.Method {
	case "Target.getBrowserContexts":
		p.answer(m, json.RawMessage(`{"browserContextIds":[]}`), nil)
	case "Target.getTargets":
		var a struct {
			Filter []filterEntry `json:"filter"`
		}
		if json.Unmarshal(orEmpty(m.Params), &a) != nil {
			p.answer(m, nil, invalidParams(m.Method, "filter must be a TargetFilter"))
			return
		}
		list, err := p.listTargets()
		if err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		p.answer(m, encode(map[string]any{"targetInfos": p.filtered(list, a.Filter)}), nil)
	case "Target.setDiscoverTargets":
		var a struct {
			Discover bool          `json:"discover"`
			Filter   []filterEntry `json:"filter"`
		}
		if json.Unmarshal(orEmpty(m.Params), &a) != nil {
			p.answer(m, nil, invalidParams(m.Method, "discover must be a boolean and filter a TargetFilter"))
			return
		}
		list, err := p.listTargets()
		if err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		p.mu.Lock()
		was := p.discover
		p.discover, p.discoverFilter = a.Discover, a.Filter
		p.mu.Unlock()
		if a.Discover && !was {
			// As Chromium does: the existing targets, before the answer.
			for _, raw := range p.filtered(list, a.Filter) {
				p.emit("Target.targetCreated", encode(map[string]any{"targetInfo": raw}), "")
			}
		}
		p.answer(m, nil, nil)
	case "Target.setAutoAttach":
		p.setAutoAttach(m)
	case "Target.attachToTarget":
		var a struct {
			TargetID string `json:"targetId"`
		}
		_ = json.Unmarshal(orEmpty(m.Params), &a)
		if m.SessionID != "" {
			p.mu.Lock()
			p.redirect[a.TargetID] = m.SessionID
			p.mu.Unlock()
		}
		// Flat sessions only: the proxy routes by session id.
		p.forward(&message{ID: m.ID, Method: m.Method, SessionID: m.SessionID},
			encode(map[string]any{"targetId": a.TargetID, "flatten": true}))
	case "Target.attachToBrowserTarget":
		id := newSessionID()
		p.mu.Lock()
		p.children[id] = &child{typ: browserSession}
		p.mu.Unlock()
		p.answer(m, encode(map[string]string{"sessionId": id}), nil)
	case "Target.detachFromTarget":
		var a struct {
			SessionID string `json:"sessionId"`
		}
		_ = json.Unmarshal(orEmpty(m.Params), &a)
		if c := p.childOf(a.SessionID); c != nil && c.typ == browserSession {
			p.mu.Lock()
			delete(p.children, a.SessionID)
			p.mu.Unlock()
			p.answer(m, nil, nil)
			return
		}
		p.forward(m, m.Params)
	case "Target.activateTarget", "Target.getTargetInfo":
		p.forward(m, m.Params)
	case "Target.closeTarget", "Page.close":
		id := p.targetOf(m)
		if err := p.s.CloseTab(p.ctx, id); err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		if m.Method == "Target.closeTarget" {
			p.answer(m, json.RawMessage(`{"success":true}`), nil)
			return
		}
		p.answer(m, nil, nil)
	case "Target.createTarget":
		p.createTarget(m)
	}
}

// filtered keeps the targets a TargetFilter shows.
func (p *proxy) filtered(list []json.RawMessage, f []filterEntry) []json.RawMessage {
	out := []json.RawMessage{}
	for _, raw := range list {
		var ti rawTargetInfo
		if json.Unmarshal(raw, &ti) == nil && shown(f, ti.Type) {
			out = append(out, raw)
		}
	}
	return out
}

// targetOf is the target a command names, else its session's.
func (p *proxy) targetOf(m *message) string {
	var a struct {
		TargetID string `json:"targetId"`
	}
	_ = json.Unmarshal(orEmpty(m.Params), &a)
	if a.TargetID == "" && m.SessionID != "" {
		if c := p.childOf(m.SessionID); c != nil {
			return c.targetID
		}
	}
	return a.TargetID
}

func (p *proxy) setAutoAttach(m *message) {
	var a struct {
		AutoAttach bool          `json:"autoAttach"`
		Flatten    *bool         `json:"flatten"`
		Filter     []filterEntry `json:"filter"`
	}
	if json.Unmarshal(orEmpty(m.Params), &a) != nil {
		p.answer(m, nil, invalidParams(m.Method, "autoAttach must be a boolean and filter a TargetFilter"))
		return
	}
	if a.Flatten != nil && !*a.Flatten {
		p.refuse(m, refusal(m.Method, "only flat sessions (flatten: true)"))
		return
	}
	if !a.AutoAttach {
		p.mu.Lock()
		p.auto = nil
		p.mu.Unlock()
		p.answer(m, nil, nil)
		return
	}
	f := a.Filter
	if f == nil {
		f = defaultFilter
	}
	list, err := p.listTargets()
	if err != nil {
		p.answer(m, nil, fromErr(m.Method, err))
		return
	}
	p.mu.Lock()
	p.auto = &autoAttach{filter: f}
	p.mu.Unlock()
	// The existing targets are attached before the answer, as Chromium
	// attaches them; their attachedToTarget events come first.
	for _, raw := range list {
		var ti rawTargetInfo
		if json.Unmarshal(raw, &ti) == nil && matches(f, ti.Type) {
			p.autoAttachTo(ti.TargetID)
		}
	}
	p.answer(m, nil, nil)
}

// createTargetWait bounds opening a tab for a client.
const createTargetWait = 30 * time.Second

// createTarget opens the tab through the session: the navigation policy,
// its tab limit and the panel's tab list apply.
func (p *proxy) createTarget(m *message) {
	var a struct {
		URL string `json:"url"`
	}
	if json.Unmarshal(orEmpty(m.Params), &a) != nil {
		p.answer(m, nil, invalidParams(m.Method, "url must be a string"))
		return
	}
	ctx, cancel := contextWithTimeout(p.ctx, createTargetWait)
	defer cancel()
	id, err := p.s.OpenTab(ctx, a.URL)
	p.sv.audit(p, "cdp."+m.Method, outcomeOf(err), codeOf(err))
	if err != nil {
		p.answer(m, nil, fromErr(m.Method, err))
		return
	}
	// Chromium attaches an auto-attached new target before it answers,
	// and Playwright counts on it (the page must exist at the answer).
	p.attachPending()
	p.answer(m, encode(map[string]string{"targetId": id}), nil)
}

// attachPending attaches the client to the scope's targets its
// auto-attach covers and that it is not attached to yet.
func (p *proxy) attachPending() {
	if _, err := p.listTargets(); err != nil {
		return
	}
	p.mu.Lock()
	var ids []string
	if p.auto != nil {
		for id, t := range p.targets {
			if !p.autoDone[id] && matches(p.auto.filter, t.Type) {
				ids = append(ids, id)
			}
		}
	}
	p.mu.Unlock()
	for _, id := range ids {
		p.autoAttachTo(id)
	}
}

// newSessionID names a client's browser session like Chromium's ids.
func newSessionID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return strings.ToUpper(hex.EncodeToString(b[:]))
}

func orEmpty(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return emptyResult
	}
	return b
}
