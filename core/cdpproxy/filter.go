package cdpproxy

import (
	"encoding/json"
	"strings"
)

// The filter is an explicit allow list: a method is forwarded only when
// its domain (on a target's session) or the method itself (on the
// browser's session) is listed, so a method Chromium adds later is
// refused until someone reviews it. Every allowed command then passes the
// scope checks (checkScope): a browserContextId must be the session's, a
// targetId one of the session's targets, a sessionId one of the client's
// own sessions.

// rule is what the proxy does with an allowed method.
type rule int

const (
	ruleForward rule = iota + 1 // straight to Chromium
	ruleTarget                  // the proxy's own Target domain (target.go)
	ruleInput                   // through the session's dispatcher (input.go)
	ruleFenced                  // waits while a person holds control, then straight
	ruleRewrite                 // forwarded with parameters the proxy sets (rewrite.go)
)

// browserMethods are the methods allowed on the browser's own session.
var browserMethods = map[string]rule{
	"Browser.getVersion":          ruleForward,
	"Browser.getWindowForTarget":  ruleForward, // targetId checked
	"Browser.setDownloadBehavior": ruleRewrite,
	"Browser.cancelDownload":      ruleRewrite,
	"Browser.resetPermissions":    ruleRewrite,
	"Storage.getCookies":          ruleRewrite,
	"Storage.setCookies":          ruleRewrite,
	"Storage.clearCookies":        ruleRewrite,
	"Schema.getDomains":           ruleForward,

	"Target.setDiscoverTargets":       ruleTarget,
	"Target.setAutoAttach":            ruleTarget,
	"Target.getTargets":               ruleTarget,
	"Target.getBrowserContexts":       ruleTarget,
	"Target.createTarget":             ruleTarget,
	"Target.attachToTarget":           ruleTarget,
	"Target.attachToBrowserTarget":    ruleTarget, // a browser session of the client's own, filtered alike
	"Target.detachFromTarget":         ruleTarget,
	"Target.getTargetInfo":            ruleTarget,
	"Target.activateTarget":           ruleTarget,
	"Target.closeTarget":              ruleTarget,
	"Runtime.runIfWaitingForDebugger": ruleForward, // harmless on the browser
}

// pageDomains are the domains allowed on a target's session (a page, a
// tab, a frame or a worker of the session).
var pageDomains = map[string]bool{
	"Accessibility": true, "Animation": true, "Audits": true, "BackgroundService": true,
	"CacheStorage": true, "CSS": true, "Console": true, "DOM": true, "DOMDebugger": true,
	"DOMSnapshot": true, "DOMStorage": true, "Debugger": true, "DeviceOrientation": true,
	"Emulation": true, "EventBreakpoints": true, "Fetch": true, "HeapProfiler": true,
	"IndexedDB": true, "Inspector": true, "IO": true, "Input": true, "LayerTree": true,
	"Log": true, "Media": true, "Network": true, "Overlay": true, "Page": true,
	"Performance": true, "PerformanceTimeline": true, "Preload": true, "Profiler": true,
	"Runtime": true, "Schema": true, "Security": true, "ServiceWorker": true,
	"Storage": true, "Target": true, "WebAudio": true, "WebAuthn": true,
}

// pageMethods override pageDomains method by method: how an allowed
// method is handled, or 0 for a refusal (the reason in refusedWhy).
var pageMethods = map[string]rule{
	"Input.dispatchMouseEvent":         ruleInput,
	"Input.dispatchKeyEvent":           ruleInput,
	"Input.insertText":                 ruleInput,
	"Input.dispatchTouchEvent":         ruleFenced,
	"Input.imeSetComposition":          ruleFenced,
	"Input.dispatchDragEvent":          ruleFenced,
	"Input.setInterceptDrags":          ruleForward,
	"Input.cancelDragging":             ruleFenced,
	"Input.setIgnoreInputEvents":       0,
	"Input.synthesizePinchGesture":     0,
	"Input.synthesizeScrollGesture":    0,
	"Input.synthesizeTapGesture":       0,
	"Input.emulateTouchFromMouseEvent": 0,

	"Emulation.setDeviceMetricsOverride":   ruleRewrite, // the streamed tab: the session's viewport
	"Emulation.clearDeviceMetricsOverride": ruleRewrite,
	"Emulation.setVisibleSize":             0,

	"Page.navigate":            ruleRewrite, // the navigation policy first
	"Page.setDownloadBehavior": ruleRewrite,
	"Page.close":               ruleTarget,
	"Page.crash":               0,
	"Fetch.continueRequest":    ruleRewrite, // a changed url passes the policy

	"Network.setRequestInterception":        0,
	"Security.setIgnoreCertificateErrors":   0,
	"Security.setOverrideCertificateErrors": 0,
	"Storage.getCookies":                    ruleRewrite,
	"Storage.setCookies":                    ruleRewrite,
	"Storage.clearCookies":                  ruleRewrite,

	"Target.setAutoAttach":      ruleForward, // scoped to this target's children
	"Target.getTargetInfo":      ruleTarget,
	"Target.attachToTarget":     ruleTarget,
	"Target.detachFromTarget":   ruleTarget,
	"Target.getTargets":         ruleTarget,
	"Target.createTarget":       ruleTarget,
	"Target.activateTarget":     ruleTarget,
	"Target.closeTarget":        ruleTarget,
	"Target.getBrowserContexts": ruleTarget,
}

