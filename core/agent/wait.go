package agent

// Wait: for a selector, text, URL, load state, network idle or a function, bounded.

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/snapshot"
)

// Load states of wait.
const (
	LoadDOMContentLoaded = "domcontentloaded"
	LoadLoad             = "load"
	LoadNetworkIdle      = "networkidle"
)

// networkQuiet is how long no request may be in flight for networkidle.
const networkQuiet = 500 * time.Millisecond

// predicateJS wraps a wait function: an expression, or a function to call;
// a promise is awaited; the answer is its truthiness.
func predicateJS(src string) string {
	return "(async () => { let v = (\n" + src + "\n); if (typeof v === \"function\") v = v(); return !!(await v); })()"
}

// wait waits until every condition holds: the page conditions of
// snapshot.Wait, a load state, a JavaScript predicate.
func (d *driver) wait(ctx context.Context, r Request) (*Result, error) {
	w := snapshot.WaitFor{Selector: r.Selector, Text: r.Text, URLContains: r.URL}
	if r.What == "visible" {
		w.Visible = true
	}
	if r.What == "hidden" {
		w.Hidden, w.Selector = r.Selector, ""
	}
	if r.Value != "" {
		re, err := regexp.Compile(r.Value)
		if err != nil {
			return nil, errorf(errcode.InvalidArgument, false, "", "bad URL pattern: %v", err)
		}
		w.URLPattern = re
	}
	pageConds := w.Selector != "" || w.Hidden != "" || w.Text != "" || w.URLContains != "" || w.URLPattern != nil
	load := strings.ToLower(r.Load)
	switch load {
	case "", LoadLoad, LoadDOMContentLoaded, LoadNetworkIdle:
	default:
		return nil, errorf(errcode.InvalidArgument, false, "load: load, domcontentloaded or networkidle", "load state %q", r.Load)
	}
	if r.Function != "" {
		if err := d.evalAllowed(ctx, "wait function"); err != nil {
			return nil, err
		}
		if len(r.Function) > maxEvalBytes {
			return nil, errorf(errcode.InvalidArgument, false, "", "function over 64 KiB")
		}
	}
	if load == "" && r.Function == "" {
		if !pageConds {
			return nil, errorf(errcode.InvalidArgument, false, "give text, selector, url, value (URL regexp), load or function", "no wait condition")
		}
		return waitResult(snapshot.Wait(ctx, d.page(ctx), w))
	}
	start := time.Now()
	var nt *netTracker
	if load == LoadNetworkIdle {
		var err error
		if nt, err = d.network(ctx); err != nil {
			return nil, err
		}
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last []snapshot.Condition
	var lastPage *snapshot.WaitResult
	for {
		conds, err := d.moreConditions(ctx, load, r.Function, nt)
		if err != nil {
			return nil, err
		}
		if conds != nil {
			last = conds
		}
		if conds != nil && allMet(conds) {
			if !pageConds {
				return combined(true, start, conds, nil), nil
			}
			wr, err := snapshot.Wait(ctx, d.page(ctx), w)
			if wr != nil {
				lastPage = wr
			}
			if err != nil && errcode.CodeOf(err) != errcode.Timeout {
				return nil, err
			}
			if err == nil {
				// Still true now that the page conditions hold?
				again, err := d.moreConditions(ctx, load, r.Function, nt)
				if err != nil {
					return nil, err
				}
				if again != nil && allMet(again) {
					return combined(true, start, again, wr), nil
				}
			}
		}
		select {
		case <-ctx.Done():
			if pageConds && lastPage == nil {
				// The page conditions' state for the report.
				qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 300*time.Millisecond)
				lastPage, _ = snapshot.Wait(qctx, d.page(qctx), w)
				cancel()
			}
			return combined(false, start, last, lastPage), nil
		case <-tick.C:
		}
	}
}

func waitResult(wr *snapshot.WaitResult, err error) (*Result, error) {
	if wr != nil && errcode.CodeOf(err) == errcode.Timeout {
		// A wait that runs out is a result, not a loss: it says what held.
		return &Result{OK: false, Summary: "timed out", Data: wr}, nil
	}
	if err != nil {
		return nil, err
	}
	return &Result{OK: true, Summary: "conditions met", Data: wr}, nil
}

func allMet(cs []snapshot.Condition) bool {
	for _, c := range cs {
		if !c.Met {
			return false
		}
	}
	return true
}

// combined joins the load and function conditions with the page's.
func combined(met bool, start time.Time, more []snapshot.Condition, page *snapshot.WaitResult) *Result {
	wr := &snapshot.WaitResult{Met: met, Conditions: append([]snapshot.Condition{}, more...), Elapsed: time.Since(start)}
	if page != nil {
		wr.Conditions = append(wr.Conditions, page.Conditions...)
		wr.URL = page.URL
	}
	if !met {
		wr.Met = false
		return &Result{OK: false, Summary: "timed out", Data: wr}
	}
	return &Result{OK: true, Summary: "conditions met", Data: wr}
}

