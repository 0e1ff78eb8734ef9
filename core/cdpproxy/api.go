// Package cdpproxy serves a session-scoped, filtered Chrome DevTools
// Protocol connection: Playwright's connectOverCDP, Puppeteer's connect
// and browser-use attach to one tabcast session through it, see exactly
// that session's browser context (as the browser's default context), are
// refused everything on an explicit allow list's outside, stay under the
// appliance's navigation policy, and send their input through the
// session's one dispatcher, fenced with the people in the panel.
//
// The HTTP side (core/httpapi) authenticates, authorizes, counts and
// upgrades; this package only speaks CDP on an established connection.
// The seam between them is this file.
package cdpproxy

import "context"

// Conn is the client's WebSocket as the proxy sees it: one CDP JSON
// message (a text frame) per call. ReadMessage blocks until a message, an
// error, or ctx's end; WriteMessage must not be called concurrently (the
// proxy has one writer). Close ends the connection with a WebSocket close
// code and a reason the client can read (e.g. 1009 for a message over the
// limit).
type Conn interface {
	ReadMessage(ctx context.Context) ([]byte, error)
	WriteMessage(ctx context.Context, msg []byte) error
	Close(code int, reason string) error
}

// Client is who is connected: the dispatcher's producer is "cdp:"+Name,
// the audit log names User and TokenID. Never an address.
type Client struct {
	Name    string // the token's name, or the login's user for a panel login
	User    string
	TokenID string // "" for a panel login or a ticket made by one
}

// Limits bound one connection. Zero values take the defaults.
type Limits struct {
	MaxMessageBytes int // a client message over it closes the connection (1009); default 8 MiB
	WriteQueue      int // messages waiting for a slow client before it is disconnected; default 256
	IdleTimeout     int // seconds without a client message before the connection ends; default 300
	InputDeadline   int // seconds an input call waits under exclusive human control; default 30
}

// Version is what /json/version answers (Chromium's own fields), with
// WebSocketDebuggerURL set by the HTTP side to the appliance's endpoint.
type Version struct {
	Browser              string `json:"Browser"`
	ProtocolVersion      string `json:"Protocol-Version"`
	UserAgent            string `json:"User-Agent"`
	V8Version            string `json:"V8-Version,omitempty"`
	WebKitVersion        string `json:"WebKit-Version,omitempty"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// Target is one entry of /json/list (a page of the session).
type Target struct {
	Description          string `json:"description"`
	DevtoolsFrontendURL  string `json:"devtoolsFrontendUrl,omitempty"`
	ID                   string `json:"id"`
	Title                string `json:"title"`
	Type                 string `json:"type"`
	URL                  string `json:"url"`
	WebSocketDebuggerURL string `json:"webSocketDebuggerUrl"`
}

// Endpoint is what the HTTP side calls for a session it has already
// authorized (the caller holds the cdp scope and owns or administers the
// session, and agent.cdp is on). The proxy's server implements it; errors
// are core/errcode errors (not_found for an unknown session, and so on).
type Endpoint interface {
	// Version answers /json/version for the session's browser (the HTTP
	// side sets WebSocketDebuggerURL).
	Version(ctx context.Context, sessionID string) (Version, error)
	// List answers /json/list: the session's pages (the HTTP side sets
	// each WebSocketDebuggerURL).
	List(ctx context.Context, sessionID string) ([]Target, error)
	// Admit takes one of the session's connection places (at most
	// Config's per-session maximum) before the upgrade; release gives it
	// back. Refused with errcode too_many_connections (HTTP 429).
	Admit(sessionID string) (release func(), err error)
	// Serve runs one client connection until the client, the session or
	// ctx ends it, and closes c with a reason.
	Serve(ctx context.Context, sessionID string, c Conn, who Client) error
}
