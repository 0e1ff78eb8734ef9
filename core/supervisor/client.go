package supervisor

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/tabcast/tabcast/plugins"
)

// ErrWrongContract: the plugin's dispensed client does not serve the
// contract its caller asked for (a plugin of another kind, or a caller
// that named the wrong contract). Client.Get wraps it with the plugin name.
var ErrWrongContract = errors.New("plugin client does not serve the contract")

// Client is a handle seen through the contract T its kind serves (for
// example capture.Capturer, encoder.Encoder, turn.Relay), as Nomad's
// Dispense hands out typed plugins: the one type assertion on a plugin
// client is in Get, checked, so no caller can panic on a mismatch.
//
// A Client is as cheap as the *Handle it wraps; make one per contract with
// Dispense and keep it beside (or instead of) the handle.
type Client[T any] struct {
	h *Handle
}

// Dispense returns h's client typed as T; nil when h is nil (a plugin that
// is not configured), so that callers keep testing for nil.
func Dispense[T any](h *Handle) *Client[T] {
	if h == nil {
		return nil
	}
	return &Client[T]{h: h}
}

// Handle is the supervised plugin behind c.
func (c *Client[T]) Handle() *Handle { return c.h }

// Name is the plugin's name.
func (c *Client[T]) Name() string { return c.h.Name() }

// Get returns the running plugin's client and its generation, waiting
// (ctx-bounded) while the plugin (re)starts; see Handle for the errors. A
// client that does not serve T is an error wrapping ErrWrongContract.
func (c *Client[T]) Get(ctx context.Context) (T, uint64, error) {
	var zero T
	raw, gen, err := c.h.dispensed(ctx)
	if err != nil {
		return zero, 0, err
	}
	t, ok := raw.(T)
	if !ok {
		return zero, 0, fmt.Errorf("plugin %s: %w: client %T is not a %s", c.h.Name(), ErrWrongContract, raw, reflect.TypeFor[T]())
	}
	return t, gen, nil
}

// Call runs fn with the running plugin's client and returns fn's error (or
// Get's). When fn's error says the plugin is broken (see plugins.Broken) and ctx is
// still live, the failure is reported for the generation fn ran on, which
// restarts the plugin once however many callers report it: callers need
// not write that report themselves. A ctx that ended is the caller's
// doing, not the plugin's, and is never reported.
func (c *Client[T]) Call(ctx context.Context, fn func(T) error) error {
	t, gen, err := c.Get(ctx)
	if err != nil {
		return err
	}
	err = fn(t)
	if ctx.Err() == nil {
		c.Report(gen, err)
	}
	return err
}

// Report is Call's report for a client that outlives one call (an encoder
// stream, say): when err, from a call on generation gen, says the plugin
// is broken (plugins.Broken), the plugin is restarted, once per generation.
func (c *Client[T]) Report(gen uint64, err error) {
	if err != nil && plugins.Broken(err) {
		c.h.ReportFailure(gen, err)
	}
}
