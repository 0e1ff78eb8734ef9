package httpapi

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/cdpproxy"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
)

// CDPOptions configure the session-scoped DevTools Protocol endpoint
// (/api/v1/sessions/{id}/cdp and its discovery beside it). The HTTP side
// authenticates, authorizes, counts and upgrades; the proxy speaks CDP.
type CDPOptions struct {
	// Enabled is agent.cdp: off, every CDP route answers 403 cdp_disabled.
	Enabled bool
	// Endpoint is the proxy; nil with Enabled answers 501 not_supported.
	Endpoint cdpproxy.Endpoint
	// MaxMessageBytes is the WebSocket read limit: a larger client
	// message closes the connection with 1009 (agent.cdpMaxMessageBytes).
	MaxMessageBytes int
	// Now is the ticket clock (tests); nil = time.Now.
	Now func() time.Time
}

// defaultCDPMaxMessage is agent.cdpMaxMessageBytes' default, for an
// Options without it.
const defaultCDPMaxMessage = 8 << 20

// cdpPath is the part of a CDP path after /api/v1/sessions/{id}.
const cdpPath = "/cdp"

// routeCDP registers the CDP routes. They are there with agent.cdp off so
// that the answer names the setting instead of a bare 404.
func (a *api) routeCDP(mux *http.ServeMux) {
	a.tickets = newCDPTickets(a.o.CDP.Now)
	const base = "/api/v1/sessions/{id}" + cdpPath
	mux.HandleFunc("GET "+base+"", a.cdpConnect)
	mux.HandleFunc("GET "+base+"/json/version", a.cdpVersion)
	mux.HandleFunc("GET "+base+"/json/version/{$}", a.cdpVersion)
	mux.HandleFunc("GET "+base+"/json", a.cdpList)
	mux.HandleFunc("GET "+base+"/json/{$}", a.cdpList)
	mux.HandleFunc("GET "+base+"/json/list", a.cdpList)
	mux.HandleFunc("GET "+base+"/json/list/{$}", a.cdpList)
	mux.HandleFunc("POST "+base+"/ticket", a.cdpTicket)
}

// cdpSession answers for every CDP route: the endpoint is on, the session
// is one the caller may see (else the same 404 as an unknown id), and the
// caller may attach a CDP client to it (the cdp scope, owner or admin).
func (a *api) cdpSession(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	if !a.o.CDP.Enabled {
		writeError(w, errcode.New(errcode.CDPDisabled, "the CDP endpoint is off on this appliance").WithHint("set agent.cdp: true"))
		return nil, false
	}
	if a.o.CDP.Endpoint == nil {
		writeError(w, errcode.New(errcode.NotSupported, "this appliance serves no CDP endpoint"))
		return nil, false
	}
	s, ok := a.visible(w, r)
	if !ok {
		return nil, false
	}
	if !principal(r).CanCDP(s.Owner()) {
		writeError(w, errcode.New(errcode.Forbidden, "attaching a CDP client needs the cdp and control scopes and the session's owner or an admin").
			WithHint("tabcast tokens create NAME --scopes read,control,cdp"))
		return nil, false
	}
	return s, true
}

// cdpLevel is what a CDP connection may do on s as its principal stands
// now: it needs to operate the session and to hold the cdp scope; the
// guard re-checks it on every change and ends the connection below it.
func cdpLevel(s *session.Session) func(access.Principal) access.Level {
	return func(p access.Principal) access.Level {
		if !p.CanCDP(s.Owner()) {
			return access.LevelNone
		}
		return access.LevelOperate
	}
}

// cdpWSURL is the endpoint's WebSocket URL as the caller reached the
// appliance: its Host, wss behind TLS. Clients follow it from
// /json/version, so it must name the appliance, never Chromium's port.
func cdpWSURL(r *http.Request, sessionID string) *url.URL {
	scheme := "ws"
	if r.TLS != nil {
		scheme = "wss"
	}
	return &url.URL{Scheme: scheme, Host: r.Host, Path: "/api/v1/sessions/" + sessionID + cdpPath}
}

