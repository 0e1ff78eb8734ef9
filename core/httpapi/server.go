// Package httpapi is the appliance's HTTP surface: the JSON API under
// /api/v1, the signaling WebSocket, health endpoints and the web panel.
package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/telemetry"
)

var errTimeout = errors.New("timeout")

// maxBody bounds every JSON request body.
const maxBody = 64 << 10

// Options wire the server to the rest of the core.
type Options struct {
	Sessions *session.Manager
	// Signal serves /api/v1/sessions/{id}/signal.
	Signal http.Handler
	// Panel holds the web panel (index.html, app.js, ...) and welcome.html.
	Panel fs.FS
	// Status returns the appliance status for /api/v1/status.
	Status func() any
	// Plugins returns the plugins' states for /metrics.
	Plugins func() []PluginMetric
	// Ready reports nil when the appliance can serve sessions.
	Ready func() error
	Auth  AuthOptions
	// Metrics adds samples to /metrics (it must answer fast).
	Metrics func(ctx context.Context) []Metric
	// Telemetry holds the event counters; /metrics serves its registry
	// (nil = a registry of the scrape-time collectors only).
	Telemetry *telemetry.Metrics
	// Processes lists the plugins' processes for the CPU and memory
	// figures of /metrics; nil = the core and Chromium only.
	Processes func() []telemetry.Process
	// Agent serves the agent command API; nil = none.
	Agent *agent.Service
	// CDP serves the session-scoped DevTools Protocol endpoint.
	CDP    CDPOptions
	Logger *slog.Logger

	snapshots *testSources // tests: instead of Sessions
}

// New returns the appliance's HTTP handler.
func New(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Auth.Guard == nil {
		o.Auth.Guard = access.NewGuard(access.GuardOptions{Tokens: o.Auth.Tokens, Logins: o.Auth.Logins, Logger: o.Logger})
	}
	a := &api{o: o}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"ok": true})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.HandleFunc("GET /api/v1/status", a.status)
	mux.Handle("GET /metrics", a.metricsHandler())
	mux.HandleFunc("POST /api/v1/auth/login", a.login)
	mux.HandleFunc("POST /api/v1/auth/logout", a.logout)
	mux.HandleFunc("GET /api/v1/auth/me", a.whoami)
	mux.HandleFunc("POST /api/v1/auth/password", a.changePassword)
	mux.HandleFunc("GET /api/v1/tokens", a.listTokens)
	mux.HandleFunc("POST /api/v1/tokens", a.createToken)
	mux.HandleFunc("DELETE /api/v1/tokens/{id}", a.revokeToken)
	mux.HandleFunc("GET /api/v1/audit", a.auditLog)
	if o.Agent != nil {
		mux.Handle("/mcp", a.mcpHandler())
	}
	mux.HandleFunc("GET /api/v1/sessions", a.listSessions)
	mux.HandleFunc("POST /api/v1/sessions", a.createSession)
	mux.HandleFunc("GET /api/v1/sessions/{id}", a.getSession)
	mux.HandleFunc("DELETE /api/v1/sessions/{id}", a.closeSession)
	mux.HandleFunc("POST /api/v1/sessions/{id}/navigate", a.navigate)
	mux.HandleFunc("GET /api/v1/sessions/{id}/thumbnail", a.thumbnail)
	mux.HandleFunc("GET /api/v1/sessions/{id}/downloads", a.downloads)
	mux.HandleFunc("GET /api/v1/sessions/{id}/downloads/{name}", a.download)
	mux.HandleFunc("GET /api/v1/sessions/{id}/uploads", a.uploads)
	mux.HandleFunc("PUT /api/v1/sessions/{id}/uploads/{name}", a.putUpload)
	mux.HandleFunc("POST /api/v1/sessions/{id}/agent", a.agentCommand)
	a.routeCDP(mux)
	mux.HandleFunc("POST /api/v1/sessions/{id}/control", a.control)
	mux.HandleFunc("POST /api/v1/sessions/{id}/human/{rid}/done", a.humanDone)
	mux.HandleFunc("POST /api/v1/sessions/{id}/invites", a.invite)
	mux.HandleFunc("DELETE /api/v1/sessions/{id}/invites/{user}", a.uninvite)
	if o.Signal != nil {
		mux.HandleFunc("GET /api/v1/sessions/{id}/signal", a.signal)
	}
	mux.HandleFunc("/api/", func(w http.ResponseWriter, _ *http.Request) {
		writeError(w, errcode.New(errcode.NotFound, "no such endpoint").WithHint("see docs/protocol.md").WithRecoverable(false))
	})
	if o.Panel != nil {
		files := http.FileServerFS(o.Panel)
		mux.HandleFunc("GET /welcome", func(w http.ResponseWriter, r *http.Request) {
			http.ServeFileFS(w, r, o.Panel, "welcome.html")
		})
		mux.Handle("/", panelHeaders(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				w.Header().Set("Allow", "GET, HEAD")
				http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
				return
			}
			files.ServeHTTP(w, r)
		})))
	}
	return securityHeaders(a.recoverPanics(a.withAuth(mux)))
}

