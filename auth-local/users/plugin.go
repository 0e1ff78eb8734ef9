package users

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
	"github.com/tabcast/tabcast/plugins/base"
)

// Identity of the plugin.
const (
	Name    = "auth-local"
	Version = "0.1.0"
)

// Limits of the rate limiter.
const (
	maxLockout = 5 * time.Minute
	// maxLimiterKeys bounds each limiter (users, IPs); an entry is ~150 B.
	maxLimiterKeys = 10000
	// maxConcurrentHashes bounds parallel argon2 runs: each takes 64 MiB
	// and 2 threads, and the appliance has 2 cores, so more would only queue
	// in the CPU while holding memory. A login flood waits here instead.
	maxConcurrentHashes = 2
)

// Config is the plugin's config subtree.
type Config struct {
	UsersFile           string `json:"usersFile"`
	InitialPasswordFile string `json:"initialPasswordFile"`
	// MaxFailures is how many failures in a row lock a user or an IP out.
	MaxFailures int `json:"maxFailures"`
	// LockoutBase is the first lockout; it doubles per further failure, up
	// to 5m.
	LockoutBase string `json:"lockoutBase"`
}

// DefaultConfig is the config when a key is absent.
func DefaultConfig() Config {
	return Config{
		UsersFile:           "/etc/tabcast/users.yaml",
		InitialPasswordFile: "/etc/tabcast/initial-admin-password",
		MaxFailures:         5,
		LockoutBase:         "1s",
	}
}

