package users

import (
	"context"
	"fmt"
	"github.com/tabcast/tabcast/plugins/plugintest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
	"github.com/tabcast/tabcast/plugins/base"
)

// TestThroughPluginProcess builds the real plugin binary and drives it the
// way the core does: go-plugin, gRPC, AutoMTLS.
func TestThroughPluginProcess(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	dir := t.TempDir()
	raw, client := plugintest.Dispense(t, "github.com/tabcast/tabcast/auth-local", plugins.KindAuth, auth.PluginSets(nil))
	defer client.Kill()
	ac, ok := raw.(*auth.Client)
	if !ok {
		t.Fatalf("dispensed %T", raw)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	info, err := ac.Info(ctx)
	if err != nil || info.Name != "auth-local" || info.Kind != "auth" || info.APIVersion != 1 || info.Capabilities["roles"] != "admin,operator,viewer" {
		t.Fatalf("Info = %+v, %v", info, err)
	}
	usersFile, pwFile := filepath.Join(dir, "users.yaml"), filepath.Join(dir, "initial-admin-password")
	err = ac.SetConfig(ctx, []byte(fmt.Sprintf(`{"usersFile": %q, "maxFailurs": 3}`, usersFile)))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "maxFailurs" {
		t.Fatalf("SetConfig with a typo = %v, want a ConfigError for maxFailurs", err)
	}
	err = ac.SetConfig(ctx, []byte(fmt.Sprintf(`{"usersFile": %q, "lockoutBase": "forever"}`, usersFile)))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "lockoutBase" {
		t.Fatalf("SetConfig with a bad duration = %v, want a ConfigError for lockoutBase", err)
	}
	if err := ac.SetConfig(ctx, []byte(fmt.Sprintf(`{"usersFile": %q, "initialPasswordFile": %q, "maxFailures": 2}`, usersFile, pwFile))); err != nil {
		t.Fatal(err)
	}

	// First start: the plugin created admin; its password is in the file.
	pw, err := os.ReadFile(pwFile)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r, err := ac.Authenticate(ctx, auth.Request{Username: "admin", Password: []byte(strings.TrimSpace(string(pw))), SourceIP: "127.0.0.1"})
	if want := (auth.Result{OK: true, UserID: "admin", Roles: []string{"admin"}, MustChangePassword: true}); err != nil || !reflect.DeepEqual(r, want) {
		t.Fatalf("admin login = %+v, %v; want %+v", r, err, want)
	}
	t.Logf("a login through the plugin process took %v", time.Since(start).Round(time.Millisecond))

	// The forced change at first login, through the contract.
	old := []byte(strings.TrimSpace(string(pw)))
	for _, c := range []struct {
		old, new, code string
	}{
		{"not the password", "a long enough new one", auth.CodeInvalidCredentials},
		{string(old), "short", auth.CodeWeakPassword},
		{string(old), string(old), auth.CodeWeakPassword},
	} {
		r, err := ac.ChangePassword(ctx, auth.ChangeRequest{Username: "admin", OldPassword: []byte(c.old), NewPassword: []byte(c.new), SourceIP: "127.0.0.9"})
		if err != nil || r.OK || r.ErrorCode != c.code {
			t.Fatalf("ChangePassword(%s) = %+v, %v; want %s", c.code, r, err, c.code)
		}
	}
	r, err = ac.ChangePassword(ctx, auth.ChangeRequest{Username: "admin", OldPassword: old, NewPassword: []byte("the first chosen password"), SourceIP: "127.0.0.9"})
	if err != nil || !r.OK || r.MustChangePassword {
		t.Fatalf("ChangePassword = %+v, %v", r, err)
	}
	if r, _ := ac.Authenticate(ctx, auth.Request{Username: "admin", Password: old, SourceIP: "127.0.0.9"}); r.OK {
		t.Fatal("the old password still works after the change")
	}

	// The CLI changes the password through the same file; the plugin sees it.
	st, err := Open(usersFile)
	if err != nil {
		t.Fatal(err)
	}
	st.params = testParams
	if err := st.SetPassword("admin", "the new admin password", false); err != nil {
		t.Fatal(err)
	}
	r, err = ac.Authenticate(ctx, auth.Request{Username: "admin", Password: []byte("the new admin password"), SourceIP: "127.0.0.1"})
	if err != nil || !r.OK || r.MustChangePassword {
		t.Fatalf("login after passwd = %+v, %v", r, err)
	}

	for range 2 {
		r, err = ac.Authenticate(ctx, auth.Request{Username: "admin", Password: []byte("wrong"), SourceIP: "127.0.0.2"})
		if err != nil || r.OK || r.ErrorCode != auth.CodeInvalidCredentials {
			t.Fatalf("wrong password = %+v, %v", r, err)
		}
	}
	r, err = ac.Authenticate(ctx, auth.Request{Username: "admin", Password: []byte("the new admin password"), SourceIP: "127.0.0.3"})
	if err != nil || r.ErrorCode != auth.CodeRateLimited || r.RetryAfter <= 0 || r.RetryAfter > time.Second {
		t.Fatalf("after maxFailures = %+v, %v; want rate_limited within 1s", r, err)
	}

	if err := ac.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ac.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	client.Kill()
}
