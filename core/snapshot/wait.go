package snapshot

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/errcode"
)

// WaitFor lists conditions on the main document; Wait returns when all of
// the set ones hold.
type WaitFor struct {
	Selector    string         // an element matches
	Visible     bool           // ... and the first match is visible
	Hidden      string         // no visible element matches this selector
	Text        string         // document.body.innerText contains it
	URLContains string         // location.href contains it
	URLPattern  *regexp.Regexp // location.href matches it
	// Poll is the polling interval (default 100 ms).
	Poll time.Duration
}

// Condition is the state of one condition.
type Condition struct {
	Name   string `json:"name"` // selector, visible, hidden, text, url
	Want   string `json:"want"`
	Met    bool   `json:"met"`
	Detail string `json:"detail,omitempty"`
}

// WaitResult is the state of the conditions when Wait returned.
type WaitResult struct {
	Met        bool          `json:"met"`
	Conditions []Condition   `json:"conditions"`
	URL        string        `json:"url"`
	Elapsed    time.Duration `json:"elapsed"`
}

// Wait polls the conditions until they all hold or ctx ends. On timeout it
// returns the last state (what was met and what was not) together with an
// *errcode.Error of errcode.Timeout; other errors (the page is gone) have a nil result
// only if nothing was ever evaluated.
func Wait(ctx context.Context, p Page, w WaitFor) (*WaitResult, error) {
	start := time.Now()
	if w.Poll <= 0 {
		w.Poll = 100 * time.Millisecond
	}
	if w.Selector == "" && w.Hidden == "" && w.Text == "" && w.URLContains == "" && w.URLPattern == nil {
		return nil, newErr(errcode.InvalidArgument, "set Selector, Hidden, Text, URLContains or URLPattern", "no wait condition")
	}
	args, _ := json.Marshal(map[string]any{"sel": w.Selector, "vis": w.Visible, "hidden": w.Hidden, "text": w.Text})
	expr := `((a) => {
		const vis = (el) => { if (!el) return false; const r = el.getBoundingClientRect(); if (r.width === 0 && r.height === 0) return false;
			return el.checkVisibility ? el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true}) : true; };
		const o = {url: location.href};
		if (a.sel) { const l = document.querySelectorAll(a.sel); o.count = l.length; o.visible = vis(l[0]); }
		if (a.hidden) { o.hiddenOK = ![...document.querySelectorAll(a.hidden)].some(vis); }
		if (a.text) { o.text = !!document.body && document.body.innerText.includes(a.text); }
		return o;
	})(` + string(args) + `)`
	var last *WaitResult
	tick := time.NewTicker(w.Poll)
	defer tick.Stop()
	for {
		res, err := waitOnce(ctx, p.Target(), expr, w)
		if err == nil {
			res.Elapsed = time.Since(start)
			last = res
			if res.Met {
				return res, nil
			}
		} else if ctx.Err() == nil {
			if errcode.CodeOf(err) == errcode.InvalidArgument {
				return nil, err
			}
			// A navigation in progress can fail an evaluation: retry.
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = &WaitResult{Elapsed: time.Since(start)}
			}
			last.Elapsed = time.Since(start)
			return last, errcode.Wrap(errcode.Timeout, ctx.Err(), "wait ended before all conditions held: "+unmet(last)).
				WithHint("inspect Conditions, take a snapshot, or wait longer")
		case <-tick.C:
		}
	}
}

func unmet(r *WaitResult) string {
	var s []string
	for _, c := range r.Conditions {
		if !c.Met {
			s = append(s, c.Name+" "+c.Want)
		}
	}
	if len(s) == 0 {
		return "not evaluated"
	}
	return strings.Join(s, ", ")
}

func waitOnce(ctx context.Context, s cdp.Session, expr string, w WaitFor) (*WaitResult, error) {
	yes := true
	r, err := cdp.Call(ctx, s, runtime.Evaluate, runtime.EvaluateParams{Expression: expr, ReturnByValue: &yes})
	if err != nil {
		return nil, err
	}
	if r.ExceptionDetails != nil {
		return nil, newErr(errcode.InvalidArgument, "check the CSS selector syntax", "wait condition failed: %s", r.ExceptionDetails.Text)
	}
	var o struct {
		URL      string `json:"url"`
		Count    int    `json:"count"`
		Visible  bool   `json:"visible"`
		HiddenOK bool   `json:"hiddenOK"`
		Text     bool   `json:"text"`
	}
	if err := json.Unmarshal(r.Result.Value, &o); err != nil {
		return nil, err
	}
	res := &WaitResult{URL: o.URL, Met: true}
	add := func(c Condition) {
		res.Conditions = append(res.Conditions, c)
		res.Met = res.Met && c.Met
	}
	if w.Selector != "" {
		add(Condition{Name: "selector", Want: w.Selector, Met: o.Count > 0, Detail: plural(o.Count, "match")})
		if w.Visible {
			add(Condition{Name: "visible", Want: w.Selector, Met: o.Visible})
		}
	}
	if w.Hidden != "" {
		add(Condition{Name: "hidden", Want: w.Hidden, Met: o.HiddenOK})
	}
	if w.Text != "" {
		add(Condition{Name: "text", Want: w.Text, Met: o.Text})
	}
	if w.URLContains != "" {
		add(Condition{Name: "url", Want: w.URLContains, Met: strings.Contains(o.URL, w.URLContains), Detail: o.URL})
	}
	if w.URLPattern != nil {
		add(Condition{Name: "url", Want: w.URLPattern.String(), Met: w.URLPattern.MatchString(o.URL), Detail: o.URL})
	}
	return res, nil
}

func plural(n int, w string) string {
	if n == 1 {
		return "1 " + w
	}
	return strconv.Itoa(n) + " " + w + "es"
}
