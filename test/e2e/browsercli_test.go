package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/test/harness"
)

// TestBrowserCLI drives a session with `tabcast browser`: human output,
// --json, and exit codes by error class.
func TestBrowserCLI(t *testing.T) {
	p := pages(t)
	ap := agentPages(t)
	a, s := startWithSession(t, p.URL+"/solid?c=445566")
	bin, err := harness.Binaries()
	if err != nil {
		t.Fatal(err)
	}
	// An explicit empty config keeps a machine's /etc/tabcast out.
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, string, int) {
		t.Helper()
		full := append([]string{"browser"}, args...)
		full = append(full, "--url", a.URL, "--token-file", filepath.Join(a.DataDir, "agent-token"), "--session", s.ID,
			"--config", cfgFile)
		cmd := exec.Command(filepath.Join(bin, "tabcast"), full...)
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "TABCAST_") {
				cmd.Env = append(cmd.Env, kv)
			}
		}
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return out.String(), errb.String(), code
	}
	if out, errs, code := run("navigate", ap.URL+"/login"); code != 0 {
		t.Fatalf("navigate: %d %s %s", code, out, errs)
	}
	out, errs, code := run("snapshot", "-i")
	if code != 0 || !strings.Contains(out, `textbox "Email" [ref=`) {
		t.Fatalf("snapshot -i: %d\n%s\n%s", code, out, errs)
	}
	ref := func(label string) string {
		m := regexp.MustCompile(regexp.QuoteMeta(label) + ` \[ref=(e\d+)\]`).FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("no ref for %s in\n%s", label, out)
		}
		return "@" + m[1]
	}
	email, pw, submit := ref(`textbox "Email"`), ref(`textbox "Password"`), ref(`button "Log in"`)
	for _, c := range [][]string{{"fill", email, "cli@example.com"}, {"fill", pw, "hunter2-secret"}, {"click", submit}} {
		if o, e, code := run(c...); code != 0 {
			t.Fatalf("%v: %d %s %s", c, code, o, e)
		}
	}
	if o, e, code := run("wait", "--text", "Welcome", "--timeout", "10s"); code != 0 {
		t.Fatalf("wait: %d %s %s", code, o, e)
	}
	if o, _, code := run("get", "title"); code != 0 || strings.TrimSpace(o) != "Home" {
		t.Errorf("get title: %d %q", code, o)
	}
	if o, _, code := run("get", "title", "--json"); code != 0 || !strings.Contains(o, `"ok":true`) {
		t.Errorf("get title --json: %d %q", code, o)
	}
	// Exit codes by class.
	for _, c := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"click", email}, 5, "stale_ref"},                                 // the form is gone
		{[]string{"click", "--selector", "#nothing"}, 4, "not_found"},              // no element
		{[]string{"wait", "--text", "never", "--timeout", "300ms"}, 6, ""},         // ran out
		{[]string{"navigate", "http://169.254.169.254/"}, 3, "navigation_blocked"}, // policy
		{[]string{"fly"}, 2, "unknown command"},
	} {
		_, e, code := run(c.args...)
		if code != c.code || !strings.Contains(e, c.msg) {
			t.Errorf("%v: exit %d (%s), want %d with %q", c.args, code, strings.TrimSpace(e), c.code, c.msg)
		}
	}
	shot := filepath.Join(t.TempDir(), "page.png")
	if _, e, code := run("screenshot", shot); code != 0 {
		t.Fatalf("screenshot: %d %s", code, e)
	}
	if b, err := os.ReadFile(shot); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("screenshot file: %v, %d bytes", err, len(b))
	}
}
