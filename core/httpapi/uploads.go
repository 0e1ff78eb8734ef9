package httpapi

import (
	"fmt"
	"net/http"

	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
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
	if hasBidiControl(name) {
		writeError(w, errcode.New(errcode.InvalidArgument, "name: bidirectional control characters (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C) are not allowed").WithHint("they make a name read differently from what it is (\"exe.pdf\" that is a .exe)"))
		return
	}
	if err := agent.CheckUploadName(name); err != nil {
		a.uploadFailed(w, r, err)
		return
	}
	if r.ContentLength > agent.MaxUploadBytes {
		// 413: the body, not an argument, is over its limit.
		writeErrorStatus(w, http.StatusRequestEntityTooLarge, errcode.New(errcode.TooLarge, fmt.Sprintf("a file may have at most %d bytes", agent.MaxUploadBytes)))
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
	e := errcode.From(err)
	status := errcode.HTTPStatus(e.Code)
	if e.Code == errcode.TooLarge {
		status = http.StatusRequestEntityTooLarge // the body, not an argument
	}
	if status >= 500 {
		a.o.Logger.Warn("upload failed", "code", e.Code, "err", err)
	}
	writeErrorStatus(w, status, e)
}

// hasBidiControl reports whether s holds a character that reorders the
// text around it: embeddings and overrides (U+202A–U+202E), isolates
// (U+2066–U+2069) and the marks (U+200E, U+200F, U+061C). A name with one
// shows a different extension than it has. They are format characters,
// not controls, so the control check of upload names lets them through.
func hasBidiControl(s string) bool {
	for _, c := range s {
		switch {
		case c >= 0x202A && c <= 0x202E, c >= 0x2066 && c <= 0x2069, c == 0x200E, c == 0x200F, c == 0x061C:
			return true
		}
	}
	return false
}
