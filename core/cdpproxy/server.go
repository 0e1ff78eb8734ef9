package cdpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/telemetry"
)

// Defaults of Config and Limits.
const (
	DefaultMaxConnections  = 4
	DefaultMaxMessageBytes = 8 << 20
	DefaultWriteQueue      = 256
	DefaultIdleTimeout     = 300 // seconds
	DefaultInputDeadline   = 30  // seconds
)

// Config bounds the proxy; the appliance wires it from agent.cdp*.
type Config struct {
	// MaxConnections is the most CDP clients one session has at once
	// (Admit); 0 = DefaultMaxConnections.
	MaxConnections int
	Limits         Limits
}

// Sessions is what the proxy needs of the session manager.
type Sessions interface {
	// CDPSession is the session id, or an *errcode.Error not_found.
	CDPSession(id string) (Session, error)
}

// Session is one session as the proxy drives it. Everything that changes
// what the session's people see (tabs, the viewport, input) goes through
// it, so that the session's own rules (navigation policy, tab limit, the
// one dispatcher) apply to a CDP client as to anyone.
type Session interface {
	// Done is closed when the session ends.
	Done() <-chan struct{}
	// DialBrowser opens a DevTools connection of the caller's own to the
	// Chromium holding the session (browser.Browser.DialConn) and names
	// the session's browser context: "" when that Chromium is the
	// session's alone (a persistent profile), every context of it then.
	DialBrowser(ctx context.Context) (conn *browser.BrowserConn, browserContextID string, err error)
	// DownloadDir is where the session's downloads go ("" = refused).
	DownloadDir() string
	// RestoreDownloads sets the context's download behavior back to the
	// session's own (Chromium resets it when the connection that changed
	// it closes).
	RestoreDownloads(ctx context.Context) error
	// CheckURL is the navigation policy: nil or an *errcode.Error
	// navigation_blocked.
	CheckURL(ctx context.Context, url string) error
	// Tabs are the session's pages, the streamed one Current.
	Tabs() []Tab
	// OpenTab opens url in a new tab of the session (policy, tab limit,
	// the panel's tab list) and makes it current.
	OpenTab(ctx context.Context, url string) (targetID string, err error)
	// CloseTab closes a tab of the session (never its last).
	CloseTab(ctx context.Context, targetID string) error
	// SwitchTab makes a tab of the session the streamed one.
	SwitchTab(ctx context.Context, targetID string) error
	// OpenProducer grants an agent producer of the session's dispatcher
	// named name ("cdp:<token name>").
	OpenProducer(name string) (Producer, error)
	// AgentMayAct is nil unless a person holds exclusive control (then an
	// *errcode.Error human_in_control).
	AgentMayAct() error
	// Present shows the client among the session's agents (the panel's
	// watchers list) until gone is called.
	Present(name string) (gone func())
	// InputViewport is the streamed tab's viewport in CSS pixels, which
	// the dispatcher's normalized coordinates refer to.
	InputViewport() (w, h int)
}

// Tab is one page of a session.
type Tab struct {
	ID, URL, Title string
	Current        bool
}

// Producer is a dispatcher producer (session.Producer satisfies it).
type Producer interface {
	Submit(e action.Envelope, reply func(action.Ack))
	PageRevision() uint64
	Close()
}

// Deps are the proxy's optional sinks; nil ones are skipped.
type Deps struct {
	Audit   *audit.Log
	Metrics *telemetry.Metrics
}

// Server serves CDP clients of the sessions; it implements Endpoint.
type Server struct {
	cfg      Config
	sessions Sessions
	log      *slog.Logger
	deps     Deps
	metrics  *metrics

	mu    sync.Mutex
	conns map[string]int // admitted connections per session
}

var _ Endpoint = (*Server)(nil)

// New returns a server; zero Config fields take the defaults. With
// deps.Metrics its series are registered on that registry, so an
// appliance makes one Server.
func New(cfg Config, sessions Sessions, log *slog.Logger, deps Deps) *Server {
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, sessions: sessions, log: log.With("component", "cdpproxy"), deps: deps,
		metrics: newMetrics(deps.Metrics.Registry()), conns: map[string]int{}}
}

