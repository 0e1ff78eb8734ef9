package users

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// testParams make hashing cheap so tests that are not about cost run fast.
var testParams = Params{Memory: 64, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}

func openTest(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	s.params = testParams
	return s
}

func TestStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "etc", "users.yaml")
	s := openTest(t, path)
	if got := s.List(); len(got) != 0 {
		t.Fatalf("new store lists %v", got)
	}
	if err := s.Add("alice", "correct horse battery", RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("bob.ops-1", "another long password", RoleOperator); err != nil {
		t.Fatal(err)
	}

	st, err := os.Stat(path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("users file: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.Contains(string(data), "correct horse") || !strings.Contains(string(data), "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("users file content:\n%s", data)
	}

	s2 := openTest(t, path)
	want := []User{{Name: "alice", Role: RoleAdmin}, {Name: "bob.ops-1", Role: RoleOperator}}
	if got := s2.List(); !slices.Equal(got, want) {
		t.Fatalf("reopened List = %v, want %v", got, want)
	}
	if u, ok := s2.Verify("alice", []byte("correct horse battery")); !ok || u != want[0] {
		t.Fatalf("Verify good = %v, %v", u, ok)
	}
	if _, ok := s2.Verify("alice", []byte("correct horse batterY")); ok {
		t.Fatal("Verify accepted a wrong password")
	}
	if _, ok := s2.Verify("nobody", []byte("correct horse battery")); ok {
		t.Fatal("Verify accepted an unknown user")
	}

	// A write by another Store (another process) is seen by the first.
	if err := s2.SetPassword("bob.ops-1", "brand new password", true); err != nil {
		t.Fatal(err)
	}
	if u, ok := s.Verify("bob.ops-1", []byte("brand new password")); !ok || !u.MustChangePassword {
		t.Fatalf("Verify after SetPassword elsewhere = %+v, %v", u, ok)
	}
	if _, ok := s.Verify("bob.ops-1", []byte("another long password")); ok {
		t.Fatal("old password still accepted")
	}

	if err := s.Delete("bob.ops-1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("bob.ops-1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Delete twice = %v", err)
	}
	if err := s.Delete("alice"); !errors.Is(err, ErrLastAdmin) {
		t.Fatalf("Delete last admin = %v", err)
	}
	if got := s2.List(); !slices.Equal(got, want[:1]) {
		t.Fatalf("List after delete = %v", got)
	}
}

func TestStoreValidation(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "users.yaml"))
	if err := s.Add("carol", "twelve chars", RoleViewer); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, pw, role string
		want           error
	}{
		{"Carol", "long enough password", RoleViewer, ErrInvalidName},
		{"", "long enough password", RoleViewer, ErrInvalidName},
		{strings.Repeat("a", 65), "long enough password", RoleViewer, ErrInvalidName},
		{"dave/x", "long enough password", RoleViewer, ErrInvalidName},
		{"dave", "long enough password", "root", ErrInvalidRole},
		{"dave", "eleven char", RoleViewer, ErrWeakPassword},
		{"dave", strings.Repeat("x", 2000), RoleViewer, ErrLongPassword},
		{"carol", "long enough password", RoleViewer, ErrExists},
	}
	for _, c := range cases {
		if err := s.Add(c.name, c.pw, c.role); !errors.Is(err, c.want) {
			t.Errorf("Add(%q, len %d, %q) = %v, want %v", c.name, len(c.pw), c.role, err, c.want)
		}
	}
	if err := s.SetPassword("carol", "short", false); !errors.Is(err, ErrWeakPassword) {
		t.Errorf("SetPassword short = %v", err)
	}
	if err := s.SetPassword("nobody", "long enough password", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetPassword unknown = %v", err)
	}
	if got := s.List(); len(got) != 1 {
		t.Fatalf("List = %v", got)
	}
}

func TestStoreRefusesBadFile(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"badrole": "users:\n  - name: x\n    role: god\n    hash: h\n",
		"dup":     "users:\n  - name: x\n    role: admin\n    hash: h\n  - name: x\n    role: viewer\n    hash: h\n",
		"unknown": "users:\n  - name: x\n    role: admin\n    hash: h\n    pasword: oops\n",
		"garbage": "users: [\n",
	} {
		p := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(p); err == nil {
			t.Errorf("%s: Open accepted\n%s", name, content)
		}
	}
	empty := filepath.Join(dir, "empty.yaml")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(empty); err != nil || len(s.List()) != 0 {
		t.Fatalf("empty file: %v", err)
	}
}

// Two Stores on one file stand for the plugin and the CLI: concurrent Adds
// through both must all land, with no temp files left behind.
func TestConcurrentAdd(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "users.yaml")
	stores := []*Store{openTest(t, path), openTest(t, path)}
	const per = 12
	var wg sync.WaitGroup
	errs := make(chan error, 2*per)
	for i, s := range stores {
		for j := range per {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- s.Add(fmt.Sprintf("u%d-%d", i, j), "long enough password", RoleViewer)
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := openTest(t, path).List(); len(got) != 2*per {
		t.Fatalf("%d users after concurrent adds, want %d: %v", len(got), 2*per, got)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.Name() != "users.yaml" && e.Name() != "users.yaml.lock" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func TestHashVerify(t *testing.T) {
	start := time.Now()
	h, err := HashPassword([]byte("s3cret password"), DefaultParams)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("HashPassword with DefaultParams %+v took %v", DefaultParams, time.Since(start).Round(time.Millisecond))
	if !strings.HasPrefix(h, "$argon2id$v=19$m=65536,t=2,p=2$") {
		t.Fatalf("hash %q", h)
	}
	if !VerifyPassword([]byte("s3cret password"), h) {
		t.Fatal("good password refused")
	}
	if VerifyPassword([]byte("s3cret passwore"), h) {
		t.Fatal("bad password accepted")
	}
	h2, _ := HashPassword([]byte("s3cret password"), DefaultParams)
	if h2 == h {
		t.Fatal("two hashes of one password are equal: salt not random")
	}

	parts := strings.Split(h, "$")
	flip := func(s string) string {
		b := []byte(s)
		if b[3] == 'A' {
			b[3] = 'B'
		} else {
			b[3] = 'A'
		}
		return string(b)
	}
	tampered := map[string]string{
		"salt":      strings.Join([]string{"", parts[1], parts[2], parts[3], flip(parts[4]), parts[5]}, "$"),
		"key":       strings.Join([]string{"", parts[1], parts[2], parts[3], parts[4], flip(parts[5])}, "$"),
		"time":      strings.Replace(h, "t=2", "t=1", 1),
		"memory":    strings.Replace(h, "m=65536", "m=65535", 1),
		"huge mem":  strings.Replace(h, "m=65536", "m=99999999", 1),
		"threads 0": strings.Replace(h, "p=2", "p=0", 1),
		"argon2i":   strings.Replace(h, "argon2id", "argon2i", 1),
		"version":   strings.Replace(h, "v=19", "v=16", 1),
		"params+":   strings.Replace(h, "p=2", "p=2,x=1", 1),
		"truncated": h[:len(h)-10],
		"short key": strings.Join([]string{"", parts[1], parts[2], parts[3], parts[4], "AAAA"}, "$"),
		"extra":     h + "$x",
		"empty":     "",
		"plain":     "s3cret password",
	}
	for name, bad := range tampered {
		if VerifyPassword([]byte("s3cret password"), bad) {
			t.Errorf("%s: tampered hash %q accepted", name, bad)
		}
	}
}
