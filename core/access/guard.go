package access

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Why a principal no longer holds (besides ErrTokenInvalid and
// ErrTokenExpired). The API answers all of them with permission_denied.
var (
	// ErrWithdrawn is wrapped by every reason below: access was withdrawn
	// while the caller held it.
	ErrWithdrawn = errors.New("access withdrawn")
	// ErrLoginEnded: the panel login was logged out, expired, or ended by a
	// password change or the user's deletion.
	ErrLoginEnded = fmt.Errorf("%w: the login ended", ErrWithdrawn)
	// ErrUnknownUser: the directory does not list the user (deleted).
	ErrUnknownUser = fmt.Errorf("%w: no such user", ErrWithdrawn)
)

// DefaultPollInterval is how often a running Guard looks at the token and
// users files. Other processes change them (`tabcast tokens`, `tabcast
// users`); a look is two stat calls, so four a second cost nothing and keep
// the time from a change to a cut connection well under a second. Polling
// rather than inotify: writers replace the files by a rename, which a
// watch on the file itself misses, and there is no new dependency.
const DefaultPollInterval = 250 * time.Millisecond

// GuardOptions configure a Guard.
type GuardOptions struct {
	// Tokens and Logins are nil when authentication is off.
	Tokens *Tokens
	Logins *Logins
	// Directory is nil when the core cannot list users.
	Directory Directory
	Logger    *slog.Logger
	// PollInterval defaults to DefaultPollInterval.
	PollInterval time.Duration
}

// Guard is the one place where withdrawn access takes effect. It knows the
// principals as they stand now (tokens, logins, the users directory) and
// holds every live connection's Grant; whenever access may have changed —
// a token revoked, a user deleted, a password set, a role changed, an
// invitation withdrawn — it checks each grant again and ends or narrows
// those no longer allowed. Signaling sockets, their peers and
// DataChannels, MCP requests and agent calls in flight hold grants; any
// later long-lived connection (a CDP endpoint) must hold one too.
type Guard struct {
	tokens   *Tokens
	logins   *Logins
	dir      Directory
	log      *slog.Logger
	interval time.Duration

	syncMu sync.Mutex // one refresh at a time

	mu      sync.Mutex
	users   map[string]UserRecord // nil: no directory
	dirErr  string                // last directory error logged
	grants  map[*Grant]struct{}
	keepers map[string]string // user → login handle that is changing its password

	started  sync.Once
	running  bool // Start ran (read after started)
	stop     chan struct{}
	done     chan struct{}
	stopOnce sync.Once
}

// NewGuard returns a guard. Start makes it follow file changes made by
// other processes; without it, changes are seen when Refresh or Recheck is
// called (each API request refreshes).
func NewGuard(o GuardOptions) *Guard {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PollInterval <= 0 {
		o.PollInterval = DefaultPollInterval
	}
	g := &Guard{tokens: o.Tokens, logins: o.Logins, dir: o.Directory, log: o.Logger, interval: o.PollInterval,
		grants: map[*Grant]struct{}{}, keepers: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	if g.dir != nil {
		g.users = map[string]UserRecord{}
	}
	if g.logins != nil {
		g.logins.credential = g.credential
	}
	g.Refresh()
	return g
}

// Start runs the guard's one goroutine: it polls the files and re-checks
// every grant until ctx ends or Close is called.
func (g *Guard) Start(ctx context.Context) {
	g.started.Do(func() {
		g.running = true
		go g.run(ctx)
	})
}

func (g *Guard) run(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.stop:
			return
		case <-t.C:
			// Every round re-checks the grants even when no file changed:
			// tokens expire, and invitations change in sessions.
			g.refresh(true)
		}
	}
}

// Close stops the goroutine Start began and waits for it. Grants still
// held stay as they are.
func (g *Guard) Close() {
	g.stopOnce.Do(func() { close(g.stop) })
	g.started.Do(func() {}) // no Start after Close
	if g.running {
		<-g.done
	}
}

// Refresh re-reads what other processes changed and, if anything did,
// re-checks every grant. It is cheap when nothing changed (two stat calls).
func (g *Guard) Refresh() { g.refresh(false) }

// Recheck re-checks every grant now, after a change made in this process
// (token revoked, invitation withdrawn, password changed).
func (g *Guard) Recheck() { g.refresh(true) }

func (g *Guard) refresh(recheck bool) {
	g.syncMu.Lock()
	defer g.syncMu.Unlock()
	changed := false
	if g.tokens != nil && g.tokens.Refresh() {
		changed = true
	}
	if g.dir != nil {
		users, dirChanged, err := g.dir.Users()
		g.mu.Lock()
		if err != nil && err.Error() != g.dirErr {
			g.log.Warn("users directory not readable; the users last read stay in force", "err", err)
		}
		g.dirErr = ""
		if err != nil {
			g.dirErr = err.Error()
		}
		if dirChanged && users != nil {
			g.users = users
			changed = true
		}
		g.mu.Unlock()
		if dirChanged {
			g.reconcileLogins()
		}
	}
	if changed || recheck {
		g.recheck()
	}
}

