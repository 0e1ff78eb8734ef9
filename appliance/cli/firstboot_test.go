package cli

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/auth-local/users"
)

func TestFirstbootCmd(t *testing.T) {
	dir := t.TempDir()
	esp, state, root := filepath.Join(dir, "efi"), filepath.Join(dir, "state"), filepath.Join(dir, "root")
	for _, d := range []string{esp, state, root} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	run := func(yaml string) (int, string) {
		if yaml != "" {
			if err := os.WriteFile(filepath.Join(esp, "tabcast-firstboot.yaml"), []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		var out, errb bytes.Buffer
		code := realMain([]string{"firstboot", "apply", "--esp", esp, "--state", state, "--root", root}, &out, &errb)
		return code, out.String() + errb.String()
	}
	if code, out := run("hostname: lab-9\nbogus: 1\n"); code != 3 || !strings.Contains(out, `unknown key "bogus"`) {
		t.Fatalf("rejected file: exit %d, output:\n%s", code, out)
	}
	if code, out := run("hostname: lab-9\nconfig:\n  video:\n    fps: 30\n"); code != 0 {
		t.Fatalf("valid file: exit %d, output:\n%s", code, out)
	}
	if b, err := os.ReadFile(filepath.Join(root, "etc/hostname")); err != nil || string(b) != "lab-9\n" {
		t.Fatalf("/etc/hostname: %q %v", b, err)
	}
	if code, out := run(""); code != 0 || !strings.Contains(out, "no tabcast-firstboot.yaml") {
		t.Fatalf("no file: exit %d, output:\n%s", code, out)
	}
	var out, errb bytes.Buffer
	if code := realMain([]string{"firstboot", "nope"}, &out, &errb); code != 2 {
		t.Fatalf("bad subcommand: exit %d", code)
	}
}

// TestAuthLocalAdminHash: the command hands the hash to the real auth-local
// binary (check-hash, set-hash on stdin), which owns the users file.
func TestAuthLocalAdminHash(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "auth-local"), "../../auth-local").CombinedOutput(); err != nil {
		t.Fatalf("build auth-local: %v\n%s", err, out)
	}
	t.Setenv("TABCAST_PLUGINS__DIR", dir)
	good, err := users.HashPassword([]byte("a password for admin"), users.DefaultParams)
	if err != nil {
		t.Fatal(err)
	}
	if err := (authLocalAdmin{}).Check(good); err != nil {
		t.Fatalf("check a good hash: %v", err)
	}
	bad := "$argon2id$v=19$m=65536,t=2,p=2$c2FsdA$a2V5"
	if err := (authLocalAdmin{}).Check(bad); err == nil || strings.Contains(err.Error(), "c2FsdA") {
		t.Fatalf("check a bad hash: %v", err)
	}
	file := filepath.Join(dir, "etc", "users.yaml")
	if err := (authLocalAdmin{}).Set(file, good); err != nil {
		t.Fatal(err)
	}
	s, err := users.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := s.Verify("admin", []byte("a password for admin")); !ok || u.Role != users.RoleAdmin || u.MustChangePassword {
		t.Fatalf("admin after set: %+v %v", u, ok)
	}
}
