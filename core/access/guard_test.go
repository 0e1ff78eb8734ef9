package access

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// fakeDir is a Directory a test edits.
type fakeDir struct {
	mu      sync.Mutex
	users   map[string]UserRecord
	changed bool
}

func newFakeDir(users map[string]UserRecord) *fakeDir {
	return &fakeDir{users: users, changed: true}
}

func (d *fakeDir) Users() (map[string]UserRecord, bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.changed {
		return nil, false, nil
	}
	d.changed = false
	out := map[string]UserRecord{}
	for k, v := range d.users {
		out[k] = v
	}
	return out, true, nil
}

func (d *fakeDir) set(name string, u UserRecord) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.users[name], d.changed = u, true
}

func (d *fakeDir) del(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.users, name)
	d.changed = true
}

// operateOwnSession is the rule of a session owned by "ann": view when
// invited or owner, operate when the role allows.
func operateOwnSession(invited func(string) bool) func(Principal) Level {
	return func(p Principal) Level {
		switch {
		case !p.CanSee("ann", invited(p.User)):
			return LevelNone
		case p.CanOperate("ann"):
			return LevelOperate
		}
		return LevelView
	}
}

func never(string) bool { return false }

type guardEnv struct {
	g      *Guard
	tokens *Tokens
	logins *Logins
	dir    *fakeDir
	path   string
}

func newGuardEnv(t *testing.T) *guardEnv {
	t.Helper()
	path := filepath.Join(t.TempDir(), "tokens.json")
	tk, err := OpenTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLogins(time.Hour, 12*time.Hour)
	d := newFakeDir(map[string]UserRecord{
		"ann": {Role: RoleOperator, Credential: "c1"},
		"bob": {Role: RoleAdmin, Credential: "c1"},
	})
	g := NewGuard(GuardOptions{Tokens: tk, Logins: l, Directory: d, Logger: quiet})
	return &guardEnv{g: g, tokens: tk, logins: l, dir: d, path: path}
}

// login starts a panel login for user and returns its cookie and principal
// as a request would see it.
func (e *guardEnv) login(t *testing.T, user string, role Role) (string, Principal) {
	t.Helper()
	cookie, _ := e.logins.Create(Principal{User: user, Role: role})
	p, ok := e.logins.Lookup(cookie)
	if !ok {
		t.Fatal("new login not found")
	}
	return cookie, p
}

func (e *guardEnv) token(t *testing.T, user string, role Role) (string, Principal) {
	t.Helper()
	secret, _, err := e.tokens.Create("t", user, role, []string{ScopeRead, ScopeControl}, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.tokens.Verify(secret)
	if err != nil {
		t.Fatal(err)
	}
	return secret, p
}

func waitDone(t *testing.T, gr *Grant, d time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-gr.Done():
		return time.Since(start)
	case <-time.After(d):
		t.Fatalf("grant still live after %v (level %s)", d, gr.Level())
		return 0
	}
}

// TestGuardTokenRevoked: a revoked token's grants end at the next check,
// and their bound contexts with ErrWithdrawn; a released grant's context
// ends without it.
func TestGuardTokenRevoked(t *testing.T) {
	e := newGuardEnv(t)
	_, p := e.token(t, "ann", RoleOperator)
	gr := e.g.Hold("test", p, LevelView, operateOwnSession(never))
	defer gr.Release()
	if gr.Level() != LevelOperate || gr.Withdrawn() {
		t.Fatalf("level %s withdrawn %v, want operate", gr.Level(), gr.Withdrawn())
	}
	ctx, cancel := gr.Bind(context.Background())
	defer cancel()
	if _, _, err := e.tokens.Revoke(p.TokenID); err != nil {
		t.Fatal(err)
	}
	e.g.Recheck()
	waitDone(t, gr, time.Second)
	select {
	case <-gr.Changed():
	default:
		t.Error("Changed not signalled")
	}
	<-ctx.Done()
	if !errors.Is(context.Cause(ctx), ErrWithdrawn) || !gr.Withdrawn() || gr.CanView() || gr.CanInput() {
		t.Errorf("cause %v, withdrawn %v", context.Cause(ctx), gr.Withdrawn())
	}
	if _, err := e.g.Current(p); !errors.Is(err, ErrTokenInvalid) {
		t.Errorf("Current of a revoked token: %v", err)
	}
	// Released, not withdrawn.
	_, p2 := e.token(t, "ann", RoleOperator)
	gr2 := e.g.Hold("test", p2, LevelView, operateOwnSession(never))
	ctx2, cancel2 := gr2.Bind(context.Background())
	defer cancel2()
	gr2.Release()
	gr2.Release()
	if gr2.Withdrawn() || ctx2.Err() != nil {
		t.Errorf("released grant: withdrawn %v, bound ctx %v", gr2.Withdrawn(), ctx2.Err())
	}
	if n := e.g.Live(); n != 1 {
		t.Errorf("%d grants held, want 1", n)
	}
}