// reconcileLogins ends the logins of users who are gone or whose password
// was set since the login began (but the login changing it through the
// API), and gives the others their current role.
func (g *Guard) reconcileLogins() {
	if g.logins == nil {
		return
	}
	g.mu.Lock()
	users, keepers := g.users, g.keepers
	ended := g.logins.reconcile(func(p Principal, cred string) (bool, Role, string) {
		u, ok := users[p.User]
		if !ok {
			return false, "", ""
		}
		if u.Credential != cred && keepers[p.User] != p.login {
			return false, "", ""
		}
		return true, u.Role, u.Credential
	})
	g.mu.Unlock()
	for _, p := range ended {
		g.log.Info("login ended: the user was deleted or their password set", "user", p.User)
	}
}

// credential is the user's current credential fingerprint ("" without a
// directory): a new login remembers it.
func (g *Guard) credential(user string) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.users[user].Credential
}

// KeepLogin marks p's login as the one changing the user's password: the
// change the guard then reads from the directory does not end it (every
// other login of the user ends). The returned func ends the mark; call it
// after the change was read (Refresh) or failed.
func (g *Guard) KeepLogin(p Principal) (done func()) {
	if p.Method != MethodCookie || p.login == "" {
		return func() {}
	}
	g.mu.Lock()
	g.keepers[p.User] = p.login
	g.mu.Unlock()
	return func() {
		g.mu.Lock()
		if g.keepers[p.User] == p.login {
			delete(g.keepers, p.User)
		}
		g.mu.Unlock()
	}
}

// Current returns p as it stands now: its token or login still valid, its
// user still in the directory, its role as the directory says (a token's
// role is also capped by its own). The error wraps why it no longer holds.
func (g *Guard) Current(p Principal) (Principal, error) {
	var cur Principal
	switch p.Method {
	case MethodNone:
		return p, nil
	case MethodToken:
		if g.tokens == nil {
			return Principal{}, ErrTokenInvalid
		}
		info, err := g.tokens.lookup(p.TokenID)
		if err != nil {
			return Principal{}, err
		}
		cur = Principal{User: info.User, Role: info.Role, Method: MethodToken, TokenID: info.ID, Scopes: info.Scopes}
	case MethodCookie:
		if g.logins == nil {
			return Principal{}, ErrLoginEnded
		}
		var ok bool
		if cur, ok = g.logins.current(p.login); !ok {
			return Principal{}, ErrLoginEnded
		}
	default:
		return Principal{}, ErrWithdrawn
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.users == nil {
		return cur, nil
	}
	u, ok := g.users[cur.User]
	if !ok {
		return Principal{}, ErrUnknownUser
	}
	if cur.Method == MethodToken {
		cur.Role = lower(cur.Role, u.Role)
	} else {
		cur.Role = u.Role
	}
	return cur, nil
}

// HasUser reports whether the directory lists user (true without one).
func (g *Guard) HasUser(user string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.users == nil {
		return true
	}
	_, ok := g.users[user]
	return ok
}

// rank orders roles, weakest first.
func rank(r Role) int {
	switch r {
	case RoleAdmin:
		return 3
	case RoleOperator:
		return 2
	case RoleViewer:
		return 1
	}
	return 0
}

func lower(a, b Role) Role {
	if rank(a) <= rank(b) {
		return a
	}
	return b
}

// recheck evaluates every grant against the principals as they are now.
// Checks run outside the guard's lock: they may read session state.
func (g *Guard) recheck() {
	g.mu.Lock()
	grants := make([]*Grant, 0, len(g.grants))
	for gr := range g.grants {
		grants = append(grants, gr)
	}
	g.mu.Unlock()
	for _, gr := range grants {
		lvl, err := g.evaluate(gr.p, gr.check)
		if gr.lower(lvl) {
			reason := "role or invitation changed"
			if err != nil {
				reason = err.Error()
			}
			g.log.Info("live access narrowed", "user", gr.p.User, "method", gr.p.Method, "token", gr.p.TokenID,
				"kind", gr.kind, "level", lvl.String(), "reason", reason)
		}
	}
}

func (g *Guard) evaluate(p Principal, check func(Principal) Level) (Level, error) {
	cur, err := g.Current(p)
	if err != nil {
		return LevelNone, err
	}
	return check(cur), nil
}

// Hold registers a live connection of p: kind names it in the log, need
// is the least level it must keep to go on, and check says what the
// principal (as it stands at each check) may do on it. Release it when
// the connection ends.
func (g *Guard) Hold(kind string, p Principal, need Level, check func(Principal) Level) *Grant {
	ctx, cancel := context.WithCancelCause(context.Background())
	gr := &Grant{g: g, kind: kind, p: p, need: need, check: check, changed: make(chan struct{}, 1), ctx: ctx, cancel: cancel}
	lvl, _ := g.evaluate(p, check)
	gr.level = lvl
	if lvl < need {
		cancel(ErrWithdrawn)
	}
	g.mu.Lock()
	g.grants[gr] = struct{}{}
	g.mu.Unlock()
	return gr
}

// Live is the number of grants held (tests, metrics).
func (g *Guard) Live() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.grants)
}
