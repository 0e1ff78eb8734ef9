package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/mcp"
	"github.com/tabcast/tabcast/core/session"
)

// mcpBackend serves the MCP tools in-process for one authenticated caller,
// with the same rules as the REST API.
type mcpBackend struct {
	a *api
	p access.Principal
}

func (b mcpBackend) ListSessions(context.Context) ([]mcp.SessionInfo, error) {
	out := []mcp.SessionInfo{}
	for _, s := range b.a.o.Sessions.List() {
		invited := false
		for _, u := range s.Invited {
			invited = invited || u == b.p.User
		}
		if b.p.CanSee(s.Owner, invited) {
			out = append(out, mcp.SessionInfo{ID: s.ID, State: string(s.State), Title: s.Title, URL: s.URL})
		}
	}
	return out, nil
}

func (b mcpBackend) CreateSession(ctx context.Context, url string) (mcp.SessionInfo, error) {
	if !b.p.CanCreate() {
		return mcp.SessionInfo{}, errcode.New(errcode.Forbidden, "your role or token does not allow creating sessions")
	}
	if url != "" {
		if err := CheckURL(url); err != nil {
			return mcp.SessionInfo{}, errcode.New(errcode.InvalidArgument, "url: "+err.Error())
		}
		if err := b.a.o.Sessions.CheckURL(ctx, url); err != nil {
			return mcp.SessionInfo{}, err
		}
	}
	s, err := b.a.o.Sessions.Create(ctx, session.CreateOptions{URL: url, Owner: b.p.User})
	if err != nil {
		return mcp.SessionInfo{}, fromError(err)
	}
	snap := s.Status()
	return mcp.SessionInfo{ID: snap.ID, State: string(snap.State), Title: snap.Title, URL: snap.URL}, nil
}

// operable is the API's rule: unknown and invisible sessions look alike.
func (b mcpBackend) operable(id string) (*session.Session, error) {
	s, err := b.a.o.Sessions.Get(id)
	if err != nil || !b.p.CanSee(s.Owner(), s.Invited(b.p.User)) {
		return nil, errcode.New(errcode.NotFound, "no such session").WithHint("list them with sessions_list").WithRecoverable(false)
	}
	if !b.p.CanOperate(s.Owner()) {
		return nil, errcode.New(errcode.Forbidden, "you may watch this session but not operate it")
	}
	return s, nil
}

func (b mcpBackend) Agent(ctx context.Context, id string, req agent.Request) (*agent.Result, error) {
	s, err := b.operable(id)
	if err != nil {
		return nil, err
	}
	// A command in flight stops when the caller may no longer operate the
	// session (token revoked, user deleted, role lowered).
	gr := b.a.o.Auth.Guard.Hold("mcp agent", b.p, access.LevelOperate, sessionLevel(s))
	defer gr.Release()
	ctx, cancel := gr.Bind(ctx)
	defer cancel()
	// The principal rides on ctx for commands that check scopes (eval),
	// whatever context the MCP SDK hands its tool handlers.
	res, err := b.a.o.Agent.Do(access.WithPrincipal(ctx, b.p), s, b.p.User, req)
	if gr.Withdrawn() {
		// Whatever the command returned (a wait ends with a result), the
		// caller no longer holds the right to it.
		return nil, errcode.New(errcode.PermissionDenied, "access withdrawn while the command ran; it may have taken effect")
	}
	return res, err
}

func (b mcpBackend) RequestHuman(ctx context.Context, id, reason string, timeout time.Duration) (mcp.HumanResult, error) {
	res, err := b.Agent(ctx, id, agent.Request{Command: "request_human", Reason: reason, TimeoutMs: int(timeout.Milliseconds())})
	if err != nil {
		return mcp.HumanResult{}, err
	}
	return mcp.HumanResultOf(res), nil
}

// mcpHandler serves MCP over streamable HTTP at /mcp for the authenticated
// caller (withAuth ran before it). The handler is stateless: each request
// is authenticated afresh, so a withdrawn token or login gets no further
// request in; a call in flight holds a grant (Agent) and ends with a
// permission_denied tool error when access is withdrawn, the client's
// connection kept.
func (a *api) mcpHandler() http.Handler {
	return mcp.HTTPHandler(func(r *http.Request) (mcp.Backend, error) {
		p, ok := access.FromContext(r.Context())
		if !ok || a.o.Agent == nil {
			return nil, errors.New("not authenticated")
		}
		return mcpBackend{a: a, p: p}, nil
	}, "tabcast")
}