// cdpVersion answers /json/version as Chromium does (the object itself,
// no envelope: Playwright reads webSocketDebuggerUrl from it).
func (a *api) cdpVersion(w http.ResponseWriter, r *http.Request) {
	s, ok := a.cdpSession(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	v, err := a.o.CDP.Endpoint.Version(ctx, s.ID())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	v.WebSocketDebuggerURL = cdpWSURL(r, s.ID()).String()
	writeJSON(w, http.StatusOK, v)
}

// cdpList answers /json/list (and /json) as Chromium does: the session's
// pages. Chromium's per-page sockets are not served: each entry's
// webSocketDebuggerUrl is the session's endpoint (a browser-level
// connection that attaches to the page with Target.attachToTarget), and
// there is no DevTools front-end URL (it would name Chromium's port).
func (a *api) cdpList(w http.ResponseWriter, r *http.Request) {
	s, ok := a.cdpSession(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	list, err := a.o.CDP.Endpoint.List(ctx, s.ID())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	ws := cdpWSURL(r, s.ID()).String()
	out := make([]cdpproxy.Target, 0, len(list))
	for _, t := range list {
		t.WebSocketDebuggerURL = ws
		t.DevtoolsFrontendURL = ""
		out = append(out, t)
	}
	writeJSON(w, http.StatusOK, out)
}

// cdpTicket makes a single-use URL for a client that can only take a URL
// (browser-use's cdp_url): the connection it opens is the caller's.
func (a *api) cdpTicket(w http.ResponseWriter, r *http.Request) {
	s, ok := a.cdpSession(w, r)
	if !ok {
		return
	}
	secret, exp, err := a.tickets.issue(principal(r), s.ID())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	u := cdpWSURL(r, s.ID())
	u.RawQuery = url.Values{"ticket": {secret}}.Encode()
	a.audit(r, audit.Record{Action: "cdp.ticket", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "url": u.String(), "expiresAt": exp.UTC()})
}

// cdpTicketRequest reports whether r opens a CDP connection with a ticket
// (…/sessions/{id}/cdp?ticket=…), and for which session. It runs before
// routing, so it reads the path itself.
func cdpTicketRequest(r *http.Request) (sessionID, secret string, ok bool) {
	if r.Method != http.MethodGet || !r.URL.Query().Has("ticket") {
		return "", "", false
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/api/v1/sessions/")
	if !ok {
		return "", "", false
	}
	id, ok := strings.CutSuffix(rest, cdpPath)
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", "", false
	}
	return id, r.URL.Query().Get("ticket"), true
}

// ticketPrincipal spends the ticket of a CDP connection and returns the
// principal who made it, as they stand now (a revoked token or an ended
// login takes its tickets with it). ok is false when it has written the
// refusal: 401, as for a bad token, whatever the reason.
func (a *api) ticketPrincipal(w http.ResponseWriter, r *http.Request, sessionID, secret string) (access.Principal, bool) {
	p, ok := a.tickets.redeem(secret, sessionID)
	if ok && !a.o.Auth.None {
		a.o.Auth.Guard.Refresh()
		var err error
		p, err = a.o.Auth.Guard.Current(p)
		ok = err == nil
	}
	if !ok {
		writeError(w, errcode.New(errcode.PermissionDenied, "the CDP ticket is not valid: used, expired or made for another session").
			WithHint("POST /api/v1/sessions/{id}/cdp/ticket for a new one; a ticket works once, within 60 s"))
		return access.Principal{}, false
	}
	return p, true
}

// cdpConnect upgrades to the CDP WebSocket once everything is checked:
// the endpoint on, the caller's rights on the session, the origin of a
// browser's upgrade, and a free connection place (429
// too_many_connections). The connection holds a guard grant: it ends when
// the caller's access is withdrawn.
func (a *api) cdpConnect(w http.ResponseWriter, r *http.Request) {
	s, ok := a.cdpSession(w, r)
	if !ok {
		return
	}
	// A page on another origin must not open the socket with the panel's
	// cookie (or with a ticket it got hold of): the rule of every other
	// browser-originated request of the appliance.
	if !sameOrigin(r) {
		writeError(w, errcode.New(errcode.OriginDenied, "request from another origin"))
		return
	}
	release, err := a.o.CDP.Endpoint.Admit(s.ID())
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer release()
	p := principal(r)
	gr := a.o.Auth.Guard.Hold("cdp", p, access.LevelOperate, cdpLevel(s))
	defer gr.Release()
	if gr.Withdrawn() {
		writeError(w, errcode.New(errcode.PermissionDenied, "access withdrawn"))
		return
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		// Accept has written the HTTP error (not a WebSocket request).
		return
	}
	limit := a.o.CDP.MaxMessageBytes
	if limit <= 0 {
		limit = defaultCDPMaxMessage
	}
	ws.SetReadLimit(int64(limit))
	ctx, cancel := gr.Bind(r.Context())
	defer cancel()
	c := &cdpConn{ws: ws}
	// The proxy records connect and disconnect in the audit log.
	err = a.o.CDP.Endpoint.Serve(ctx, s.ID(), c, cdpproxy.Client{Name: a.cdpClientName(p), User: p.User, TokenID: p.TokenID})
	// Serve has closed c with its reason; this close is a safety net
	// (only the first close counts).
	switch {
	case gr.Withdrawn():
		_ = c.Close(int(websocket.StatusPolicyViolation), "access withdrawn")
	case err != nil:
		_ = c.Close(int(websocket.StatusInternalError), errcode.From(err).Code)
	default:
		_ = c.Close(int(websocket.StatusNormalClosure), "")
	}
}

// cdpClientName names the connection's producer ("cdp:"+name): the
// token's name, or the user of a panel login.
func (a *api) cdpClientName(p access.Principal) string {
	if p.Method == access.MethodToken && a.o.Auth.Tokens != nil {
		for _, t := range a.o.Auth.Tokens.List() {
			if t.ID == p.TokenID {
				return t.Name
			}
		}
	}
	return p.User
}
