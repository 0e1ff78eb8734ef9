package cdpproxy

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzFilter: whatever a client sends, the filter does not panic, and
// every refusal is a well-formed CDP error answer naming the method.
func FuzzFilter(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"method":"Browser.close"}`,
		`{"id":2,"method":"Target.createBrowserContext","params":{}}`,
		`{"id":3,"method":"Target.attachToTarget","params":{"targetId":"OTHER","flatten":true}}`,
		`{"id":4,"method":"Storage.getCookies","params":{"browserContextId":"OTHER"}}`,
		`{"id":5,"method":"Runtime.evaluate","params":{"expression":"1"},"sessionId":"S1"}`,
		`{"id":6,"method":"SystemInfo.getInfo"}`,
		`{"id":7,"method":"Tethering.bind","params":{"port":1}}`,
		`{"id":8,"method":"Input.dispatchMouseEvent","params":{"type":"mousePressed","x":1e308,"y":-1},"sessionId":"S1"}`,
		`{"id":9,"method":"Page.navigate","params":{"url":"http://169.254.169.254/"},"sessionId":"S1"}`,
		`{"id":10,"method":"Fancy.newMethod","params":[]}`,
		`{"id":11,"method":"Target.setAutoAttach","params":{"autoAttach":true,"waitForDebuggerOnStart":true,"flatten":true}}`,
		`{"id":12,"method":"Browser.setDownloadBehavior","params":{"behavior":"allow","downloadPath":"/etc"}}`,
		`{"id":"x","method":1}`, `[]`, `null`, `{"id":13}`, `{"id":14,"method":"Page.enable","sessionId":"UNKNOWN"}`,
		`{"id":15,"method":"Target.detachFromTarget","params":{"sessionId":"S2"}}`,
	} {
		f.Add([]byte(s))
	}
	sc := scope{contextID: "CTX", target: func(id string) bool { return id == "T1" }, session: func(id string) bool { return id == "S1" }}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, e := parse(raw)
		if e == nil {
			if m.SessionID != "" && !sc.session(m.SessionID) {
				e = refusal(m.Method, "not a session of this client")
			}
		}
		if e == nil {
			_, e = decide(m.Method, m.SessionID != "")
		}
		if e == nil {
			e = sc.checkScope(m.Method, m.Params)
		}
		if e == nil {
			return
		}
		out := encode(reply{ID: m.ID, Error: e, SessionID: m.SessionID})
		var back struct {
			ID    *int64 `json:"id"`
			Error *struct {
				Code    int64  `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			Result json.RawMessage `json:"result"`
		}
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("refusal is not JSON: %s", out)
		}
		if back.ID == nil || back.Error == nil || back.Result != nil || back.Error.Message == "" || back.Error.Code > -32000 || back.Error.Code < -32768 {
			t.Fatalf("refusal is not a CDP error answer: %s", out)
		}
		if e.Code == codeNotAllowed && !strings.Contains(back.Error.Message, "not_allowed") {
			t.Fatalf("a refusal does not say not_allowed: %s", out)
		}
		if e.Code == codeNotAllowed && !strings.HasPrefix(back.Error.Message, safeMethod(m.Method)+":") {
			t.Fatalf("a refusal does not name the method: %s", out)
		}
	})
}

// TestRefusedMethods: the methods the issue names are refused with
// not_allowed, on the browser's session and on a target's.
func TestRefusedMethods(t *testing.T) {
	for _, c := range []struct {
		method   string
		onTarget bool
	}{
		{"Browser.close", false}, {"Browser.crash", false}, {"Browser.crashGpuProcess", false},
		{"Target.createBrowserContext", false}, {"Target.disposeBrowserContext", false},
		{"Target.exposeDevToolsProtocol", false}, {"Browser.grantPermissions", false},
		{"Browser.setPermission", false}, {"SystemInfo.getInfo", false}, {"SystemInfo.getProcessInfo", false},
		{"Tethering.bind", false}, {"Storage.clearDataForOrigin", false}, {"Tracing.start", false},
		{"Target.setDiscoverTargets", true}, {"Target.exposeDevToolsProtocol", true},
		{"Input.setIgnoreInputEvents", true}, {"Tracing.start", true}, {"Memory.getBrowserSamplingProfile", true},
		{"SystemInfo.getInfo", true}, {"Browser.close", true}, {"Page.crash", true}, {"Chromium.addedLater", true},
	} {
		_, e := decide(c.method, c.onTarget)
		if e == nil || e.Code != codeNotAllowed || !strings.Contains(e.Message, c.method+": not_allowed") {
			t.Errorf("%s (on a target: %v): %+v, want not_allowed", c.method, c.onTarget, e)
		}
	}
	for _, c := range []struct {
		method   string
		onTarget bool
		want     rule
	}{
		{"Runtime.evaluate", true, ruleForward}, {"Page.captureScreenshot", true, ruleForward},
		{"Input.dispatchMouseEvent", true, ruleInput}, {"Input.insertText", true, ruleInput},
		{"Target.setAutoAttach", false, ruleTarget}, {"Target.setAutoAttach", true, ruleForward},
		{"Browser.setDownloadBehavior", false, ruleRewrite}, {"Page.navigate", true, ruleRewrite},
	} {
		r, e := decide(c.method, c.onTarget)
		if e != nil || r != c.want {
			t.Errorf("%s (on a target: %v): rule %v, %+v; want rule %v", c.method, c.onTarget, r, e, c.want)
		}
	}
	sc := scope{contextID: "CTX", target: func(id string) bool { return id == "T1" }, session: func(id string) bool { return id == "S1" }}
	for _, p := range []string{`{"browserContextId":"OTHER"}`, `{"targetId":"T2"}`, `{"sessionId":"S2"}`} {
		if e := sc.checkScope("Target.getTargetInfo", json.RawMessage(p)); e == nil || e.Code != codeNotAllowed {
			t.Errorf("scope %s: %+v, want not_allowed", p, e)
		}
	}
	for _, p := range []string{`{"browserContextId":"CTX"}`, `{"targetId":"T1"}`, `{"sessionId":"S1"}`, `{}`} {
		if e := sc.checkScope("Target.getTargetInfo", json.RawMessage(p)); e != nil {
			t.Errorf("scope %s: %+v, want allowed", p, e)
		}
	}
}