func (l Limits) withDefaults() Limits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if l.WriteQueue <= 0 {
		l.WriteQueue = DefaultWriteQueue
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.InputDeadline <= 0 {
		l.InputDeadline = DefaultInputDeadline
	}
	return l
}

// discoveryTimeout bounds a /json/version or /json/list answer.
const discoveryTimeout = 5 * time.Second

// Version answers /json/version from the session's Chromium.
func (sv *Server) Version(ctx context.Context, sessionID string) (Version, error) {
	s, err := sv.sessions.CDPSession(sessionID)
	if err != nil {
		return Version{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	defer cancel()
	up, _, err := s.DialBrowser(ctx)
	if err != nil {
		return Version{}, errcode.Wrap(errcode.BrowserUnavailable, err, "the session's browser is not reachable")
	}
	defer up.Close()
	var v struct {
		ProtocolVersion string `json:"protocolVersion"`
		Product         string `json:"product"`
		Revision        string `json:"revision"`
		UserAgent       string `json:"userAgent"`
		JSVersion       string `json:"jsVersion"`
	}
	if err := up.Call(ctx, "Browser.getVersion", nil, &v); err != nil {
		return Version{}, errcode.Wrap(errcode.BrowserUnavailable, err, "the session's browser did not answer")
	}
	return Version{Browser: v.Product, ProtocolVersion: v.ProtocolVersion, UserAgent: v.UserAgent, V8Version: v.JSVersion, WebKitVersion: v.Revision}, nil
}

// List answers /json/list: the session's tabs.
func (sv *Server) List(ctx context.Context, sessionID string) ([]Target, error) {
	s, err := sv.sessions.CDPSession(sessionID)
	if err != nil {
		return nil, err
	}
	out := []Target{}
	for _, t := range s.Tabs() {
		out = append(out, Target{ID: t.ID, Type: "page", Title: t.Title, URL: t.URL})
	}
	return out, nil
}

// Admit takes one of the session's connection places.
func (sv *Server) Admit(sessionID string) (func(), error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if sv.conns[sessionID] >= sv.cfg.MaxConnections {
		return nil, errcode.Newf(errcode.TooManyConnections, "the session has %d CDP connections already", sv.cfg.MaxConnections)
	}
	sv.conns[sessionID]++
	var once sync.Once
	return func() {
		once.Do(func() {
			sv.mu.Lock()
			defer sv.mu.Unlock()
			if sv.conns[sessionID]--; sv.conns[sessionID] <= 0 {
				delete(sv.conns, sessionID)
			}
		})
	}, nil
}

// Serve runs one client until it, the session or ctx ends it.
func (sv *Server) Serve(ctx context.Context, sessionID string, c Conn, who Client) error {
	s, err := sv.sessions.CDPSession(sessionID)
	if err != nil {
		_ = c.Close(closePolicy, "no such session")
		return err
	}
	dctx, cancel := context.WithTimeout(ctx, discoveryTimeout)
	up, bctx, err := s.DialBrowser(dctx)
	cancel()
	if err != nil {
		_ = c.Close(closeInternal, "the session's browser is not reachable")
		return errcode.Wrap(errcode.BrowserUnavailable, err, "the session's browser is not reachable")
	}
	p := newProxy(sv, sessionID, s, up, bctx, c, who)
	gone := s.Present("cdp:" + who.Name)
	defer gone()
	sv.audit(p, "cdp.connect", audit.OK, "")
	sv.metrics.connected(1)
	defer sv.metrics.connected(-1)
	err = p.run(ctx)
	sv.audit(p, "cdp.disconnect", audit.OK, p.closeReason())
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// audit records one event: method names and outcomes only, never
// parameters, typed text or URLs.
func (sv *Server) audit(p *proxy, what, outcome, detail string) {
	if sv.deps.Audit == nil {
		return
	}
	code := ""
	if outcome != audit.OK {
		code, detail = detail, ""
	}
	if err := sv.deps.Audit.Add(audit.Record{Time: time.Now(), Action: what, User: p.who.User, Session: audit.HashSession(p.sessionID),
		Outcome: outcome, Code: code, Source: "cdp", Detail: fmt.Sprintf("cdp:%s%s", p.who.Name, detailSuffix(detail))}); err != nil {
		sv.log.Warn("audit", "err", err)
	}
}

func detailSuffix(d string) string {
	if d == "" {
		return ""
	}
	return " " + d
}
