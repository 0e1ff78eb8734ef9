package e2e

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct {
	rt    http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.rt.RoundTrip(r)
}

// TestMCP: a Go MCP client lists the tools over /mcp and logs in through a
// fixture by snapshot and refs.
func TestMCP(t *testing.T) {
	p := pages(t)
	ap := agentPages(t)
	a, s := startWithSession(t, p.URL+"/solid?c=556677")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connect := func(token string) (*mcp.ClientSession, error) {
		hc := &http.Client{Transport: bearer{http.DefaultTransport, token}}
		return mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx,
			&mcp.StreamableClientTransport{Endpoint: a.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, nil)
	}
	if cs, err := connect("tct_000000000000_wrong"); err == nil {
		cs.Close()
		t.Fatal("an MCP client with a wrong token connected")
	}
	cs, err := connect(a.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tl := range tools.Tools {
		names[tl.Name] = true
		if tl.Description == "" {
			t.Errorf("tool %s has no description", tl.Name)
		}
	}
	for _, want := range []string{"sessions_list", "browser_snapshot", "browser_click", "browser_fill", "request_human"} {
		if !names[want] {
			t.Errorf("no tool %s", want)
		}
	}
	callTool := func(name string, args map[string]any) string {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		if res.IsError {
			return "ERROR " + b.String()
		}
		return b.String()
	}
	if out := callTool("sessions_list", map[string]any{}); !strings.Contains(out, s.ID) {
		t.Fatalf("sessions_list: %s", out)
	}
	callTool("browser_navigate", map[string]any{"session": s.ID, "url": ap.URL + "/login"})
	snap := callTool("browser_snapshot", map[string]any{"session": s.ID, "interactive": true})
	ref := func(label string) string {
		m := regexp.MustCompile(regexp.QuoteMeta(label) + ` \[ref=(e\d+)\]`).FindStringSubmatch(snap)
		if m == nil {
			t.Fatalf("no %s in:\n%s", label, snap)
		}
		return m[1]
	}
	email, pw, submit := ref(`textbox "Email"`), ref(`textbox "Password"`), ref(`button "Log in"`)
	callTool("browser_fill", map[string]any{"session": s.ID, "ref": email, "text": "mcp@example.com"})
	callTool("browser_fill", map[string]any{"session": s.ID, "ref": pw, "text": "hunter2-secret"})
	if out := callTool("browser_click", map[string]any{"session": s.ID, "ref": submit}); strings.HasPrefix(out, "ERROR") {
		t.Fatalf("click: %s", out)
	}
	if out := callTool("browser_wait", map[string]any{"session": s.ID, "text": "Welcome", "timeoutMs": 10000}); strings.Contains(out, "not ok") || strings.HasPrefix(out, "ERROR") {
		t.Fatalf("wait: %s", out)
	}
	// A stale ref is a tool error with its code, not a broken session.
	if out := callTool("browser_click", map[string]any{"session": s.ID, "ref": submit}); !strings.HasPrefix(out, "ERROR stale_ref") {
		t.Errorf("stale click: %s", out)
	}
	if out := callTool("browser_snapshot", map[string]any{"session": s.ID}); !strings.Contains(out, `heading "Welcome mcp@example.com"`) {
		t.Errorf("after login: %s", out)
	}
}
