// Package mcp serves the agent API (core/agent) as a Model Context Protocol
// server, so an LLM client (Claude Desktop, an IDE, an agent framework) can
// list and open sessions and drive their pages by accessibility snapshots
// and refs.
//
// The package knows nothing of sessions or the dispatcher: it calls a
// [Backend], which the appliance implements in-process (for the HTTP
// endpoint) or over its REST API (for a stdio bridge). The tools map one to
// one onto agent commands; their refusals come back as tool results with
// IsError set and the stable code first ("stale_ref: … — hint: …"), never
// as protocol errors, so a client keeps its session and the model can
// recover.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
)

// SessionInfo describes one browser session.
type SessionInfo struct {
	ID    string `json:"id"`
	State string `json:"state,omitempty"`
	Title string `json:"title,omitempty"`
	URL   string `json:"url,omitempty"`
}

// HumanResult is how a request for a person ended.
type HumanResult struct {
	// Status: "done" (a person finished and handed back), "declined",
	// "timeout" or "cancelled".
	Status string `json:"status"`
	// By names who answered, when known.
	By string `json:"by,omitempty"`
	// Note is the person's message to the agent, if any.
	Note string `json:"note,omitempty"`
}

// Backend is what the MCP tools call, bound to one authenticated user. The
// appliance implements it over its API or in-process.
//
// Errors should carry an *errcode.Error in their chain so their stable
// code, message, hint and recoverability reach the model; a deadline is
// reported as "timeout" and any other error as "internal" (errcode.From).
type Backend interface {
	// ListSessions lists the sessions the user may drive.
	ListSessions(ctx context.Context) ([]SessionInfo, error)
	// CreateSession opens a session on url ("" for the default page).
	CreateSession(ctx context.Context, url string) (SessionInfo, error)
	// Agent runs one agent command on a session.
	Agent(ctx context.Context, sessionID string, req agent.Request) (*agent.Result, error)
	// RequestHuman asks a person to take over the session (a login, a
	// CAPTCHA, a decision) and waits up to timeout for them to hand back.
	// It may fail with code errcode.NotSupported.
	RequestHuman(ctx context.Context, sessionID, reason string, timeout time.Duration) (HumanResult, error)
}

// Implementation name announced to clients.
const serverName = "tabcast"

// schemas caches the tools' inferred input schemas across servers (the
// HTTP handler makes one server per request).
var schemas = mcp.NewSchemaCache()

// NewServer returns an MCP server whose tools call b.
func NewServer(b Backend, version string) *mcp.Server {
	if version == "" {
		version = "dev"
	}
	s := mcp.NewServer(&mcp.Implementation{Name: serverName, Title: "Tabcast browser sessions", Version: version},
		&mcp.ServerOptions{
			Instructions: instructions,
			SchemaCache:  schemas,
		})
	addTools(s, b)
	s.AddReceivingMiddleware(codeSDKErrors)
	return s
}

// codeSDKErrors gives the SDK's own tool errors (arguments that do not
// match the input schema) a stable code first, like the tools' errors.
func codeSDKErrors(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if r, ok := res.(*mcp.CallToolResult); ok && err == nil && r.IsError && r.GetError() != nil {
			r.Content = []mcp.Content{&mcp.TextContent{Text: "invalid_argument: " + r.GetError().Error() +
				" — hint: check the arguments against the tool's input schema"}}
		}
		return res, err
	}
}

const instructions = `Tabcast runs real Chromium sessions that people may be watching and using at the same time.
Workflow: sessions_list (or session_create) to get a session id; browser_snapshot to read the page as an
accessibility tree where interactive elements carry refs like "e12"; then act on refs with browser_click,
browser_fill, browser_press, … Refs go stale when the page changes: on a stale_ref error take a new snapshot.
Errors start with a stable code (stale_ref, not_found, human_in_control, timeout, …) followed by a hint.
Pass an actionId to actions you might retry so a retry never runs twice. When a person must step in
(login, CAPTCHA, payment), call request_human.`

// StdioMain serves one MCP client over in and out (newline-delimited
// JSON-RPC, as a stdio server) until the client leaves or ctx ends.
func StdioMain(ctx context.Context, b Backend, version string, in io.Reader, out io.Writer) error {
	t := &mcp.IOTransport{Reader: io.NopCloser(in), Writer: nopWriteCloser{out}}
	err := NewServer(b, version).Run(ctx, t)
	if err == nil || errors.Is(err, io.EOF) || (ctx.Err() != nil && errors.Is(err, ctx.Err())) {
		return nil
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type backendKey struct{}

// HTTPHandler serves MCP over streamable HTTP. The caller authenticates
// each request before it reaches the handler; newBackend binds a Backend to
// the request's user, and a failure answers 401 with the API's JSON error.
//
// The handler is stateless: every request is bound afresh, so a request
// always acts as the user who sent it (no Mcp-Session-Id to hijack), and
// nothing lives between requests. Answers are plain JSON, not SSE, and
// server-to-client requests (sampling, elicitation) are not available.
// The SDK's DNS-rebinding guard (loopback address, foreign Host) is off:
// it is for unauthenticated local servers and would refuse the appliance
// behind a reverse proxy on the same host; the caller's authentication
// (and its Origin check of cookie logins) is what guards this handler.
func HTTPHandler(newBackend func(r *http.Request) (Backend, error), version string) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(r *http.Request) *mcp.Server {
		b, _ := r.Context().Value(backendKey{}).(Backend)
		if b == nil {
			return nil
		}
		return NewServer(b, version)
	}, &mcp.StreamableHTTPOptions{
		Stateless:                    true,
		JSONResponse:                 true,
		PropagateRequestCancellation: true,
		DisableLocalhostProtection:   true,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := newBackend(r)
		if err != nil || b == nil {
			e := errcode.New(errcode.PermissionDenied, "not allowed to use the agent API")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(errcode.HTTPStatus(e.Code))
			_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": e})
			return
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), backendKey{}, b)))
	})
}

// HumanResultOf reads an agent request_human result as the tool's answer.
func HumanResultOf(res *agent.Result) HumanResult {
	if out := agent.HumanOutcomeOf(res); out.Done {
		return HumanResult{Status: "done", By: out.By}
	}
	return HumanResult{Status: "timeout"}
}