// hstsMaxAge is how long a browser that met the appliance over HTTPS
// (with a certificate it trusts) keeps to HTTPS: half a year, long enough
// to defeat a downgrade on the LAN, short enough that an appliance turned
// back to plain HTTP (server.tls: off) is reachable again in time. No
// includeSubDomains: the appliance does not speak for its domain.
const hstsMaxAge = "15552000"

// securityHeaders apply to every response: nothing of the appliance may be
// framed, sniffed or leak its URLs through Referer; over HTTPS, browsers
// are told to stay on HTTPS.
func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		if r.TLS != nil {
			w.Header().Set("Strict-Transport-Security", "max-age="+hstsMaxAge)
		}
		h.ServeHTTP(w, r)
	})
}

// recoverPanics turns a handler's panic into a 500 with a stable code and
// an error in the log (net/http would log it only at the server's debug
// level and drop the connection). http.ErrAbortHandler is the handlers'
// own way to abort and passes through.
func (a *api) recoverPanics(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			a.o.Logger.Error("handler panic", "path", r.URL.Path, "method", r.Method, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			// The headers may be out already; then this write fails quietly.
			writeError(w, errcode.New(errcode.Internal, "internal error").WithHint("see the appliance log"))
		}()
		h.ServeHTTP(w, r)
	})
}

// panelHeaders keeps the panel from being framed or sniffed and limits
// where it may load code from.
func panelHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data: blob:; style-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.ServeHTTP(w, r)
	})
}

type api struct {
	o       Options
	tickets *cdpTickets
}

func (a *api) readyz(w http.ResponseWriter, _ *http.Request) {
	if a.o.Ready != nil {
		if err := a.o.Ready(); err != nil {
			// 503, not the table's 409: load balancers read readiness from the status.
			writeErrorStatus(w, http.StatusServiceUnavailable, errcode.New(errcode.NotReady, err.Error()))
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	if !require(w, r, access.ScopeRead) {
		return
	}
	var st any
	if a.o.Status != nil {
		st = a.o.Status()
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "status": st})
}

func (a *api) listSessions(w http.ResponseWriter, r *http.Request) {
	if !require(w, r, access.ScopeRead) {
		return
	}
	p := principal(r)
	out := []session.Status{}
	for _, snap := range a.o.Sessions.List() {
		if p.CanSee(snap.Owner, slices.Contains(snap.Invited, p.User)) {
			out = append(out, snap)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "sessions": out})
}

// visible returns the session when the caller may see it; anything else is
// the same 404 as an unknown id, so ids of others' sessions leak nothing.
func (a *api) visible(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	s, err := a.o.Sessions.Get(r.PathValue("id"))
	if err == nil && !principal(r).CanSee(s.Owner(), s.Invited(principal(r).User)) {
		err = session.ErrNotFound
	}
	if err != nil {
		a.fail(w, r, err)
		return nil, false
	}
	return s, true
}

// operable returns the session when the caller may drive it.
func (a *api) operable(w http.ResponseWriter, r *http.Request) (*session.Session, bool) {
	s, ok := a.visible(w, r)
	if !ok {
		return nil, false
	}
	if !principal(r).CanOperate(s.Owner()) {
		writeError(w, errcode.New(errcode.Forbidden, "you may watch this session but not operate it"))
		return nil, false
	}
	return s, true
}

func (a *api) getSession(w http.ResponseWriter, r *http.Request) {
	s, ok := a.visible(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "session": s.Status()})
}

