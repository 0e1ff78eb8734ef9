package access

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogins(t *testing.T) {
	l := NewLogins(time.Minute, time.Hour)
	now := time.Unix(1_000_000, 0)
	l.now = func() time.Time { return now }
	cookie, csrf := l.Create(Principal{User: "ann", Role: RoleOperator})
	p, ok := l.Lookup(cookie)
	if !ok || p.User != "ann" || p.Method != MethodCookie || p.CSRF != csrf || csrf == "" {
		t.Fatalf("Lookup = %+v, %v", p, ok)
	}
	id, sig, _ := strings.Cut(cookie, ".")
	for _, bad := range []string{"", id, id + ".", id + "." + sig + "x", "x" + cookie, id[:len(id)-1] + "A." + sig} {
		if _, ok := l.Lookup(bad); ok {
			t.Errorf("tampered cookie %q accepted", bad)
		}
	}
	// Idle expiry, renewed by use.
	now = now.Add(50 * time.Second)
	if _, ok := l.Lookup(cookie); !ok {
		t.Fatal("expired before the idle time")
	}
	now = now.Add(50 * time.Second)
	if _, ok := l.Lookup(cookie); !ok {
		t.Fatal("use did not renew the idle timer")
	}
	now = now.Add(61 * time.Second)
	if _, ok := l.Lookup(cookie); ok {
		t.Fatal("alive after the idle time")
	}
	// Absolute expiry, however busy.
	cookie, _ = l.Create(Principal{User: "bob", Role: RoleAdmin})
	for range 70 {
		now = now.Add(55 * time.Second)
		l.Lookup(cookie)
	}
	if _, ok := l.Lookup(cookie); ok {
		t.Fatal("alive after the absolute expiry")
	}
	// Revoke and RevokeUser.
	c1, _ := l.Create(Principal{User: "cy"})
	c2, _ := l.Create(Principal{User: "cy"})
	c3, _ := l.Create(Principal{User: "di"})
	l.Revoke(c1)
	if _, ok := l.Lookup(c1); ok {
		t.Error("revoked login still valid")
	}
	l.RevokeUser("cy")
	if _, ok := l.Lookup(c2); ok {
		t.Error("RevokeUser left a login")
	}
	if _, ok := l.Lookup(c3); !ok {
		t.Error("RevokeUser ended another user's login")
	}
	// A cookie of another appliance (another key) is refused.
	if _, ok := NewLogins(time.Hour, time.Hour).Lookup(c3); ok {
		t.Error("a cookie signed with another key was accepted")
	}
}

func TestLoginsBounded(t *testing.T) {
	l := NewLogins(time.Hour, time.Hour)
	first, _ := l.Create(Principal{User: "u0"})
	for range maxLogins + 10 {
		l.Create(Principal{User: "u"})
	}
	if n := l.Len(); n > maxLogins {
		t.Fatalf("%d logins held, bound is %d", n, maxLogins)
	}
	if _, ok := l.Lookup(first); ok {
		t.Error("the least recently used login survived the overflow")
	}
}

func TestTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens.json")
	tk, err := OpenTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	secret, info, err := tk.Create("ci", "ann", RoleOperator, []string{ScopeRead}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(secret, "tct_"+info.ID+"_") || info.Hash != "" {
		t.Fatalf("secret %q info %+v", secret, info)
	}
	raw, _ := os.ReadFile(path)
	if strings.Contains(string(raw), secret) || strings.Contains(string(raw), secret[len(secret)-20:]) {
		t.Fatal("the token file holds the secret")
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("token file mode %v", st.Mode().Perm())
	}
	p, err := tk.Verify(secret)
	if err != nil || p.User != "ann" || p.Role != RoleOperator || !p.Has(ScopeRead) || p.Has(ScopeControl) {
		t.Fatalf("Verify = %+v, %v", p, err)
	}
	for _, bad := range []string{"", "tct_", "tct_" + info.ID, secret + "x", strings.Replace(secret, info.ID, "000000000000", 1)} {
		if _, err := tk.Verify(bad); err != ErrTokenInvalid {
			t.Errorf("Verify(%q) = %v, want invalid", bad, err)
		}
	}
	// Expiry.
	tk.now = func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := tk.Verify(secret); err != ErrTokenExpired {
		t.Errorf("after expiry: %v", err)
	}
	tk.now = time.Now
	// Another process (the CLI) adds and revokes through the file.
	other, err := OpenTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	s2, i2, err := other.Create("cli", "bob", RoleAdmin, []string{ScopeRead, ScopeAdmin}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tk.Verify(s2); err != nil {
		t.Errorf("a token made by another process is not seen: %v", err)
	}
	if _, ok, err := other.Revoke(info.ID); !ok || err != nil {
		t.Fatalf("Revoke = %v, %v", ok, err)
	}
	if _, err := tk.Verify(secret); err != ErrTokenInvalid {
		t.Errorf("a token revoked by another process still works: %v", err)
	}
	if l := tk.List(); len(l) != 1 || l[0].ID != i2.ID || l[0].Hash != "" {
		t.Errorf("List = %+v", l)
	}
	// Bad requests.
	for _, c := range []struct {
		name, user string
		role       Role
		scopes     []string
	}{
		{"", "u", RoleAdmin, []string{ScopeRead}},
		{"n", "", RoleAdmin, []string{ScopeRead}},
		{"n", "u", "root", []string{ScopeRead}},
		{"n", "u", RoleOperator, nil},
		{"n", "u", RoleOperator, []string{"write"}},
		{"n", "u", RoleOperator, []string{ScopeAdmin}},
		{"n", "u", RoleViewer, []string{ScopeRead, ScopeCDP}},
	} {
		if _, _, err := tk.Create(c.name, c.user, c.role, c.scopes, 0); err == nil {
			t.Errorf("Create(%+v) accepted", c)
		}
	}
}

func TestRules(t *testing.T) {
	admin := Principal{User: "a", Role: RoleAdmin, Method: MethodCookie}
	op := Principal{User: "o", Role: RoleOperator, Method: MethodCookie}
	viewer := Principal{User: "v", Role: RoleViewer, Method: MethodCookie}
	readTok := Principal{User: "o", Role: RoleOperator, Method: MethodToken, Scopes: []string{ScopeRead}}
	for _, c := range []struct {
		name              string
		p                 Principal
		owner             string
		invited           bool
		see, operate, new bool
	}{
		{"admin, other's", admin, "x", false, true, true, true},
		{"operator, own", op, "o", false, true, true, true},
		{"operator, other's", op, "x", false, false, false, true},
		{"operator, invited", op, "x", true, true, false, true},
		{"viewer, invited", viewer, "x", true, true, false, false},
		{"viewer, not invited", viewer, "x", false, false, false, false},
		{"viewer owning (never operates)", viewer, "v", false, true, false, false},
		{"read token, own", readTok, "o", false, true, false, false},
	} {
		if got := c.p.CanSee(c.owner, c.invited); got != c.see {
			t.Errorf("%s: CanSee = %v", c.name, got)
		}
		if got := c.p.CanOperate(c.owner); got != c.operate {
			t.Errorf("%s: CanOperate = %v", c.name, got)
		}
		if got := c.p.CanCreate(); got != c.new {
			t.Errorf("%s: CanCreate = %v", c.name, got)
		}
	}
}

func TestCDPRule(t *testing.T) {
	cdpTok := Principal{User: "o", Role: RoleOperator, Method: MethodToken, Scopes: []string{ScopeRead, ScopeControl, ScopeCDP}}
	ctlTok := Principal{User: "o", Role: RoleOperator, Method: MethodToken, Scopes: []string{ScopeRead, ScopeControl}}
	cdpOnly := Principal{User: "o", Role: RoleOperator, Method: MethodToken, Scopes: []string{ScopeRead, ScopeCDP}}
	for _, c := range []struct {
		name  string
		p     Principal
		owner string
		want  bool
	}{
		{"admin login, other's", Principal{User: "a", Role: RoleAdmin, Method: MethodCookie}, "x", true},
		{"operator login, own", Principal{User: "o", Role: RoleOperator, Method: MethodCookie}, "o", true},
		{"operator login, other's", Principal{User: "o", Role: RoleOperator, Method: MethodCookie}, "x", false},
		{"viewer login, own", Principal{User: "v", Role: RoleViewer, Method: MethodCookie}, "v", false},
		{"cdp token, own", cdpTok, "o", true},
		{"cdp token, other's", cdpTok, "x", false},
		{"token without cdp", ctlTok, "o", false},
		{"token without control", cdpOnly, "o", false},
		{"viewer token with cdp", Principal{User: "v", Role: RoleViewer, Method: MethodToken, Scopes: []string{ScopeRead, ScopeControl, ScopeCDP}}, "v", false},
	} {
		if got := c.p.CanCDP(c.owner); got != c.want {
			t.Errorf("%s: CanCDP = %v, want %v", c.name, got, c.want)
		}
	}
}