// moreConditions evaluates the load state and the predicate once. nil
// conditions: the page could not be asked now (navigating); try again.
func (d *driver) moreConditions(ctx context.Context, load, fn string, nt *netTracker) ([]snapshot.Condition, error) {
	var out []snapshot.Condition
	pg := d.s.Page()
	if load != "" {
		var state string
		if err := pg.Evaluate(ctx, "document.readyState", &state); err != nil {
			return nil, nil
		}
		c := snapshot.Condition{Name: "load", Want: load, Detail: "readyState " + state}
		switch load {
		case LoadDOMContentLoaded:
			c.Met = state == "interactive" || state == "complete"
		case LoadLoad:
			c.Met = state == "complete"
		case LoadNetworkIdle:
			n, quiet := nt.state()
			c.Met = state == "complete" && n == 0 && quiet >= networkQuiet
			c.Detail += ", " + strconv.Itoa(n) + " request(s) in flight"
		}
		out = append(out, c)
	}
	if fn != "" {
		yes := true
		res, err := cdp.Call(ctx, pg.Target(), runtime.Evaluate, runtime.EvaluateParams{
			Expression: predicateJS(fn), ReturnByValue: &yes, AwaitPromise: &yes, Timeout: evalTimeout(ctx),
		})
		if err != nil {
			return nil, nil
		}
		c := snapshot.Condition{Name: "function", Want: "truthy"}
		if res.ExceptionDetails != nil {
			if res.ExceptionDetails.Exception != nil && res.ExceptionDetails.Exception.ClassName == "SyntaxError" {
				return nil, errorf(errcode.InvalidArgument, false, "fix the function", "the function does not parse: %s", exceptionText(res.ExceptionDetails))
			}
			c.Detail = "threw: " + exceptionText(res.ExceptionDetails)
		} else if res.Result != nil {
			c.Met = string(res.Result.Value) == "true"
		}
		out = append(out, c)
	}
	return out, nil
}

// netTracker counts the page's requests in flight (Network events of the
// page session), for networkidle.
type netTracker struct {
	mu       sync.Mutex
	inflight map[network.RequestID]struct{}
	quietAt  time.Time // when the count last became 0
	stop     func()
	page     *browser.Page // the tab it listens to
}

func (n *netTracker) onEvent(ev any) {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch e := ev.(type) {
	case *network.EventRequestWillBeSent:
		if len(n.inflight) < 10000 {
			n.inflight[e.RequestID] = struct{}{}
		}
	case *network.EventLoadingFinished:
		n.done(e.RequestID)
	case *network.EventLoadingFailed:
		n.done(e.RequestID)
	}
}

func (n *netTracker) done(id network.RequestID) {
	if _, ok := n.inflight[id]; !ok {
		return
	}
	delete(n.inflight, id)
	if len(n.inflight) == 0 {
		n.quietAt = time.Now()
	}
}

// state: requests in flight, and for how long none have been.
func (n *netTracker) state() (int, time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if len(n.inflight) > 0 {
		return len(n.inflight), 0
	}
	return 0, time.Since(n.quietAt)
}

// network starts the driver's tracker once: listen, then enable the
// Network domain (response bodies are not kept). Requests that began
// before the first networkidle wait are not known to it.
func (d *driver) network(ctx context.Context) (*netTracker, error) {
	pg := d.s.Page()
	if d.net != nil && d.net.page == pg {
		return d.net, nil
	}
	if d.net != nil && d.net.stop != nil {
		d.net.stop() // the session switched tabs
	}
	d.net = nil
	n := &netTracker{inflight: map[network.RequestID]struct{}{}, quietAt: time.Now(), page: pg}
	stop, err := pg.Listen(n.onEvent)
	if err != nil {
		return nil, fmt.Errorf("agent: network listen: %w", err)
	}
	small := int64(1)
	if _, err := cdp.Call(ctx, pg.Target(), network.Enable, network.EnableParams{MaxTotalBufferSize: &small, MaxResourceBufferSize: &small, MaxPostDataSize: &small}); err != nil {
		stop()
		return nil, fmt.Errorf("agent: network enable: %w", err)
	}
	n.stop = stop
	d.net = n
	return n, nil
}

func (d *driver) stopNetwork() {
	d.mu.Lock()
	n := d.net
	d.net = nil
	d.mu.Unlock()
	if n != nil && n.stop != nil {
		n.stop()
	}
}
