package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/internal/testenv"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

type noPlugin[T any] struct{}

func (noPlugin[T]) Get(context.Context) (T, uint64, error) {
	var zero T
	return zero, 0, errors.New("no plugin")
}
func (noPlugin[T]) Call(context.Context, func(T) error) error { return errors.New("no plugin") }
func (noPlugin[T]) Report(uint64, error)                      {}

// TestUploads: a file put over HTTP lands in the session's upload area and
// the agent's upload command sets it on the page's file input; names with a
// path are refused, and only operators of the session may put files.
func TestUploads(t *testing.T) {
	testenv.NeedsChromium(t)
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `<!doctype html><title>Form</title><body><input id=f type=file><p id=out></p>
<script>document.getElementById('f').addEventListener('change', (e) => {
  document.getElementById('out').textContent = [...e.target.files].map(f => f.name + ':' + f.size).join(','); });</script>`)
	}))
	defer page.Close()
	lctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := browser.Launch(lctx, browser.Options{Headless: true})
	if err != nil {
		t.Fatalf("launch chromium: %v", err)
	}
	defer b.Close()
	pol := input.DefaultPolicy()
	pol.DenyPrivate = false
	m := session.NewManager(session.Config{Width: 800, Height: 600, MaxSessions: 1, MaxViewers: 1, DownloadRoot: t.TempDir(), Input: pol},
		b, noPlugin[capture.Capturer]{}, noPlugin[encoder.Encoder]{}, []string{"vp8"})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		m.Shutdown(ctx)
	}()
	sv := agent.NewService(nil)
	defer sv.Close()
	s, err := m.Create(lctx, session.CreateOptions{URL: page.URL, Owner: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokens, al := tokensAndAudit(t, dir)
	control, _, err := tokens.Create("ann", "ann", access.RoleOperator, []string{access.ScopeRead, access.ScopeControl}, 0)
	if err != nil {
		t.Fatal(err)
	}
	readOnly, _, _ := tokens.Create("ann-ro", "ann", access.RoleOperator, []string{access.ScopeRead}, 0)
	other, _, _ := tokens.Create("bob", "bob", access.RoleOperator, []string{access.ScopeRead, access.ScopeControl}, 0)
	srv := httptest.NewServer(New(Options{Sessions: m, Agent: sv, Auth: AuthOptions{Tokens: tokens, Logins: access.NewLogins(time.Hour, time.Hour), Audit: al}}))
	defer srv.Close()

	call := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := "/api/v1/sessions/" + s.ID()
	if st, body := call("PUT", base+"/uploads/cv.pdf", control, strings.Repeat("%", 4321)); st != 201 || !strings.Contains(body, `"size":4321`) {
		t.Fatalf("put: %d %s", st, body)
	}
	if st, body := call("GET", base+"/uploads", control, ""); st != 200 || !strings.Contains(body, `"name":"cv.pdf"`) {
		t.Fatalf("list: %d %s", st, body)
	}
	// The last two: "report<U+202E>fdp.exe" shows as "reportexe.pdf"; an
	// isolate around an extension.
	for _, bad := range []string{"%2E%2E", "..%2Fescape", "%2Fetc%2Fpasswd", ".hidden", "a%5Cb", "report%E2%80%AEfdp.exe", "a%E2%81%A6.pdf%E2%81%A9"} {
		if st, body := call("PUT", base+"/uploads/"+bad, control, "x"); st != 422 || !strings.Contains(body, `"invalid_argument"`) {
			t.Errorf("put %s: %d %s", bad, st, body)
		}
	}
	if st, _ := call("PUT", base+"/uploads/x.txt", readOnly, "x"); st != 403 {
		t.Errorf("read-only token: %d", st)
	}
	if st, _ := call("PUT", base+"/uploads/x.txt", other, "x"); st != 404 {
		t.Errorf("another user's session: %d", st)
	}

	// The agent sets the uploaded file on the page's input.
	st, body := call("POST", base+"/agent", control, `{"command":"upload","selector":"#f","files":["cv.pdf"]}`)
	if st != 200 {
		t.Fatalf("agent upload: %d %s", st, body)
	}
	_, body = call("POST", base+"/agent", control, `{"command":"get","what":"text","selector":"#out"}`)
	var got struct {
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil || got.Data["text"] != "cv.pdf:4321" {
		t.Errorf("the page saw %s", body)
	}
	if st, body := call("POST", base+"/agent", control, `{"command":"upload","selector":"#f","files":["../tokens.json"]}`); st != 422 || !strings.Contains(body, "invalid_argument") {
		t.Errorf("agent upload with a path: %d %s", st, body)
	}
	if st, body := call("POST", base+"/agent", control, `{"command":"upload","selector":"#f","files":["nope.pdf"]}`); st != 404 || !strings.Contains(body, "not_found") {
		t.Errorf("agent upload of a missing file: %d %s", st, body)
	}
	// eval is off by default: 403 forbidden naming the config key.
	if st, body := call("POST", base+"/agent", control, `{"command":"eval","expression":"1"}`); st != 403 || !strings.Contains(body, "agent.allowEval") {
		t.Errorf("eval: %d %s", st, body)
	}
}
