package users

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tabcast/tabcast/plugins/auth"
	"github.com/tabcast/tabcast/plugins/base"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// newTestAuth returns an Authenticator on a fresh users file holding the
// generated admin and "alice" (operator), with cheap hashes and a fake clock.
func newTestAuth(t *testing.T, p Params, extraConfig string) (*Authenticator, *fakeClock, string) {
	t.Helper()
	dir := t.TempDir()
	a := New(nil)
	a.params = p
	cfg := fmt.Sprintf(`{"usersFile": %q, "initialPasswordFile": %q%s}`,
		filepath.Join(dir, "users.yaml"), filepath.Join(dir, "initial-admin-password"), extraConfig)
	if err := a.SetConfig(context.Background(), []byte(cfg)); err != nil {
		t.Fatal(err)
	}
	if err := a.store.Add("alice", "alice's long password", RoleOperator); err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	a.byUser.now, a.byIP.now = clk.now, clk.now
	return a, clk, dir
}

func login(t *testing.T, a *Authenticator, user, pw, ip string) auth.Result {
	t.Helper()
	r, err := a.Authenticate(context.Background(), auth.Request{Username: user, Password: []byte(pw), SourceIP: ip})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestAuthenticate(t *testing.T) {
	a, _, dir := newTestAuth(t, testParams, "")
	var logs bytes.Buffer
	a.log = slog.New(slog.NewTextHandler(&logs, nil))
	r := login(t, a, "alice", "alice's long password", "10.0.0.1")
	if want := (auth.Result{OK: true, UserID: "alice", Roles: []string{RoleOperator}}); !reflect.DeepEqual(r, want) {
		t.Fatalf("good login = %+v, want %+v", r, want)
	}
	pw, err := os.ReadFile(filepath.Join(dir, "initial-admin-password"))
	if err != nil {
		t.Fatal(err)
	}
	r = login(t, a, "admin", strings.TrimSpace(string(pw)), "10.0.0.1")
	if want := (auth.Result{OK: true, UserID: "admin", Roles: []string{RoleAdmin}, MustChangePassword: true}); !reflect.DeepEqual(r, want) {
		t.Fatalf("first admin login = %+v, want %+v", r, want)
	}
	wrong := login(t, a, "alice", "not alice's password", "10.0.0.2")
	unknown := login(t, a, "mallory", "not alice's password", "10.0.0.3")
	if want := (auth.Result{ErrorCode: auth.CodeInvalidCredentials}); !reflect.DeepEqual(wrong, want) || !reflect.DeepEqual(unknown, want) {
		t.Fatalf("wrong password = %+v, unknown user = %+v; want both %+v", wrong, unknown, want)
	}
	// Passwords are never logged, nor the name of a failed login (it is
	// often a password typed into the wrong field).
	for _, secret := range []string{"long password", "not alice", "mallory", strings.TrimSpace(string(pw))} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("log holds %q:\n%s", secret, logs.String())
		}
	}
	if !strings.Contains(logs.String(), "login failed") || !strings.Contains(logs.String(), "10.0.0.3") {
		t.Errorf("failure not logged with its address:\n%s", logs.String())
	}
	if err := a.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(context.Background(), auth.Request{Username: "alice"}); err == nil || a.Ping(context.Background()) == nil {
		t.Fatal("Authenticate/Ping after Shutdown succeeded")
	}
}

// Unknown users must cost the same argon2 work as known ones: with real
// parameters, the unknown-user path takes at least half the time of the
// wrong-password path. The median of interleaved tries is the average used,
// because other processes loading the CPU skew a mean; a missing dummy hash
// would make the unknown path ~1000x faster, far past this bound.
func TestUnknownUserTiming(t *testing.T) {
	a, _, _ := newTestAuth(t, DefaultParams, `, "maxFailures": 100`)
	login(t, a, "nobody", "warm up the dummy hash", "10.0.1.1") // the dummy hash is made once, lazily
	const n = 5
	var known, unknown []time.Duration
	for i := range n {
		ip := fmt.Sprintf("10.0.2.%d", i)
		start := time.Now()
		r1 := login(t, a, "alice", "wrong password here", ip)
		known = append(known, time.Since(start))
		start = time.Now()
		r2 := login(t, a, "nobody", "wrong password here", ip)
		unknown = append(unknown, time.Since(start))
		if !reflect.DeepEqual(r1, r2) || r1.ErrorCode != auth.CodeInvalidCredentials {
			t.Fatalf("wrong password %+v vs unknown user %+v", r1, r2)
		}
	}
	slices.Sort(known)
	slices.Sort(unknown)
	k, u := known[n/2], unknown[n/2]
	t.Logf("median: wrong password %v, unknown user %v (all: %v / %v)", k, u, known, unknown)
	if u < k/2 {
		t.Fatalf("unknown user %v vs known user %v: enumeration by timing", u, k)
	}
}

