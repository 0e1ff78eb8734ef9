package httpapi

import (
	"net/http"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
)

// agentCommand runs one agent command on a session (POST
// /api/v1/sessions/{id}/agent). The caller acts as an agent producer in
// the session's dispatcher, beside the people in the panel.
func (a *api) agentCommand(w http.ResponseWriter, r *http.Request) {
	if a.o.Agent == nil {
		writeError(w, errcode.New(errcode.NotFound, "no such endpoint").WithRecoverable(false))
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
		// caller no longer holds the right to it: 403, it was authenticated.
		writeErrorStatus(w, http.StatusForbidden, errcode.New(errcode.PermissionDenied, "access withdrawn while the command ran; it may have taken effect"))
		return
	}
	if err != nil {
		e := errcode.From(err)
		status := errcode.HTTPStatus(e.Code)
		if status >= 500 && status != http.StatusGatewayTimeout && status != http.StatusBadGateway {
			a.o.Logger.Warn("agent command failed", "command", req.Command, "code", e.Code, "err", err)
		}
		writeErrorStatus(w, status, e)
		return
	}
	if req.Command == "navigate" {
		a.audit(r, audit.Record{Action: "agent.navigate", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	}
	writeJSON(w, http.StatusOK, res)
}