type createRequest struct {
	URL    string `json:"url"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	// Control: shared (default) or exclusive.
	Control string `json:"control"`
	// Profile: a persistent profile of the caller's ("" = ephemeral).
	Profile string `json:"profile"`
	// Proxy: the session's own upstream proxy, http:// or
	// socks5://[user:password@]host:port ("" = the appliance's). It must
	// pass the egress policy itself, and is never logged or shown.
	Proxy string `json:"proxy"`
}

func (a *api) createSession(w http.ResponseWriter, r *http.Request) {
	if !require(w, r, access.ScopeControl) {
		return
	}
	var req createRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.URL != "" {
		if err := CheckURL(req.URL); err != nil {
			writeError(w, errcode.New(errcode.InvalidArgument, "url: "+err.Error()))
			return
		}
	}
	if req.Control != "" && req.Control != session.ControlShared && req.Control != session.ControlExclusive {
		writeError(w, errcode.New(errcode.InvalidArgument, "control: shared or exclusive"))
		return
	}
	if (req.Width != 0 && (req.Width < 320 || req.Width > 3840)) || (req.Height != 0 && (req.Height < 240 || req.Height > 2160)) {
		writeError(w, errcode.New(errcode.InvalidArgument, "width must be 320..3840 and height 240..2160"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	if req.URL != "" {
		if err := a.o.Sessions.CheckURL(ctx, req.URL); err != nil {
			a.fail(w, r, err)
			return
		}
	}
	s, err := a.o.Sessions.Create(ctx, session.CreateOptions{URL: req.URL, Width: req.Width, Height: req.Height, Owner: principal(r).User, Control: req.Control, Profile: req.Profile, Proxy: req.Proxy})
	if err != nil {
		e := fromError(err)
		a.audit(r, audit.Record{Action: "session.create", Outcome: audit.Failed, Code: e.Code})
		a.fail(w, r, err)
		return
	}
	a.audit(r, audit.Record{Action: "session.create", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusCreated, map[string]any{"ok": true, "session": s.Status()})
}

func (a *api) closeSession(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := a.o.Sessions.Close(ctx, s.ID()); err != nil {
		a.fail(w, r, err)
		return
	}
	a.audit(r, audit.Record{Action: "session.close", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

type navigateRequest struct {
	URL string `json:"url"`
}

func (a *api) navigate(w http.ResponseWriter, r *http.Request) {
	var req navigateRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := CheckURL(req.URL); err != nil {
		writeError(w, errcode.New(errcode.InvalidArgument, "url: "+err.Error()))
		return
	}
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	if err := s.Navigate(ctx, req.URL); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w: %v", errTimeout, err)
		}
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "session": s.Status()})
}

func (a *api) fail(w http.ResponseWriter, r *http.Request, err error) {
	e := fromError(err)
	if status := errcode.HTTPStatus(e.Code); status >= 500 {
		a.o.Logger.Warn("api error", "path", r.URL.Path, "code", e.Code, "err", err)
	}
	writeError(w, e)
}

// decodeBody reads a bounded, strict JSON body; on failure it has written
// the error response.
func decodeBody(w http.ResponseWriter, r *http.Request, dst any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		// 413: the body, not an argument, is over its limit.
		writeErrorStatus(w, http.StatusRequestEntityTooLarge, errcode.New(errcode.TooLarge, fmt.Sprintf("request body over %d bytes", maxBody)))
		return false
	}
	if len(strings.TrimSpace(string(body))) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		writeError(w, errcode.New(errcode.InvalidArgument, "bad JSON body: "+jsonProblem(err)))
		return false
	}
	if dec.More() {
		writeError(w, errcode.New(errcode.InvalidArgument, "bad JSON body: trailing data"))
		return false
	}
	return true
}

func jsonProblem(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q: want %s", te.Field, te.Type)
	}
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	}
	return err.Error()
}

// CheckURL accepts the URLs a session may open: http(s), about:blank and
// data: pages.
func CheckURL(raw string) error {
	if len(raw) > 8192 {
		return errors.New("too long")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("not a URL")
	}
	switch u.Scheme {
	case "http", "https":
		if u.Host == "" {
			return errors.New("missing host")
		}
		return nil
	case "about":
		if raw == "about:blank" {
			return nil
		}
	case "data":
		return nil
	}
	return errors.New("scheme must be http, https, data or about:blank")
}
