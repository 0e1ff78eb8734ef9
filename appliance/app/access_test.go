package app

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/auth-local/users"
	"github.com/tabcast/tabcast/core/access"
)

// TestInitialPasswordNotInTheJournal: the one-time admin password goes to
// a console, never to a stdout that systemd connected to the journal.
func TestInitialPasswordNotInTheJournal(t *testing.T) {
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "initial-admin-password")
	if err := os.WriteFile(pwFile, []byte("s3cret-one-time\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{}
	cfg.Auth.Plugin = "auth-local"
	cfg.Plugins.Config = map[string]map[string]any{"auth-local": {"initialPasswordFile": pwFile}}
	started := time.Now()

	for _, journal := range []bool{false, true} {
		out, err := os.Create(filepath.Join(dir, fmt.Sprintf("stdout-%v", journal)))
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("JOURNAL_STREAM", "")
		if journal {
			st, err := out.Stat()
			if err != nil {
				t.Fatal(err)
			}
			sys := st.Sys().(*syscall.Stat_t)
			t.Setenv("JOURNAL_STREAM", fmt.Sprintf("%d:%d", sys.Dev, sys.Ino))
		}
		printInitialPassword(cfg, started, out)
		out.Close()
		b, _ := os.ReadFile(out.Name())
		got := string(b)
		if !strings.Contains(got, pwFile) {
			t.Errorf("journal=%v: the file is not named: %q", journal, got)
		}
		if shown := strings.Contains(got, "s3cret-one-time"); shown == journal {
			t.Errorf("journal=%v: password shown=%v: %q", journal, shown, got)
		}
	}
}

// TestRedirectorNames: the redirect's Location names a host of the
// certificate's, never one the request made up.
func TestRedirectorNames(t *testing.T) {
	names := []string{"10.0.0.5", "127.0.0.1", "::1", "box.example", "localhost"}
	h := redirector(func() []string { return names }, "8443")
	for host, want := range map[string]string{
		"box.example":         "https://box.example:8443/p?q=1",
		"BOX.example:80":      "https://box.example:8443/p?q=1",
		"10.0.0.5":            "https://10.0.0.5:8443/p?q=1",
		"[::1]:80":            "https://[::1]:8443/p?q=1",
		"evil.example":        "https://box.example:8443/p?q=1",
		"evil.example:8443/x": "https://box.example:8443/p?q=1",
		"":                    "https://box.example:8443/p?q=1",
	} {
		r := httptest.NewRequest("GET", "http://x/p?q=1", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if got := w.Header().Get("Location"); w.Code != http.StatusPermanentRedirect || got != want {
			t.Errorf("Host %q: %d %q, want %q", host, w.Code, got, want)
		}
	}
	for _, c := range []struct {
		names []string
		want  string
	}{
		{[]string{"127.0.0.1", "localhost", "192.168.1.9"}, "192.168.1.9"},
		{[]string{"127.0.0.1", "localhost"}, "127.0.0.1"},
		{nil, ""},
	} {
		if got := pickRedirectHost(c.names, "evil.example"); got != c.want {
			t.Errorf("%v: %q, want %q", c.names, got, c.want)
		}
	}
	w := httptest.NewRecorder()
	redirector(func() []string { return nil }, "443").ServeHTTP(w, httptest.NewRequest("GET", "http://x/", nil))
	if w.Code != http.StatusMisdirectedRequest || w.Header().Get("Location") != "" {
		t.Errorf("no names: %d %q", w.Code, w.Header().Get("Location"))
	}
}

// TestAuthLocalUsersFile: the core reads auth-local's own users file (made
// here by its store, so a change of its format fails this test): roles,
// and a credential that changes when a password is set, and only then.
func TestAuthLocalUsersFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	s, err := users.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Add("ann", "ann password 12", users.RoleOperator); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("bob", "bob password 12", users.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	read := func() map[string]access.UserRecord {
		t.Helper()
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		u, err := parseAuthLocalUsers(b)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	before := read()
	if len(before) != 2 || before["ann"].Role != access.RoleOperator || before["bob"].Role != access.RoleAdmin || before["ann"].Credential == "" {
		t.Fatalf("read %+v", before)
	}
	b, _ := os.ReadFile(file)
	if strings.Contains(before["ann"].Credential, "argon2") || bytes.Contains(b, []byte(before["ann"].Credential)) {
		t.Error("the credential is (part of) the hash")
	}
	if err := s.SetPassword("ann", "ann password 13", false); err != nil {
		t.Fatal(err)
	}
	after := read()
	if after["ann"].Credential == before["ann"].Credential || after["bob"].Credential != before["bob"].Credential {
		t.Errorf("credentials: ann %v → %v, bob %v → %v", before["ann"], after["ann"], before["bob"], after["bob"])
	}
	if err := s.Delete("ann"); err != nil {
		t.Fatal(err)
	}
	if _, ok := read()["ann"]; ok {
		t.Error("a deleted user is read")
	}
	if u, err := parseAuthLocalUsers([]byte("users:\n  - name: cy\n    role: wizard\n  - name: di\n    role: viewer\n    extra: 1\n")); err != nil || len(u) != 1 || u["di"].Role != access.RoleViewer {
		t.Errorf("unknown role and field: %v %v", u, err)
	}
	if u, err := parseAuthLocalUsers(nil); err != nil || len(u) != 0 {
		t.Errorf("empty file: %v %v", u, err)
	}
	if _, err := parseAuthLocalUsers([]byte("users: [")); err == nil {
		t.Error("a broken file parsed")
	}
}