// TestGuardOtherProcess: a token revoked by another process (the CLI,
// here another Tokens on the same file) ends the grant within the poll
// interval of a started guard; Close stops it.
func TestGuardOtherProcess(t *testing.T) {
	e := newGuardEnv(t)
	_, p := e.token(t, "ann", RoleOperator)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	e.g.Start(ctx)
	defer e.g.Close()
	gr := e.g.Hold("test", p, LevelView, operateOwnSession(never))
	defer gr.Release()
	cli, err := OpenTokens(e.path)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := cli.Revoke(p.TokenID); err != nil || !ok {
		t.Fatalf("revoke: %v %v", ok, err)
	}
	d := waitDone(t, gr, time.Second)
	t.Logf("cut %v after the file changed", d)
	e.g.Close()
	e.g.Close()
}

// TestGuardUserDeleted: a deleted user's logins end, their tokens stop
// working and every grant of theirs ends; another user's go on.
func TestGuardUserDeleted(t *testing.T) {
	e := newGuardEnv(t)
	cookie, lp := e.login(t, "ann", RoleOperator)
	_, tp := e.token(t, "ann", RoleOperator)
	_, bp := e.token(t, "bob", RoleAdmin)
	g1 := e.g.Hold("test", lp, LevelView, operateOwnSession(never))
	g2 := e.g.Hold("test", tp, LevelView, operateOwnSession(never))
	g3 := e.g.Hold("test", bp, LevelView, operateOwnSession(never))
	for _, gr := range []*Grant{g1, g2, g3} {
		defer gr.Release()
		if gr.Level() != LevelOperate {
			t.Fatalf("level %s before", gr.Level())
		}
	}
	e.dir.del("ann")
	e.g.Refresh()
	waitDone(t, g1, time.Second)
	waitDone(t, g2, time.Second)
	if g3.Level() != LevelOperate {
		t.Errorf("bob's grant: %s", g3.Level())
	}
	if _, ok := e.logins.Lookup(cookie); ok {
		t.Error("the deleted user's cookie still works")
	}
	if _, err := e.g.Current(tp); !errors.Is(err, ErrUnknownUser) {
		t.Errorf("deleted user's token: %v", err)
	}
	if e.g.HasUser("ann") || !e.g.HasUser("bob") {
		t.Error("HasUser")
	}
	// Hold for a principal already gone is born withdrawn.
	g4 := e.g.Hold("test", tp, LevelView, operateOwnSession(never))
	defer g4.Release()
	if !g4.Withdrawn() {
		t.Error("a grant for a deleted user is live")
	}
}

