package snapshot

import (
	"errors"
	"fmt"
)

// Stable error codes for agents. They never change meaning.
const (
	CodeStaleRef        = "stale_ref"        // the ref no longer names a live element: take a new snapshot
	CodeNotFound        = "not_found"        // nothing matched a selector or role+name query
	CodeAmbiguous       = "ambiguous"        // more than one element matched
	CodeNotVisible      = "not_visible"      // the element has no box on screen
	CodeObscured        = "obscured"         // another element is on top of the click point
	CodeTimeout         = "timeout"          // Wait ran out of time (see WaitResult)
	CodeInvalidArgument = "invalid_argument" // a bad selector, option or ref syntax
)

// Error is the typed error of the package: Code is stable and machine
// readable, Message says what happened, Hint says what to do next.
// Recoverable is false when retrying the same call cannot help.
type Error struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	Hint        string `json:"hint,omitempty"`
	Recoverable bool   `json:"recoverable"`
	Err         error  `json:"-"`
}

func (e *Error) Error() string {
	s := "snapshot: " + e.Code + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf returns the Code of an *Error in err's chain, or "".
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func staleRef(ref, why string, cause error) *Error {
	return &Error{
		Code:        CodeStaleRef,
		Message:     fmt.Sprintf("ref %q is stale: %s", ref, why),
		Hint:        "take a new snapshot and use the refs it returns",
		Recoverable: true,
		Err:         cause,
	}
}

func newErr(code, hint, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Hint: hint, Recoverable: code != CodeInvalidArgument}
}

func asErr(err error, target **Error) bool { return errors.As(err, target) }
