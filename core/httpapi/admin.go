package httpapi

import (
	"context"
	"errors"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/signaling"
)

// userName is the form of a user name in API paths and bodies.
var userName = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

// tokensOn writes the refusal of a token call when there are no tokens
// (auth.mode none: every caller is the local admin already).
func (a *api) tokensOn(w http.ResponseWriter, r *http.Request) bool {
	if !require(w, r, access.ScopeAdmin) {
		return false
	}
	if a.o.Auth.Tokens == nil {
		writeError(w, errcode.New(errcode.AuthDisabled, "API tokens need authentication, and auth.mode is none").WithHint("set auth.mode: local to use tokens"))
		return false
	}
	return true
}

func (a *api) listTokens(w http.ResponseWriter, r *http.Request) {
	if !a.tokensOn(w, r) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "tokens": a.o.Auth.Tokens.List()})
}

type tokenRequest struct {
	Name   string   `json:"name"`
	User   string   `json:"user"`
	Role   string   `json:"role"`
	Scopes []string `json:"scopes"`
	// TTL like "720h"; "" never expires.
	TTL string `json:"ttl"`
}

func (a *api) createToken(w http.ResponseWriter, r *http.Request) {
	if !a.tokensOn(w, r) {
		return
	}
	var req tokenRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.User == "" {
		req.User = principal(r).User
	}
	if !userName.MatchString(req.User) {
		writeError(w, errcode.New(errcode.InvalidArgument, "user: want 1..64 of A-Z a-z 0-9 . _ @ -"))
		return
	}
	if !a.o.Auth.Guard.HasUser(req.User) {
		// A token acts as a user: one for nobody would not work.
		writeError(w, errcode.New(errcode.InvalidArgument, "user: no such user").WithHint("add the user first (`tabcast users add`)"))
		return
	}
	role, ok := access.ParseRole(req.Role)
	if !ok {
		writeError(w, errcode.New(errcode.InvalidArgument, "role: want admin, operator or viewer"))
		return
	}
	var ttl time.Duration
	if req.TTL != "" {
		d, err := time.ParseDuration(req.TTL)
		if err != nil || d < time.Minute || d > 5*365*24*time.Hour {
			writeError(w, errcode.New(errcode.InvalidArgument, `ttl: a duration from "1m" to "43800h", or "" for none`))
			return
		}
		ttl = d
	}
	if len(req.Scopes) == 0 {
		req.Scopes = []string{access.ScopeRead, access.ScopeControl}
	}
	secret, info, err := a.o.Auth.Tokens.Create(req.Name, req.User, role, req.Scopes, ttl)
	if err != nil {
		writeError(w, errcode.New(errcode.InvalidArgument, err.Error()))
		return
	}
	a.audit(r, audit.Record{Action: "token.create", Outcome: audit.OK, Detail: "token " + info.ID + " for " + info.User + " (" + string(info.Role) + ")"})
	// The secret is in this response and nowhere else.
	writeJSON(w, http.StatusCreated, map[string]any{"ok": true, "token": secret, "info": info})
}

func (a *api) revokeToken(w http.ResponseWriter, r *http.Request) {
	if !a.tokensOn(w, r) {
		return
	}
	info, ok, err := a.o.Auth.Tokens.Revoke(r.PathValue("id"))
	if err != nil {
		a.fail(w, r, err)
		return
	}
	if !ok {
		writeError(w, errcode.New(errcode.NotFound, "no such token").WithRecoverable(false))
		return
	}
	// What the token opened (viewers, agent calls) ends before the answer.
	a.o.Auth.Guard.Recheck()
	a.audit(r, audit.Record{Action: "token.revoke", Outcome: audit.OK, Detail: "token " + info.ID})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (a *api) auditLog(w http.ResponseWriter, r *http.Request) {
	if !require(w, r, access.ScopeAdmin) {
		return
	}
	n := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 500 {
			writeError(w, errcode.New(errcode.InvalidArgument, "limit: want 1..500"))
			return
		}
	}
	recs := a.o.Auth.Audit.Recent(n)
	if recs == nil {
		recs = []audit.Record{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "records": recs})
}

type inviteRequest struct {
	User string `json:"user"`
}

func (a *api) invite(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	var req inviteRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if !userName.MatchString(req.User) {
		writeError(w, errcode.New(errcode.InvalidArgument, "user: want 1..64 of A-Z a-z 0-9 . _ @ -"))
		return
	}
	if !s.Invite(req.User) {
		// 409, not the table's 429: the session's invitation list is full,
		// waiting does not free a place.
		writeErrorStatus(w, http.StatusConflict, errcode.New(errcode.CapacityExceeded, "too many invitations on this session"))
		return
	}
	a.audit(r, audit.Record{Action: "session.invite", Session: audit.HashSession(s.ID()), Outcome: audit.OK, Detail: "viewer " + req.User})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "session": s.Status()})
}

