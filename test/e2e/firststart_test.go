package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// TestFirstStartOverHTTPS: an appliance with no users creates admin with a
// one-time password shown once on the console, forces a change at the
// first login, and serves HTTPS with a generated certificate whose
// fingerprint it prints.
func TestFirstStartOverHTTPS(t *testing.T) {
	p := pages(t)
	logDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sets := []string{"browser.startURL=" + p.URL + "/anim", "input.allowLoopbackHosts=127.0.0.1", "server.tls=on"}
	a, err := harness.StartWith(ctx, logDir, harness.Options{NoUsers: true}, sets...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Stop(10 * time.Second) })
	if !strings.HasPrefix(a.URL, "https://") {
		t.Fatalf("server.tls=on serves %s", a.URL)
	}
	if a.InitialPassword == "" {
		t.Fatal("no one-time admin password on the console")
	}
	pwFile := filepath.Join(logDir, "initial-admin-password")
	if st, err := os.Stat(pwFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v, %v", st, err)
	}
	if logs, _ := os.ReadFile(a.LogPath); strings.Contains(string(logs), a.InitialPassword) {
		t.Error("the one-time password is in the log")
	}
	// The console names the certificate's fingerprint.
	certPEM, err := os.ReadFile(filepath.Join(a.DataDir, "tls-cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(certPEM)
	sum := sha256.Sum256(blk.Bytes)
	var fp []string
	for _, b := range sum {
		fp = append(fp, fmt.Sprintf("%02X", b))
	}
	if st, err := os.Stat(filepath.Join(a.DataDir, "tls-key.pem")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("key file: %v, %v", st, err)
	}
	if !strings.Contains(a.Stdout(), strings.Join(fp, ":")) {
		t.Errorf("the console does not show the certificate fingerprint %s:\n%s", strings.Join(fp, ":"), a.Stdout())
	}

	// The forced change.
	c, csrf, err := a.Login(ctx, "admin", a.InitialPassword)
	if err != nil {
		t.Fatal(err)
	}
	body := expect(t, a, "me", call{method: "GET", path: "/api/v1/auth/me", cookie: c}, 200, "")
	if !strings.Contains(body, `"mustChangePassword":true`) {
		t.Errorf("first login: %s", body)
	}
	expect(t, a, "sessions before the change", call{method: "GET", path: "/api/v1/sessions", cookie: c}, 403, "password_change_required")
	expect(t, a, "wrong old password", call{method: "POST", path: "/api/v1/auth/password", body: `{"oldPassword":"nope","newPassword":"a brand new password"}`, cookie: c, csrf: csrf}, 401, "invalid_credentials")
	expect(t, a, "weak new password", call{method: "POST", path: "/api/v1/auth/password", body: `{"oldPassword":"` + a.InitialPassword + `","newPassword":"short"}`, cookie: c, csrf: csrf}, 422, "weak_password")
	expect(t, a, "no CSRF", call{method: "POST", path: "/api/v1/auth/password", body: `{"oldPassword":"` + a.InitialPassword + `","newPassword":"a brand new password"}`, cookie: c}, 403, "csrf_failed")
	_, body, resp := call{method: "POST", path: "/api/v1/auth/password", body: `{"oldPassword":"` + a.InitialPassword + `","newPassword":"a brand new password"}`, cookie: c, csrf: csrf}.do(t, a)
	if !strings.Contains(body, `"mustChangePassword":false`) {
		t.Fatalf("password change: %s", body)
	}
	var nc = c
	for _, k := range resp.Cookies() {
		if k.Name == "tabcast_login" {
			nc = k
			if !k.Secure || !k.HttpOnly {
				t.Errorf("login cookie over HTTPS: Secure=%v HttpOnly=%v", k.Secure, k.HttpOnly)
			}
		}
	}
	expect(t, a, "sessions after the change", call{method: "GET", path: "/api/v1/sessions", cookie: nc}, 200, "")
	expect(t, a, "the old login after the change", call{method: "GET", path: "/api/v1/sessions", cookie: c}, 401, "permission_denied")
	if _, _, err := a.Login(ctx, "admin", a.InitialPassword); err == nil {
		t.Error("the one-time password still logs in")
	}
	if _, _, err := a.Login(ctx, "admin", "a brand new password"); err != nil {
		t.Errorf("the new password: %v", err)
	}
	// Video over HTTPS with the Go viewer.
	s, err := a.DefaultSession(ctx)
	if err != nil {
		t.Fatal(err)
	}
	watchFrames(ctx, t, a, s.ID)
}