// pageTargetAllowed: the Target domain on a target's session is only what
// pageMethods lists (its discovery would show every context's targets).
func pageRule(method string) (rule, bool) {
	if r, ok := pageMethods[method]; ok {
		return r, r != 0
	}
	dom, _, ok := strings.Cut(method, ".")
	if !ok || dom == "Target" || !pageDomains[dom] {
		return 0, false
	}
	return ruleForward, true
}

// refusedWhy explains the refusals people ask about; the rest are "not on
// the allow list".
var refusedWhy = map[string]string{
	"Browser.close":                       "the browser is the appliance's",
	"Browser.crash":                       "the browser is the appliance's",
	"Browser.crashGpuProcess":             "the browser is the appliance's",
	"Browser.grantPermissions":            "permissions follow the appliance's policy",
	"Browser.setPermission":               "permissions follow the appliance's policy",
	"Target.createBrowserContext":         "a client sees one browser context, the session's",
	"Target.disposeBrowserContext":        "a client sees one browser context, the session's",
	"Target.exposeDevToolsProtocol":       "it would hand a page the whole browser",
	"Target.setDiscoverTargets":           "discovery is the browser session's",
	"Input.setIgnoreInputEvents":          "it would shut the people out",
	"Page.crash":                          "the session's people watch this page",
	"Emulation.setVisibleSize":            "the session's viewport is set with setDeviceMetricsOverride",
	"Network.setRequestInterception":      "use Fetch.enable",
	"Security.setIgnoreCertificateErrors": "certificate checks are the appliance's",
}

// decide is the filter's verdict on a method: the rule, or a refusal.
func decide(method string, onTarget bool) (rule, *cdpError) {
	if len(method) > maxMethodLen || method == "" {
		return 0, refusal(method, "not a CDP method")
	}
	var (
		r  rule
		ok bool
	)
	if onTarget {
		r, ok = pageRule(method)
	} else {
		r, ok = browserMethods[method]
	}
	if ok {
		return r, nil
	}
	why := refusedWhy[method]
	switch {
	case why != "":
	case strings.HasPrefix(method, "SystemInfo.") || strings.HasPrefix(method, "Tethering."):
		why = "it reaches beyond the session"
	case strings.HasPrefix(method, "Storage."):
		why = "storage of another context"
	default:
		why = "not on the allow list"
	}
	return 0, refusal(method, why)
}

// maxMethodLen bounds a method name (Chromium's longest is under 64).
const maxMethodLen = 128

// scope is what the scope checks need to know.
type scope struct {
	contextID string               // the session's browser context ("" = every context)
	target    func(id string) bool // a target of the session
	session   func(id string) bool // a session the client attached
}

// checkScope refuses a command whose parameters name another context, a
// target or a session that is not the client's.
func (sc scope) checkScope(method string, params json.RawMessage) *cdpError {
	if len(params) == 0 {
		return nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(params, &top); err != nil {
		return invalidParams(method, "params must be an object")
	}
	if v, ok := top["browserContextId"]; ok {
		var id string
		if json.Unmarshal(v, &id) != nil {
			return invalidParams(method, "browserContextId must be a string")
		}
		if id != "" && sc.contextID != "" && id != sc.contextID {
			return refusal(method, "another browser context")
		}
	}
	if v, ok := top["targetId"]; ok {
		var id string
		if json.Unmarshal(v, &id) != nil {
			return invalidParams(method, "targetId must be a string")
		}
		if sc.target == nil || !sc.target(id) {
			return refusal(method, "not a target of this session")
		}
	}
	if v, ok := top["sessionId"]; ok && method != "Target.attachToTarget" {
		var id string
		if json.Unmarshal(v, &id) != nil {
			return invalidParams(method, "sessionId must be a string")
		}
		if sc.session == nil || !sc.session(id) {
			return refusal(method, "not a session of this client")
		}
	}
	return nil
}

// knownDomains bound the metrics' domain label.
var knownDomains = func() map[string]bool {
	m := map[string]bool{"Browser": true, "Target": true, "SystemInfo": true, "Tethering": true, "Tracing": true, "Memory": true}
	for d := range pageDomains {
		m[d] = true
	}
	return m
}()

func domainLabel(method string) string {
	d, _, _ := strings.Cut(method, ".")
	if knownDomains[d] {
		return d
	}
	return "other"
}

func methodLabel(method string) string {
	if _, ok := browserMethods[method]; ok {
		return method
	}
	if _, ok := pageMethods[method]; ok {
		return method
	}
	if refusedWhy[method] != "" {
		return method
	}
	return domainLabel(method) + ".other"
}
