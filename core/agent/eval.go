package agent

// Eval: JavaScript in the page, off by default (admin policy).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/errcode"
)

// maxEvalBytes caps the JSON of an eval result.
const maxEvalBytes = 64 << 10

// evalAllowed: the appliance allows it (agent.allowEval) and the caller
// holds the admin scope.
func (d *driver) evalAllowed(ctx context.Context, what string) error {
	if !d.sv.currentPolicy().AllowEval {
		return errorf(errcode.Forbidden, false, "an operator may allow it with the config key agent.allowEval: true (admin-scoped callers only)",
			"%s is turned off on this appliance", what)
	}
	if p, ok := access.FromContext(ctx); !ok || !p.Has(access.ScopeAdmin) {
		return errorf(errcode.Forbidden, false, "use an admin's token with the admin scope (agent.allowEval is on)", "%s needs the admin scope", what)
	}
	return nil
}

// evalTimeout leaves the page's script at most what is left of ctx, so a
// runaway loop is stopped in the renderer, not only abandoned here.
func evalTimeout(ctx context.Context) runtime.TimeDelta {
	dl, ok := ctx.Deadline()
	if !ok {
		return runtime.TimeDelta(maxTimeout.Milliseconds())
	}
	return runtime.TimeDelta(max(time.Until(dl).Milliseconds()-50, 10))
}

func (d *driver) eval(ctx context.Context, r Request) (*Result, error) {
	if err := d.evalAllowed(ctx, "eval"); err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.Expression) == "" || len(r.Expression) > maxEvalBytes {
		return nil, errorf(errcode.InvalidArgument, false, `expression: JavaScript such as "document.title" (at most 64 KiB)`, "no expression")
	}
	yes := true
	out, err := cdp.Call(ctx, d.s.Page().Target(), runtime.Evaluate, runtime.EvaluateParams{
		Expression: r.Expression, ReturnByValue: &yes, AwaitPromise: &yes, Timeout: evalTimeout(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("agent: eval: %w", err)
	}
	if out.ExceptionDetails != nil {
		return nil, errorf(errcode.InvalidArgument, true, "fix the expression", "the expression threw: %s", exceptionText(out.ExceptionDetails))
	}
	data := map[string]any{"value": nil, "truncated": false}
	if out.Result != nil {
		data["type"] = string(out.Result.Type)
		raw := []byte(out.Result.Value)
		switch {
		case len(raw) > maxEvalBytes:
			cut := raw[:maxEvalBytes]
			for len(cut) > 0 && !utf8.Valid(cut) {
				cut = cut[:len(cut)-1]
			}
			data["value"], data["truncated"] = string(cut), true
		case len(raw) > 0:
			data["value"] = json.RawMessage(raw)
		case out.Result.UnserializableValue != "":
			data["value"] = string(out.Result.UnserializableValue)
		}
	}
	sum := "evaluated"
	if data["truncated"] == true {
		sum += fmt.Sprintf("; the value's JSON was cut at %d bytes (value is a string)", maxEvalBytes)
	}
	return &Result{OK: true, Summary: sum, Data: data}, nil
}

// exceptionText is a short description of a page exception.
func exceptionText(e *runtime.ExceptionDetails) string {
	s := e.Text
	if e.Exception != nil && e.Exception.Description != "" {
		s = e.Exception.Description
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] // the message, not the stack
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
