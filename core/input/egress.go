package input

import (
	"context"
	"strings"

	"github.com/chromedp/cdproto/fetch"
	"github.com/tabcast/tabcast/core/errcode"
)

// The session's Chromium reaches the network only through the core's egress
// proxy (core/egress), which decides on the address it connects to. When it
// refuses a document, the page shows the proxy's "blocked" page (http) or
// Chromium's tunnel error (https): the navigate action then answers
// navigation_blocked, as for a URL the policy refuses up front, instead of
// success with a block page or a bare net error.

// egressRefusedHeader marks the egress proxy's refusal page (core/egress
// writes it). A site sending it itself only gets its own page reported as
// blocked.
const egressRefusedHeader = "x-tabcast-egress"

// ErrEgressBlocked is a navigation the egress proxy refused.
var ErrEgressBlocked = errcode.New(errcode.NavigationBlocked, "navigation blocked by the egress policy")

// SetEgressCount gives the executor the session's egress refusal count
// (every connection the proxy refused), read around a navigation whose
// tunnel failed. Call it before the first Execute.
func (e *Executor) SetEgressCount(count func() uint64) {
	e.smu.Lock()
	e.egressCount = count
	e.smu.Unlock()
}

// EgressMark is what a navigation compares with afterwards (EgressBlocked).
type EgressMark struct{ documents, connections uint64 }

// EgressMark is taken before a navigation.
func (e *Executor) EgressMark() EgressMark {
	e.smu.Lock()
	count := e.egressCount
	e.smu.Unlock()
	m := EgressMark{documents: e.egressRefused.Load()}
	if count != nil {
		m.connections = count()
	}
	return m
}

// EgressBlocked tells whether the navigation that ran since m, ending with
// Chromium's net error errorText ("" for none), was refused by the egress
// proxy: a main-frame refusal page came back, or the tunnel failed while
// the proxy refused a connection.
func (e *Executor) EgressBlocked(m EgressMark, errorText string) bool {
	if e.egressRefused.Load() > m.documents {
		return true
	}
	if errorText != "net::ERR_TUNNEL_CONNECTION_FAILED" {
		return false
	}
	e.smu.Lock()
	count := e.egressCount
	e.smu.Unlock()
	return count != nil && count() > m.connections
}

// checkResponse lets a document response through, counting a main-frame
// one that is the egress proxy's refusal page.
func (e *Executor) checkResponse(ev *fetch.EventRequestPaused) {
	refused := false
	for _, h := range ev.ResponseHeaders {
		if h != nil && strings.EqualFold(h.Name, egressRefusedHeader) && h.Value == "refused" {
			refused = true
		}
	}
	if refused {
		e.smu.Lock()
		main := e.mainFrame == "" || ev.FrameID == e.mainFrame
		e.smu.Unlock()
		if main {
			e.egressRefused.Add(1)
		}
		e.log.Debug("input: document refused by the egress proxy", "main_frame", main)
	}
	ctx, cancel := context.WithTimeout(e.ctx, stateCallTimeout)
	defer cancel()
	if err := e.t.Call(ctx, fetch.CommandContinueResponse, fetch.ContinueResponseParams{RequestID: ev.RequestID}, nil); err != nil && e.ctx.Err() == nil {
		e.log.Debug("input: answer paused response", "err", err)
	}
}