// TestGuardPasswordSet: a password set elsewhere ends every login of the
// user (not their tokens); through the API (KeepLogin), the login that
// changed it goes on, rotated to a new cookie.
func TestGuardPasswordSet(t *testing.T) {
	e := newGuardEnv(t)
	c1, p1 := e.login(t, "ann", RoleOperator)
	_, tp := e.token(t, "ann", RoleOperator)
	g1 := e.g.Hold("test", p1, LevelView, operateOwnSession(never))
	gt := e.g.Hold("test", tp, LevelView, operateOwnSession(never))
	defer g1.Release()
	defer gt.Release()
	e.dir.set("ann", UserRecord{Role: RoleOperator, Credential: "c2"})
	e.g.Refresh()
	waitDone(t, g1, time.Second)
	if _, ok := e.logins.Lookup(c1); ok {
		t.Error("old cookie works after the password was set")
	}
	if gt.Level() != LevelOperate {
		t.Errorf("the token's grant: %s", gt.Level())
	}

	// Through the API: two logins, one changes the password.
	ca, pa := e.login(t, "ann", RoleOperator)
	cb, pb := e.login(t, "ann", RoleOperator)
	ga := e.g.Hold("test", pa, LevelView, operateOwnSession(never))
	gb := e.g.Hold("test", pb, LevelView, operateOwnSession(never))
	defer ga.Release()
	defer gb.Release()
	done := e.g.KeepLogin(pa)
	e.dir.set("ann", UserRecord{Role: RoleOperator, Credential: "c3"})
	// The guard's own round may come first: it must keep pa.
	e.g.Recheck()
	e.g.Refresh()
	nc, np, ok := e.logins.Rotate(ca, func(p *Principal) { p.MustChangePassword = false })
	e.logins.RevokeOthers(pa)
	done()
	e.g.Recheck()
	if !ok || nc == ca {
		t.Fatalf("rotate: %v", ok)
	}
	waitDone(t, gb, time.Second)
	if _, ok := e.logins.Lookup(cb); ok {
		t.Error("the other login survived the password change")
	}
	if _, ok := e.logins.Lookup(ca); ok {
		t.Error("the rotated-out cookie still works")
	}
	if p, ok := e.logins.Lookup(nc); !ok || p.User != "ann" || np.login != pa.login {
		t.Error("the changing login lost its session")
	}
	if ga.Level() != LevelOperate {
		t.Errorf("the changing login's grant: %s", ga.Level())
	}
	// Later rounds keep it: its credential is the new one.
	e.dir.set("ann", UserRecord{Role: RoleOperator, Credential: "c3"})
	e.g.Refresh()
	if _, ok := e.logins.Lookup(nc); !ok {
		t.Error("the changing login ended at a later round")
	}
}

// TestGuardRoleChanged: operator → viewer keeps viewing and withdraws
// input (the level only goes down); a token's role is capped by its
// user's. An uninvited viewer ends.
func TestGuardRoleChanged(t *testing.T) {
	e := newGuardEnv(t)
	_, lp := e.login(t, "ann", RoleOperator)
	_, tp := e.token(t, "ann", RoleOperator)
	gl := e.g.Hold("test", lp, LevelView, operateOwnSession(never))
	gt := e.g.Hold("test", tp, LevelView, operateOwnSession(never))
	defer gl.Release()
	defer gt.Release()
	e.dir.set("ann", UserRecord{Role: RoleViewer, Credential: "c1"})
	e.g.Refresh()
	for _, gr := range []*Grant{gl, gt} {
		if gr.Level() != LevelView || gr.Withdrawn() || !gr.CanView() || gr.CanInput() {
			t.Errorf("after the role change: level %s withdrawn %v", gr.Level(), gr.Withdrawn())
		}
		select {
		case <-gr.Changed():
		default:
			t.Error("Changed not signalled")
		}
	}
	cur, err := e.g.Current(tp)
	if err != nil || cur.Role != RoleViewer || cur.Has(ScopeControl) {
		t.Errorf("token after the user's downgrade: %+v %v", cur, err)
	}
	// Back to operator: the REST principal follows, the live grant does not.
	e.dir.set("ann", UserRecord{Role: RoleOperator, Credential: "c1"})
	e.g.Refresh()
	if cur, _ := e.g.Current(lp); cur.Role != RoleOperator {
		t.Errorf("login role %s after the upgrade", cur.Role)
	}
	if gl.Level() != LevelView {
		t.Errorf("a live grant rose to %s", gl.Level())
	}

	// Invitation withdrawn.
	var mu sync.Mutex
	invited := true
	inv := func(string) bool { mu.Lock(); defer mu.Unlock(); return invited }
	_, vp := e.login(t, "bob", RoleAdmin)
	e.dir.set("cy", UserRecord{Role: RoleViewer, Credential: "c1"})
	e.g.Refresh()
	_, cp := e.login(t, "cy", RoleViewer)
	gv := e.g.Hold("test", cp, LevelView, operateOwnSession(inv))
	gb := e.g.Hold("test", vp, LevelView, operateOwnSession(inv))
	defer gv.Release()
	defer gb.Release()
	if gv.Level() != LevelView {
		t.Fatalf("invited viewer: %s", gv.Level())
	}
	mu.Lock()
	invited = false
	mu.Unlock()
	e.g.Recheck()
	waitDone(t, gv, time.Second)
	if gb.Level() != LevelOperate {
		t.Errorf("the admin's grant: %s", gb.Level())
	}
}

