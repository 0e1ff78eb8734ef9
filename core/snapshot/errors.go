package snapshot

import (
	"fmt"

	"github.com/tabcast/tabcast/core/errcode"
)

// The package's errors are *errcode.Error: Code is stable and machine
// readable (stale_ref, not_found, ambiguous, not_visible, obscured,
// timeout, invalid_argument), Message says what happened, Hint says what
// to do next.

func staleRef(ref, why string, cause error) *errcode.Error {
	return errcode.Wrap(errcode.StaleRef, cause, fmt.Sprintf("ref %q is stale: %s", ref, why)).
		WithHint("take a new snapshot and use the refs it returns")
}

func newErr(code, hint, format string, args ...any) *errcode.Error {
	return errcode.Newf(code, format, args...).WithHint(hint)
}
