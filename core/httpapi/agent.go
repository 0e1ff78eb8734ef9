package httpapi

import (
	"net/http"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/snapshot"
)

// agentStatus maps the agent path's codes to HTTP (docs/protocol.md).
func agentStatus(code string) int {
	switch code {
	case snapshot.CodeStaleRef, snapshot.CodeAmbiguous, snapshot.CodeNotVisible, snapshot.CodeObscured,
		agent.CodeHumanInControl, agent.CodeNotReady, action.CodeConflict, action.CodeStalePage, action.CodeNoDialog:
		return http.StatusConflict
	case snapshot.CodeNotFound:
		return http.StatusNotFound
	case action.CodeInvalidArgument, agent.CodeUnknownCommand, action.CodeTooLarge, action.CodeUnknownKind, agent.CodeUnsupported:
		return http.StatusUnprocessableEntity
	case action.CodeQueueFull, action.CodeRateLimited, agent.CodeTooManyTabs:
		return http.StatusTooManyRequests
	case action.CodeNavigationBlocked, action.CodeShortcutBlocked, action.CodeNotAllowed, agent.CodeEvalDisabled, agent.CodeForbidden:
		return http.StatusForbidden
	case snapshot.CodeTimeout, action.CodeOutcomeUnknown: // action.CodeTimeout is the same code
		return http.StatusGatewayTimeout
	case action.CodeFailed:
		return http.StatusBadGateway
	case action.CodeClosed, action.CodeStaleGeneration:
		return http.StatusGone
	}
	return http.StatusInternalServerError
}

// agentCommand runs one agent command on a session (POST
// /api/v1/sessions/{id}/agent). The caller acts as an agent producer in
// the session's dispatcher, beside the people in the panel.
func (a *api) agentCommand(w http.ResponseWriter, r *http.Request) {
	if a.o.Agent == nil {
		writeError(w, http.StatusNotFound, APIError{Code: CodeNotFound, Message: "no such endpoint"})
		return
	}
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	var req agent.Request
	if !decodeBody(w, r, &req) {
		return
	}
	// A command in flight (a wait, a request for a person) stops when the
	// caller's access is withdrawn.
	gr := a.o.Auth.Guard.Hold("agent", principal(r), access.LevelOperate, sessionLevel(s))
	defer gr.Release()
	ctx, cancel := gr.Bind(r.Context())
	defer cancel()
	res, err := a.o.Agent.Do(ctx, s, principal(r).User, req)
	if gr.Withdrawn() {
		// Whatever the command returned (a wait ends with a result), the
		// caller no longer holds the right to it.
		writeError(w, http.StatusForbidden, APIError{Code: CodePermissionDenied, Message: "access withdrawn while the command ran; it may have taken effect"})
		return
	}
	if err != nil {
		e := agent.AsError(err)
		status := agentStatus(e.Code)
		if status >= 500 && status != http.StatusGatewayTimeout && status != http.StatusBadGateway {
			a.o.Logger.Warn("agent command failed", "command", req.Command, "code", e.Code, "err", err)
		}
		writeError(w, status, APIError{Code: e.Code, Message: e.Message, Hint: e.Hint, Recoverable: e.Recoverable})
		return
	}
	if req.Command == "navigate" {
		a.audit(r, audit.Record{Action: "agent.navigate", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	}
	writeJSON(w, http.StatusOK, res)
}