func (a *api) uninvite(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	user := r.PathValue("user")
	s.Uninvite(user)
	// The uninvited viewer's socket and peer end before the answer.
	a.o.Auth.Guard.Recheck()
	a.audit(r, audit.Record{Action: "session.uninvite", Session: audit.HashSession(s.ID()), Outcome: audit.OK, Detail: "viewer " + user})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "session": s.Status()})
}

type controlRequest struct {
	Action string `json:"action"` // take | release
}

// control takes or releases a person's exclusive control of a session.
func (a *api) control(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	var req controlRequest
	if !decodeBody(w, r, &req) {
		return
	}
	p := principal(r)
	switch req.Action {
	case "take":
		if err := s.TakeControl(p.User); err != nil {
			if errors.Is(err, session.ErrHumanInControl) {
				writeError(w, errcode.New(errcode.HumanInControl, "another person holds control"))
				return
			}
			writeError(w, errcode.New(errcode.Conflict, "this session's control policy is shared: everyone acts at once").WithHint("create the session with \"control\": \"exclusive\"").WithRecoverable(false))
			return
		}
	case "release":
		s.ReleaseControl(p.User, p.Role == access.RoleAdmin)
	default:
		writeError(w, errcode.New(errcode.InvalidArgument, "action: take or release"))
		return
	}
	a.audit(r, audit.Record{Action: "session.control." + req.Action, Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "session": s.Status()})
}

// humanDone marks an agent's request for a person done.
func (a *api) humanDone(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	if !s.HumanDone(r.PathValue("rid"), principal(r).User) {
		writeError(w, errcode.New(errcode.NotFound, "no such request (already answered or given up)").WithRecoverable(false))
		return
	}
	a.audit(r, audit.Record{Action: "session.human_done", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

// thumbnail serves the session's newest picture as a JPEG still.
func (a *api) thumbnail(w http.ResponseWriter, r *http.Request) {
	s, ok := a.visible(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	img, at, err := s.Thumbnail(ctx)
	if err != nil {
		writeError(w, errcode.New(errcode.NotFound, "no picture yet"))
		return
	}
	w.Header().Set("Content-Type", "image/jpeg")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Last-Modified", at.UTC().Format(http.TimeFormat))
	_, _ = w.Write(img)
}

// downloads lists what the session's page downloaded (operators only: a
// download may hold anything the page had).
func (a *api) downloads(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	list, err := s.Downloads()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "downloads": list})
}

func (a *api) download(w http.ResponseWriter, r *http.Request) {
	s, ok := a.operable(w, r)
	if !ok {
		return
	}
	f, err := s.OpenDownload(r.PathValue("name"))
	if err != nil {
		writeError(w, errcode.New(errcode.NotFound, "no such download").WithHint("list them with GET /api/v1/sessions/{id}/downloads").WithRecoverable(false))
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		a.fail(w, r, err)
		return
	}
	// Served as an attachment, never rendered in the panel's origin.
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": st.Name()}))
	w.Header().Set("Content-Security-Policy", "sandbox")
	a.audit(r, audit.Record{Action: "session.download", Session: audit.HashSession(s.ID()), Outcome: audit.OK})
	http.ServeContent(w, r, "", st.ModTime(), f)
}

// sessionLevel is what a principal may do on s as it stands now: the rule
// of visible and operable, re-checked by the guard on every change.
func sessionLevel(s *session.Session) func(access.Principal) access.Level {
	return func(p access.Principal) access.Level {
		switch {
		case !p.CanSee(s.Owner(), s.Invited(p.User)):
			return access.LevelNone
		case p.CanOperate(s.Owner()):
			return access.LevelOperate
		}
		return access.LevelView
	}
}

// signal admits a viewer to the signaling socket of a session they may see;
// only those who may operate it get an input producer. The socket holds a
// grant: when access is withdrawn it ends (or loses its input) at once.
func (a *api) signal(w http.ResponseWriter, r *http.Request) {
	s, ok := a.visible(w, r)
	if !ok {
		return
	}
	p := principal(r)
	gr := a.o.Auth.Guard.Hold("signaling", p, access.LevelView, sessionLevel(s))
	defer gr.Release()
	ctx := signaling.WithViewer(r.Context(), signaling.Viewer{Name: p.User, Input: gr.CanInput(), Access: gr})
	sid := audit.HashSession(s.ID())
	a.audit(r, audit.Record{Action: "session.attach", Session: sid, Outcome: audit.OK})
	a.o.Signal.ServeHTTP(w, r.WithContext(ctx))
	a.audit(r, audit.Record{Action: "session.detach", Session: sid, Outcome: audit.OK})
}
