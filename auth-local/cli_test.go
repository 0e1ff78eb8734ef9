package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tabcast/tabcast/auth-local/users"
)

func run(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := usersCommand(args, strings.NewReader(stdin), &out, &errb)
	return out.String(), errb.String(), code
}

func TestUsersCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	out, _, code := run(t, "", "--file", file, "add", "alice", "--role", "admin")
	if code != 0 || !strings.Contains(out, "shown once") {
		t.Fatalf("add with a generated password: %d %q", code, out)
	}
	generated := strings.TrimSpace(out[strings.LastIndex(out, ": ")+2:])
	if _, _, code := run(t, "a long enough password\n", "--file", file, "add", "bob", "--role", "viewer", "--password-stdin"); code != 0 {
		t.Fatal("add bob")
	}
	if _, errs, code := run(t, "short\n", "--file", file, "passwd", "bob", "--password-stdin"); code != 1 || !strings.Contains(errs, "password") {
		t.Fatalf("weak password accepted: %d %q", code, errs)
	}
	if _, _, code := run(t, "", "--file", file, "add", "Bad Name"); code != 1 {
		t.Fatal("bad name accepted")
	}
	out, _, _ = run(t, "", "--file", file, "list")
	if !strings.Contains(out, "alice") || !strings.Contains(out, "admin") || !strings.Contains(out, "bob") || strings.Contains(out, "argon2") {
		t.Fatalf("list: %q", out)
	}
	s, err := users.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := s.Verify("alice", []byte(generated)); !ok || !u.MustChangePassword {
		t.Fatalf("alice's generated password: %+v %v", u, ok)
	}
	if _, ok := s.Verify("bob", []byte("a long enough password")); !ok {
		t.Fatal("bob's password")
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("users file mode: %v %v", st.Mode(), err)
	}
	if _, _, code := run(t, "", "--file", file, "del", "bob"); code != 0 {
		t.Fatal("del bob")
	}
	if _, errs, code := run(t, "", "--file", file, "del", "alice"); code != 1 || errs == "" {
		t.Fatal("the last admin was deleted")
	}
}

// TestSetHash: an unattended set-up hands over a hash (stdin), never the
// password; a malformed one is refused without being echoed.
func TestSetHash(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.yaml")
	hash, err := users.HashPassword([]byte("the admin's password"), users.DefaultParams)
	if err != nil {
		t.Fatal(err)
	}
	if _, errs, code := run(t, hash+"\n", "check-hash"); code != 0 {
		t.Fatalf("check-hash of a good hash: %d %s", code, errs)
	}
	bad := "$argon2id$v=19$m=65536,t=2,p=2$c2FsdA$a2V5"
	if _, errs, code := run(t, bad+"\n", "check-hash"); code != 1 || strings.Contains(errs, "c2FsdA") {
		t.Fatalf("check-hash of a short salt/key: %d %q", code, errs)
	}
	if _, errs, code := run(t, bad+"\n", "--file", file, "set-hash", "admin", "--role", "admin"); code != 1 || strings.Contains(errs, "c2FsdA") {
		t.Fatalf("set-hash of a bad hash: %d %q", code, errs)
	}
	if _, errs, code := run(t, hash+"\n", "--file", file, "set-hash", "admin", "--role", "admin"); code != 0 {
		t.Fatalf("set-hash: %d %s", code, errs)
	}
	s, err := users.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	u, ok := s.Verify("admin", []byte("the admin's password"))
	if !ok || u.Role != users.RoleAdmin || u.MustChangePassword {
		t.Fatalf("admin after set-hash: %+v %v", u, ok)
	}
	// Again on an existing user: replaced, still one admin.
	hash2, _ := users.HashPassword([]byte("another password"), users.DefaultParams)
	if _, errs, code := run(t, hash2+"\n", "--file", file, "set-hash", "admin", "--role", "admin"); code != 0 {
		t.Fatalf("set-hash again: %d %s", code, errs)
	}
	if _, ok := s.Verify("admin", []byte("another password")); !ok || len(s.List()) != 1 {
		t.Fatalf("set-hash on an existing user: ok=%v users=%d", ok, len(s.List()))
	}
}
