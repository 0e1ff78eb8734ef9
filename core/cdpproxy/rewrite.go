package cdpproxy

import (
	"context"
	"encoding/json"
	"time"

	jsonv2 "github.com/chromedp/cdproto/cdp/jsonv2"

	"github.com/tabcast/tabcast/core/audit"
	"github.com/tabcast/tabcast/core/errcode"
)

// rewrite handles the methods the proxy forwards with parameters of its
// own: the session's context and download directory, the navigation
// policy before a navigation, the session's viewport.
func (p *proxy) rewrite(m *message) {
	params := map[string]json.RawMessage{}
	if len(m.Params) > 0 {
		if err := json.Unmarshal(m.Params, &params); err != nil {
			p.answer(m, nil, invalidParams(m.Method, "params must be an object"))
			return
		}
	}
	switch m.Method {
	case "Browser.setDownloadBehavior", "Page.setDownloadBehavior":
		p.downloadBehavior(m, params)
	case "Browser.cancelDownload", "Browser.resetPermissions", "Storage.getCookies", "Storage.setCookies", "Storage.clearCookies":
		// The session's context, whatever the client named (checkScope
		// refused another one already).
		if p.bctx != "" {
			params["browserContextId"] = encode(p.bctx)
		}
		p.forward(m, encode(params))
	case "Page.navigate":
		var u string
		if json.Unmarshal(params["url"], &u) != nil {
			p.answer(m, nil, invalidParams(m.Method, "url must be a string"))
			return
		}
		p.checked(m, u, func() { p.forwardThen(m, m.Params, nil) })
	case "Fetch.continueRequest":
		var u string
		if raw, ok := params["url"]; ok {
			if json.Unmarshal(raw, &u) != nil {
				p.answer(m, nil, invalidParams(m.Method, "url must be a string"))
				return
			}
		}
		if u == "" {
			p.forward(m, m.Params)
			return
		}
		// A request the client redirects goes where the policy allows:
		// the appliance's own interception and the egress proxy hold
		// behind it too, this answers the client with the reason.
		p.checked(m, u, func() { p.forward(m, m.Params) })
	case "Emulation.setDeviceMetricsOverride", "Emulation.clearDeviceMetricsOverride":
		p.queue(p.iq, func() { p.viewport(m, params) })
	}
}

// policyWait bounds a navigation policy check (it may resolve a name).
const policyWait = 10 * time.Second

// checked runs then when url passes the navigation policy; the check runs
// beside the reader (it may wait for DNS).
func (p *proxy) checked(m *message, url string, then func()) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx, cancel := contextWithTimeout(p.ctx, policyWait)
		err := p.s.CheckURL(ctx, url)
		cancel()
		if m.Method == "Page.navigate" {
			p.sv.audit(p, "cdp."+m.Method, outcomeOf(err), codeOf(err))
		}
		if err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		then()
	}()
}

// downloadBehavior keeps the client's behavior and sends files to the
// session's own directory, where the session's downloads API finds them.
func (p *proxy) downloadBehavior(m *message, params map[string]json.RawMessage) {
	var behavior string
	_ = json.Unmarshal(params["behavior"], &behavior)
	dir := p.s.DownloadDir()
	switch {
	case behavior == "deny" || behavior == "default" && dir == "":
		behavior = "deny"
	case dir == "":
		p.refuse(m, refusal(m.Method, "downloads are off for this session"))
		return
	case behavior == "default":
		behavior = "allow"
	}
	params["behavior"] = encode(behavior)
	if behavior == "deny" {
		delete(params, "downloadPath")
	} else {
		params["downloadPath"] = encode(dir)
	}
	method := m.Method
	if method == "Page.setDownloadBehavior" {
		// The deprecated page form sets the page's context: the browser
		// form does the same without reaching beyond it.
		method = "Browser.setDownloadBehavior"
	}
	if p.bctx != "" {
		params["browserContextId"] = encode(p.bctx)
	}
	p.mu.Lock()
	p.downloads = true
	p.mu.Unlock()
	fm := *m
	fm.Method = method
	if m.SessionID != "" && method != m.Method {
		fm.SessionID = ""
		// Answered under the client's session.
		p.forwardAs(m, &fm, encode(params))
		return
	}
	p.forward(&fm, encode(params))
}

// forwardAs sends fm and answers the client as m.
func (p *proxy) forwardAs(m, fm *message, params json.RawMessage) {
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		err := p.call(p.upstream(fm.SessionID), fm.Method, jsonv2.Value(params), nil)
		if err != nil {
			p.answer(m, nil, fromErr(m.Method, err))
			return
		}
		p.answer(m, nil, nil)
	}()
}

func contextWithTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, d)
}

func outcomeOf(err error) string {
	if err == nil {
		return audit.OK
	}
	if c := errcode.CodeOf(err); c == errcode.NotAllowed || c == errcode.NavigationBlocked || c == errcode.HumanInControl {
		return audit.Denied
	}
	return audit.Failed
}

func codeOf(err error) string {
	if err == nil {
		return ""
	}
	return errcode.CodeOf(err)
}
