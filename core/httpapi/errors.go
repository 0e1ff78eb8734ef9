package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/session"
)

// errorBody is the body of every failed API call.
type errorBody struct {
	OK    bool           `json:"ok"`
	Error *errcode.Error `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError answers e with the status the errcode table gives its code.
func writeError(w http.ResponseWriter, e *errcode.Error) {
	writeErrorStatus(w, errcode.HTTPStatus(e.Code), e)
}

// writeErrorStatus answers e with another status than the table's, for the
// few answers where the status says more than the code (a request body
// over its limit is 413, an argument over its limit 422).
func writeErrorStatus(w http.ResponseWriter, status int, e *errcode.Error) {
	writeJSON(w, status, errorBody{Error: e})
}

// fromError maps internal errors to stable codes: an *errcode.Error passes
// through, the session's sentinel errors get their code here. The message
// never carries internal detail (addresses, paths, stacks): that goes to
// the log. The status is errcode.HTTPStatus of the code.
func fromError(err error) *errcode.Error {
	if e, ok := errcode.As(err); ok {
		// Policy refusals carry their own stable code and a safe message
		// (never the refused URL).
		return e
	}
	switch {
	case errors.Is(err, session.ErrProfileInUse):
		return errcode.New(errcode.ProfileInUse, "that profile is open in another session").WithHint("close it first")
	case errors.Is(err, session.ErrBadProxy):
		// Not the error's text: it may name the proxy's host.
		return errcode.New(errcode.BadProxy, "proxy: want http:// or socks5://[user:password@]host:port, reachable under the egress policy")
	case errors.Is(err, session.ErrBadProfile):
		return errcode.New(errcode.InvalidArgument, "profile: want 1..32 of a-z 0-9 -")
	case errors.Is(err, session.ErrNotFound):
		// Not recoverable: retrying cannot bring a session back.
		return errcode.New(errcode.NotFound, "no such session").WithHint("list sessions with GET /api/v1/sessions").WithRecoverable(false)
	case errors.Is(err, session.ErrCapacity):
		return errcode.New(errcode.CapacityExceeded, "the appliance is at its session or viewer limit").WithHint("close a session or raise sessions.max / sessions.maxViewers")
	case errors.Is(err, session.ErrUnavailable):
		return errcode.New(errcode.BrowserUnavailable, "the browser is not available").WithHint("check `tabcast doctor` and the log")
	case errors.Is(err, session.ErrNotReady):
		return errcode.New(errcode.NotReady, "the session is not ready").WithHint("read the session snapshot")
	case errors.Is(err, session.ErrCodec):
		return errcode.New(errcode.CodecUnsupported, "codec not available on this appliance")
	case errors.Is(err, errTimeout):
		return errcode.New(errcode.Timeout, "the browser did not answer in time")
	}
	return errcode.New(errcode.Internal, "internal error").WithHint("see the appliance log")
}
