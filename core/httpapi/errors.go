package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/session"
)

// Stable error codes of the HTTP API (docs/protocol.md has the table).
const (
	CodeInvalidArgument    = "invalid_argument"
	CodeNotFound           = "not_found"
	CodeCapacityExceeded   = "capacity_exceeded"
	CodeBrowserUnavailable = "browser_unavailable"
	CodeNotReady           = "not_ready"
	CodeCodecUnsupported   = "codec_unsupported"
	CodeMethodNotAllowed   = "method_not_allowed"
	CodeTooLarge           = "too_large"
	CodeTimeout            = "timeout"
	CodeInternal           = "internal"
	CodeConflict           = "conflict"
	CodeProfileInUse       = "profile_in_use"
	CodeBadProxy           = "bad_proxy"
)

// APIError is the body of every failed API call.
type APIError struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	Hint        string `json:"hint,omitempty"`
	Recoverable bool   `json:"recoverable"`
}

type errorBody struct {
	OK    bool     `json:"ok"`
	Error APIError `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, e APIError) {
	writeJSON(w, status, errorBody{Error: e})
}

// fromError maps internal errors to stable codes. The message never carries
// internal detail (addresses, paths, stacks): that goes to the log.
func fromError(err error) (int, APIError) {
	var ae *action.Error
	if errors.As(err, &ae) {
		// Policy refusals carry their own stable code and a safe message
		// (never the refused URL).
		status := http.StatusConflict
		switch ae.Code {
		case action.CodeNavigationBlocked, action.CodeShortcutBlocked, action.CodeNotAllowed:
			status = http.StatusForbidden
		case action.CodeInvalidArgument, action.CodeTooLarge:
			status = http.StatusUnprocessableEntity
		case action.CodeTimeout, action.CodeOutcomeUnknown:
			status = http.StatusGatewayTimeout
		case action.CodeFailed:
			status = http.StatusBadGateway // the page, not the appliance, failed
		}
		return status, APIError{Code: ae.Code, Message: ae.Message, Recoverable: status != http.StatusForbidden}
	}
	switch {
	case errors.Is(err, session.ErrProfileInUse):
		return http.StatusConflict, APIError{Code: CodeProfileInUse, Message: "that profile is open in another session", Hint: "close it first", Recoverable: true}
	case errors.Is(err, session.ErrBadProxy):
		// Not the error's text: it may name the proxy's host.
		return http.StatusUnprocessableEntity, APIError{Code: CodeBadProxy, Message: "proxy: want http:// or socks5://[user:password@]host:port, reachable under the egress policy"}
	case errors.Is(err, session.ErrBadProfile):
		return http.StatusUnprocessableEntity, APIError{Code: CodeInvalidArgument, Message: "profile: want 1..32 of a-z 0-9 -"}
	case errors.Is(err, session.ErrNotFound):
		return http.StatusNotFound, APIError{Code: CodeNotFound, Message: "no such session", Hint: "list sessions with GET /api/v1/sessions"}
	case errors.Is(err, session.ErrCapacity):
		return http.StatusTooManyRequests, APIError{Code: CodeCapacityExceeded, Message: "the appliance is at its session or viewer limit", Hint: "close a session or raise sessions.max / sessions.maxViewers", Recoverable: true}
	case errors.Is(err, session.ErrUnavailable):
		return http.StatusServiceUnavailable, APIError{Code: CodeBrowserUnavailable, Message: "the browser is not available", Hint: "check `tabcast doctor` and the log", Recoverable: true}
	case errors.Is(err, session.ErrNotReady):
		return http.StatusConflict, APIError{Code: CodeNotReady, Message: "the session is not ready", Hint: "read the session snapshot", Recoverable: true}
	case errors.Is(err, session.ErrCodec):
		return http.StatusUnprocessableEntity, APIError{Code: CodeCodecUnsupported, Message: "codec not available on this appliance"}
	case errors.Is(err, errTimeout):
		return http.StatusGatewayTimeout, APIError{Code: CodeTimeout, Message: "the browser did not answer in time", Recoverable: true}
	}
	return http.StatusInternalServerError, APIError{Code: CodeInternal, Message: "internal error", Hint: "see the appliance log", Recoverable: true}
}
