// Package errcode is the appliance's one error vocabulary: every stable
// error code a client can see, the one Error type that carries a code, and
// one table from code to HTTP status and recoverability. The HTTP API, the
// agent API, MCP, signaling error frames and DataChannel acks all build
// their errors here, so a code means the same thing on every edge.
//
// It sits at the bottom of the import graph (it imports only the standard
// library) so that every core package can use it. Plugins never import
// core: the plugin SDK keeps its own contract codes, and core maps them to
// these at the edge where it calls the plugin.
//
// Codes are plain strings on the wire and stable: clients switch on them
// (docs/protocol.md has the tables). Never change a value; add a new code
// instead, with its entry in table (codes.go). TestEveryCodeHasAnEntry
// fails when a constant lacks one.
package errcode

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// Error is a refusal or failure with a stable code. Message is safe to show
// and to log: it never quotes a client's input (typed text, clipboard,
// refused URLs) nor internal detail (addresses, paths, stacks) — that stays
// in Err, which is never serialized. Hint says what to do next.
// Recoverable is false when retrying the same call cannot help.
//
// The JSON shape is the error body of the HTTP and agent APIs. Signaling
// frames and DataChannel acks carry only Code and Message.
type Error struct {
	Code        string `json:"code"`
	Message     string `json:"message"`
	Hint        string `json:"hint,omitempty"`
	Recoverable bool   `json:"recoverable"`
	Err         error  `json:"-"`
}

func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is reports whether target is an *Error with the same code, so that
// errors.Is(err, errcode.New(errcode.StaleRef, "")) asks "is this a stale
// ref?" whatever the message.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// WithHint sets the hint and returns e, for one-line construction.
func (e *Error) WithHint(hint string) *Error {
	e.Hint = hint
	return e
}

// WithRecoverable overrides the table's recoverability for this one error
// (an edge that knows better, such as "not ready" while shutting down).
func (e *Error) WithRecoverable(recoverable bool) *Error {
	e.Recoverable = recoverable
	return e
}

// New is the constructor: an *Error with code and message, recoverable as
// the table says.
func New(code, message string) *Error {
	return &Error{Code: code, Message: message, Recoverable: Recoverable(code)}
}

// Newf is New with a formatted message.
func Newf(code, format string, args ...any) *Error {
	return New(code, fmt.Sprintf(format, args...))
}

// Wrap is New keeping cause in the chain (for the log and errors.Is); the
// cause never reaches a client.
func Wrap(code string, cause error, message string) *Error {
	e := New(code, message)
	e.Err = cause
	return e
}

// As returns the first *Error in err's chain.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// CodeOf returns the code of the first *Error in err's chain, or "".
func CodeOf(err error) string {
	if e, ok := As(err); ok {
		return e.Code
	}
	return ""
}

// From turns any error into an *Error for an edge: an *Error in the chain
// passes through; a deadline becomes timeout; anything else is internal,
// with a message that leaks nothing (log err itself).
func From(err error) *Error {
	if e, ok := As(err); ok {
		return e
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return Wrap(Timeout, err, "the browser did not answer in time")
	}
	return Wrap(Internal, err, "internal error").WithHint("see the appliance log")
}

// HTTPStatus is the status an HTTP answer carrying code has; 500 for a code
// without an entry (TestEveryCodeHasAnEntry keeps that from happening).
func HTTPStatus(code string) int {
	if in, ok := table[code]; ok {
		return in.status
	}
	return http.StatusInternalServerError
}

// Recoverable reports whether retrying (or recovering as the hint says,
// such as taking a new snapshot or waiting) can help after code.
func Recoverable(code string) bool { return table[code].recoverable }

// Known reports whether code is one of the constants.
func Known(code string) bool {
	_, ok := table[code]
	return ok
}