func TestRateLimitPerUser(t *testing.T) {
	a, clk, _ := newTestAuth(t, testParams, "")
	for i := range 5 {
		// From different addresses, so only the user counter trips.
		if r := login(t, a, "alice", "bad password", fmt.Sprintf("10.1.0.%d", i)); r.ErrorCode != auth.CodeInvalidCredentials {
			t.Fatalf("failure %d = %+v", i+1, r)
		}
	}
	// Locked: even the right password is not checked.
	r := login(t, a, "alice", "alice's long password", "10.1.1.1")
	if r.OK || r.ErrorCode != auth.CodeRateLimited || r.RetryAfter != time.Second {
		t.Fatalf("after 5 failures = %+v, want rate_limited after 1s", r)
	}
	// Other users are not affected.
	if r := login(t, a, "bob", "bad password", "10.1.1.1"); r.ErrorCode != auth.CodeInvalidCredentials {
		t.Fatalf("other user = %+v", r)
	}
	// Each further failure doubles the lockout.
	want := time.Second
	for range 4 {
		clk.advance(want)
		if r := login(t, a, "alice", "bad password", "10.1.2.1"); r.ErrorCode != auth.CodeInvalidCredentials {
			t.Fatalf("after the lockout = %+v", r)
		}
		want *= 2
		r := login(t, a, "alice", "alice's long password", "10.1.2.2")
		if r.ErrorCode != auth.CodeRateLimited || r.RetryAfter != want {
			t.Fatalf("lockout = %+v, want rate_limited after %v", r, want)
		}
	}
	// Success after waiting resets the user's count.
	clk.advance(want)
	if r := login(t, a, "alice", "alice's long password", "10.1.3.1"); !r.OK {
		t.Fatalf("after waiting = %+v", r)
	}
	if r := login(t, a, "alice", "bad password", "10.1.3.2"); r.ErrorCode != auth.CodeInvalidCredentials {
		t.Fatalf("first failure after success = %+v", r)
	}
}

func TestRateLimitPerIP(t *testing.T) {
	a, clk, _ := newTestAuth(t, testParams, `, "lockoutBase": "2s"`)
	for i := range 5 {
		// Spraying names: only the address counter trips.
		if r := login(t, a, fmt.Sprintf("user%d", i), "bad password", "192.0.2.7"); r.ErrorCode != auth.CodeInvalidCredentials {
			t.Fatalf("failure %d = %+v", i+1, r)
		}
	}
	r := login(t, a, "alice", "alice's long password", "192.0.2.7")
	if r.ErrorCode != auth.CodeRateLimited || r.RetryAfter != 2*time.Second {
		t.Fatalf("from the spraying address = %+v, want rate_limited after 2s", r)
	}
	if r := login(t, a, "alice", "alice's long password", "192.0.2.8"); !r.OK {
		t.Fatalf("from another address = %+v", r)
	}
	clk.advance(time.Second)
	if r := login(t, a, "alice", "alice's long password", "192.0.2.7"); r.ErrorCode != auth.CodeRateLimited || r.RetryAfter != time.Second {
		t.Fatalf("half way through = %+v", r)
	}
	clk.advance(time.Second)
	if r := login(t, a, "alice", "alice's long password", "192.0.2.7"); !r.OK {
		t.Fatalf("after the lockout = %+v", r)
	}
}