// TestGuardTokenExpiry: an expiring token's grant ends at the round after
// its expiry, without any file change.
func TestGuardTokenExpiry(t *testing.T) {
	e := newGuardEnv(t)
	now := time.Now()
	e.tokens.now = func() time.Time { return now }
	secret, _, err := e.tokens.Create("t", "ann", RoleOperator, []string{ScopeRead}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.tokens.Verify(secret)
	if err != nil {
		t.Fatal(err)
	}
	gr := e.g.Hold("test", p, LevelView, operateOwnSession(never))
	defer gr.Release()
	if gr.Level() != LevelView {
		t.Fatalf("read-only token: %s", gr.Level())
	}
	now = now.Add(2 * time.Minute)
	e.g.Recheck()
	waitDone(t, gr, time.Second)
}

// TestGuardWithoutDirectory: with no directory (another auth plugin, or
// auth.mode none) users are not checked; a local principal always holds.
func TestGuardWithoutDirectory(t *testing.T) {
	g := NewGuard(GuardOptions{Logger: quiet})
	local := Principal{User: "local", Role: RoleAdmin, Method: MethodNone}
	gr := g.Hold("test", local, LevelView, operateOwnSession(never))
	defer gr.Release()
	g.Recheck()
	if gr.Level() != LevelOperate || !g.HasUser("anyone") {
		t.Errorf("local: %s", gr.Level())
	}
	if _, err := g.Current(Principal{User: "x", Method: MethodToken, TokenID: "abc"}); err == nil {
		t.Error("a token without tokens holds")
	}
	if _, err := g.Current(Principal{User: "x", Method: MethodCookie}); !errors.Is(err, ErrLoginEnded) {
		t.Errorf("a login without logins: %v", err)
	}
	g.Close() // never started
}

// TestFileDirectory: missing file, a change (even one that keeps size and
// mtime: a rename over it), and a file that does not parse.
func TestFileDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "users")
	parse := func(b []byte) (map[string]UserRecord, error) {
		out := map[string]UserRecord{}
		for _, line := range strings.Fields(string(b)) {
			name, role, ok := strings.Cut(line, ":")
			r, known := ParseRole(role)
			if !ok || !known {
				return nil, fmt.Errorf("bad line %q", line)
			}
			out[name] = UserRecord{Role: r}
		}
		return out, nil
	}
	d := NewFileDirectory(path, parse)
	users, changed, err := d.Users()
	if err != nil || !changed || len(users) != 0 {
		t.Fatalf("missing file: %v %v %v", users, changed, err)
	}
	if _, changed, _ := d.Users(); changed {
		t.Error("a still-missing file changed")
	}
	write := func(s string, mtime time.Time) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mtime, mtime); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Unix(1_700_000_000, 0)
	write("ann:operator", mtime)
	users, changed, err = d.Users()
	if err != nil || !changed || users["ann"].Role != RoleOperator {
		t.Fatalf("first read: %v %v %v", users, changed, err)
	}
	if _, changed, _ := d.Users(); changed {
		t.Error("unchanged file read as changed")
	}
	write("ann:viewer  ", mtime) // same size, same mtime, another inode
	users, changed, err = d.Users()
	if err != nil || !changed || users["ann"].Role != RoleViewer {
		t.Fatalf("replaced file: %v %v %v", users, changed, err)
	}
	write("ann:wizard", mtime)
	if _, changed, err := d.Users(); changed || err == nil {
		t.Errorf("bad file: changed %v err %v", changed, err)
	}
	if _, changed, err := d.Users(); changed || err != nil {
		t.Errorf("bad file reported twice: %v %v", changed, err)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if users, changed, _ := d.Users(); !changed || len(users) != 0 {
		t.Errorf("deleted file: %v %v", users, changed)
	}
}
