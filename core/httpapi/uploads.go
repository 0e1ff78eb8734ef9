package httpapi

import (
	"fmt"
	"net/http"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/audit"
)

// uploads lists the session's upload area: the files its agent may set on
// the page's file inputs (agent command upload).
func (a *api) uploads(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	list, err := agent.ListUploads(s)
	if err != nil {
		a.uploadFailed(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "uploads": list})
}

// putUpload stores the request body as one file of the session's upload
// area (at most agent.MaxUploadBytes; the name is a plain file name).
func (a *api) putUpload(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if err := agent.CheckUploadName(name); err != nil {
		a.uploadFailed(w, r, err)
		return
	}
	if r.ContentLength > agent.MaxUploadBytes {
		writeError(w, http.StatusRequestEntityTooLarge, APIError{Code: CodeTooLarge, Message: fmt.Sprintf("a file may have at most %d bytes", agent.MaxUploadBytes)})
		return
	}
	up, err := agent.SaveUpload(s, name, http.MaxBytesReader(w, r.Body, agent.MaxUploadBytes+1))
	if err != nil {
		a.uploadFailed(w, r, err)
		return
	}
	a.audit(r, audit.Record{Action: "session.upload", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusCreated, map[string]any{"ok": true, "upload": up})
}

func (a *api) uploadFailed(w http.ResponseWriter, r *http.Request, err error) {
	e := agent.AsError(err)
	status := agentStatus(e.Code)
	if e.Code == action.CodeTooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	if status >= 500 {
		a.o.Logger.Warn("upload failed", "code", e.Code, "err", err)
	}
	writeError(w, status, APIError{Code: e.Code, Message: e.Message, Hint: e.Hint, Recoverable: e.Recoverable})
}