func (c Config) validate() (time.Duration, error) {
	if strings.TrimSpace(c.UsersFile) == "" {
		return 0, &base.ConfigError{Key: "usersFile", Message: "must not be empty"}
	}
	if strings.TrimSpace(c.InitialPasswordFile) == "" {
		return 0, &base.ConfigError{Key: "initialPasswordFile", Message: "must not be empty"}
	}
	if err := base.Range("maxFailures", c.MaxFailures, 1, 100); err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(c.LockoutBase)
	if err != nil {
		return 0, &base.ConfigError{Key: "lockoutBase", Message: fmt.Sprintf("not a duration: %q", c.LockoutBase)}
	}
	if d < 10*time.Millisecond || d > maxLockout {
		return 0, &base.ConfigError{Key: "lockoutBase", Message: fmt.Sprintf("out of range: %v not in [10ms, %v]", d, maxLockout)}
	}
	return d, nil
}

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "auth-local",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "usersFile": {"type": "string", "minLength": 1, "default": "/etc/tabcast/users.yaml",
      "description": "YAML file of local users and their argon2id password hashes."},
    "initialPasswordFile": {"type": "string", "minLength": 1, "default": "/etc/tabcast/initial-admin-password",
      "description": "Where the generated password of the first admin is written (mode 0600)."},
    "maxFailures": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5,
      "description": "Failed logins in a row, per user and per source IP, before a lockout."},
    "lockoutBase": {"type": "string", "default": "1s",
      "description": "First lockout (Go duration, 10ms..5m); doubles per further failure, capped at 5m."}
  }
}`

// Authenticator implements auth.Authenticator against a users file. Its
// lifecycle (Info, ConfigSchema, Ping, strict config decoding) is
// base.Lifecycle's; Shutdown refuses further logins.
type Authenticator struct {
	*base.Lifecycle[Config]
	log *slog.Logger
	sem chan struct{}

	mu     sync.Mutex
	cfg    Config
	store  *Store
	byUser *limiter
	byIP   *limiter
	params Params
}

var _ auth.Authenticator = (*Authenticator)(nil)

// New returns an Authenticator with the default config; the users file is
// opened on SetConfig or the first Authenticate. log may be nil.
func New(log *slog.Logger) *Authenticator {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	a := &Authenticator{log: log, sem: make(chan struct{}, maxConcurrentHashes), params: DefaultParams}
	a.Lifecycle = base.NewLifecycle(base.LifecycleSpec[Config]{
		Info: base.Info{
			Name: Name, Version: Version, Kind: plugins.KindAuth, APIVersion: 1,
			Capabilities: map[string]string{"roles": strings.Join(Roles, ","), "hash": "argon2id", "source": "file"},
		},
		Schema:   configSchema,
		Defaults: DefaultConfig,
		Apply:    a.applyConfig,
	})
	a.cfg = DefaultConfig()
	a.byUser = newLimiter(a.cfg.MaxFailures, time.Second, maxLockout, maxLimiterKeys)
	a.byIP = newLimiter(a.cfg.MaxFailures, time.Second, maxLockout, maxLimiterKeys)
	return a
}

// applyConfig (SetConfig, after strict decoding with absent keys taking
// defaults) replaces the config, opens the users file and, when it holds no
// users, creates the first admin. Failure counts are kept across calls
// unless the limits changed.
func (a *Authenticator) applyConfig(_ context.Context, cfg Config) error {
	lockBase, err := cfg.validate()
	if err != nil {
		return err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.openLocked(cfg); err != nil {
		return err
	}
	if cfg.MaxFailures != a.cfg.MaxFailures || cfg.LockoutBase != a.cfg.LockoutBase {
		a.byUser = newLimiter(cfg.MaxFailures, lockBase, maxLockout, maxLimiterKeys)
		a.byIP = newLimiter(cfg.MaxFailures, lockBase, maxLockout, maxLimiterKeys)
	}
	a.cfg = cfg
	return nil
}

// openLocked opens cfg's users file and ensures an admin. Caller holds a.mu.
func (a *Authenticator) openLocked(cfg Config) error {
	if a.store != nil && a.store.Path() == cfg.UsersFile && a.cfg.InitialPasswordFile == cfg.InitialPasswordFile {
		return nil
	}
	st, err := Open(cfg.UsersFile)
	if err != nil {
		return &base.ConfigError{Key: "usersFile", Message: err.Error()}
	}
	st.params = a.params
	created, _, err := EnsureAdmin(st, cfg.InitialPasswordFile)
	switch {
	case errors.Is(err, ErrPasswordFile):
		return &base.ConfigError{Key: "initialPasswordFile", Message: err.Error()}
	case err != nil:
		return &base.ConfigError{Key: "usersFile", Message: err.Error()}
	}
	if created {
		// The password itself is never logged: it is in the 0600 file.
		a.log.Warn("no users: created user admin with a one-time password; change it at first login",
			"passwordFile", cfg.InitialPasswordFile, "usersFile", cfg.UsersFile)
	}
	a.store = st
	return nil
}

func (a *Authenticator) state() (*Store, *limiter, *limiter, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.store == nil {
		if err := a.openLocked(a.cfg); err != nil {
			return nil, nil, nil, fmt.Errorf("auth-local: %w", err)
		}
	}
	return a.store, a.byUser, a.byIP, nil
}

// Authenticate checks a login. Unknown user and wrong password give the same
// result after the same argon2 work. While the user or the source IP is
// locked out the answer is rate_limited and the password is not checked.
func (a *Authenticator) Authenticate(ctx context.Context, r auth.Request) (auth.Result, error) {
	_, res, err := a.check(ctx, r)
	return res, err
}

// ChangePassword checks the old password exactly as a login does (same
// limits, same answers) and then sets the new one.
func (a *Authenticator) ChangePassword(ctx context.Context, r auth.ChangeRequest) (auth.Result, error) {
	store, res, err := a.check(ctx, auth.Request{Username: r.Username, Password: r.OldPassword, SourceIP: r.SourceIP})
	if err != nil || !res.OK {
		return res, err
	}
	if string(r.NewPassword) == string(r.OldPassword) {
		return auth.Result{ErrorCode: auth.CodeWeakPassword}, nil
	}
	err = store.SetPassword(res.UserID, string(r.NewPassword), false)
	switch {
	case errors.Is(err, ErrWeakPassword):
		return auth.Result{ErrorCode: auth.CodeWeakPassword}, nil
	case err != nil:
		return auth.Result{}, fmt.Errorf("auth-local: change password: %w", err)
	}
	a.log.Info("password changed", "user", res.UserID)
	res.MustChangePassword = false
	return res, nil
}

func (a *Authenticator) check(ctx context.Context, r auth.Request) (*Store, auth.Result, error) {
	if a.Life().Err() != nil {
		return nil, auth.Result{}, errors.New("auth-local: shut down")
	}
	store, byUser, byIP, err := a.state()
	if err != nil {
		return nil, auth.Result{}, err
	}
	// An empty SourceIP (a host that does not pass one) shares one counter.
	ip := r.SourceIP
	if len(ip) > 64 {
		ip = "h:" + nameTag(ip) // not an address; keep keys and logs short
	}
	userKey, ipKey := "u:"+nameTag(r.Username), "ip:"+ip
	if wait := max(byUser.blocked(userKey), byIP.blocked(ipKey)); wait > 0 {
		a.log.Info("login refused: rate limited", "user", nameTag(r.Username), "sourceIP", ip, "retryAfter", wait.Round(time.Millisecond))
		return store, auth.Result{ErrorCode: auth.CodeRateLimited, RetryAfter: wait}, nil
	}

	select {
	case a.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, auth.Result{}, fmt.Errorf("auth-local: waiting for a hash slot: %w", ctx.Err())
	}
	u, ok := store.Verify(r.Username, r.Password)
	<-a.sem

	if !ok {
		byUser.fail(userKey)
		byIP.fail(ipKey)
		a.log.Info("login failed", "user", nameTag(r.Username), "sourceIP", ip)
		return store, auth.Result{ErrorCode: auth.CodeInvalidCredentials}, nil
	}
	byUser.reset(userKey)
	a.log.Info("login ok", "user", u.Name, "role", u.Role, "sourceIP", ip, "mustChangePassword", u.MustChangePassword)
	return store, auth.Result{OK: true, UserID: u.Name, Roles: []string{u.Role}, MustChangePassword: u.MustChangePassword}, nil
}

// nameTag is a short hash of a user name for logs and limiter keys: failed
// logins often carry a password typed into the name field, so the raw name
// of a failure is never logged.
func nameTag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:6])
}