func TestLimiterBounded(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	l := newLimiter(5, time.Second, 5*time.Minute, 100)
	l.now = clk.now
	for i := range 10_000 {
		l.fail(fmt.Sprintf("ip:%d", i))
	}
	if n := l.len(); n != 100 {
		t.Fatalf("%d entries after 10000 keys, want the bound 100", n)
	}
	// The cap holds at 5m however many failures follow.
	for range 100 {
		l.fail("ip:hot")
	}
	if d := l.blocked("ip:hot"); d != 5*time.Minute {
		t.Fatalf("lockout after 100 failures = %v, want the 5m cap", d)
	}
	// Idle entries are forgotten.
	clk.advance(time.Hour)
	l.fail("ip:new")
	if n := l.len(); n != 1 {
		t.Fatalf("%d entries after an idle hour, want 1", n)
	}
}

func TestEnsureAdmin(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, filepath.Join(dir, "users.yaml"))
	// A missing directory (a fresh /etc/tabcast) is created.
	pwFile := filepath.Join(dir, "etc", "initial-admin-password")
	created, pw, err := EnsureAdmin(s, pwFile)
	if err != nil || !created || len(pw) < 20 {
		t.Fatalf("EnsureAdmin = %v, len %d, %v", created, len(pw), err)
	}
	st, err := os.Stat(pwFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("password file: %v, mode %v", err, st.Mode().Perm())
	}
	data, _ := os.ReadFile(pwFile)
	if strings.TrimSpace(string(data)) != pw {
		t.Fatal("password file does not hold the password")
	}
	u, ok := s.Verify("admin", []byte(pw))
	if !ok || u != (User{Name: "admin", Role: RoleAdmin, MustChangePassword: true}) {
		t.Fatalf("admin = %+v, %v", u, ok)
	}

	created, pw2, err := EnsureAdmin(openTest(t, filepath.Join(dir, "users.yaml")), pwFile)
	if err != nil || created || pw2 != "" {
		t.Fatalf("second EnsureAdmin = %v, %q, %v", created, pw2, err)
	}
	if data2, _ := os.ReadFile(pwFile); string(data2) != string(data) {
		t.Fatal("second EnsureAdmin rewrote the password file")
	}
	if got := s.List(); len(got) != 1 {
		t.Fatalf("users = %v", got)
	}

	p1, _ := RandomPassword(24)
	p2, _ := RandomPassword(24)
	if p1 == p2 || len(p1) != 24 {
		t.Fatalf("RandomPassword: %q %q", p1, p2)
	}
}

func TestSetConfigErrors(t *testing.T) {
	dir := t.TempDir()
	ok := fmt.Sprintf(`"usersFile": %q, "initialPasswordFile": %q`, filepath.Join(dir, "u.yaml"), filepath.Join(dir, "pw"))
	cases := map[string]string{
		`{` + ok + `, "maxFailure": 5}`:       "maxFailure",
		`{` + ok + `, "maxFailures": 0}`:      "maxFailures",
		`{` + ok + `, "maxFailures": "5"}`:    "maxFailures",
		`{` + ok + `, "lockoutBase": "soon"}`: "lockoutBase",
		`{` + ok + `, "lockoutBase": 1}`:      "lockoutBase",
		`{` + ok + `, "lockoutBase": "1h"}`:   "lockoutBase",
		`{"usersFile": ""}`:                   "usersFile",
		fmt.Sprintf(`{"usersFile": "/proc/nope/users.yaml", "initialPasswordFile": %q}`, filepath.Join(dir, "pw")): "usersFile",
		fmt.Sprintf(`{"usersFile": %q, "initialPasswordFile": "/proc/nope/pw"}`, filepath.Join(dir, "u.yaml")):     "initialPasswordFile",
	}
	a := New(nil)
	a.params = testParams
	for cfg, key := range cases {
		err := a.SetConfig(context.Background(), []byte(cfg))
		if ce, isCE := base.AsConfigError(err); !isCE || ce.Key != key {
			t.Errorf("SetConfig(%s) = %v, want a ConfigError for %q", cfg, err, key)
		}
	}
	if err := a.SetConfig(context.Background(), []byte(`{`+ok+`, "maxFailures": 3, "lockoutBase": "250ms"}`)); err != nil {
		t.Fatal(err)
	}
	sch, err := a.ConfigSchema(context.Background())
	if err != nil || !strings.Contains(string(sch.DefaultsJSON), `"lockoutBase":"1s"`) {
		t.Fatalf("ConfigSchema = %s, %v", sch.DefaultsJSON, err)
	}
}
