// Package relay is turnd, Tabcast's embedded TURN server (pion/turn v4).
//
// Security model: the relay exists only so that a viewer that cannot reach
// the appliance directly can reach the appliance's own WebRTC ports through
// it — it is not a general-purpose relay. Every peer address is normalized
// with net/netip (IPv4-mapped IPv6 becomes IPv4) and a CreatePermission or
// ChannelBind is granted only for the configured selfAddresses (checked
// first, so the appliance's private LAN address works) or, after every
// special-purpose class (loopback, private, CGNAT, link-local including
// 169.254.169.254, ULA, multicast, unspecified, reserved, and IPv6 forms
// embedding IPv4) has been denied, for an explicit allowPeers entry; pion's
// allow-all default handler is never used. The relay socket itself is
// wrapped so that every datagram, both ways, must also match a self address
// plus a self port (or allowPeers), and stays within per-allocation and
// total bandwidth caps; anything else is dropped and counted. Credentials
// follow the TURN REST scheme ("<expiry>:<opaque id>", HMAC-SHA1 password)
// but are accepted only while their opaque id is in the plugin's live table:
// minted, not expired and not revoked (the core revokes when a peer closes,
// which also closes that peer's allocations). Quotas cap allocations per
// user and in total (486), and an allocation that stops authenticating is
// closed after allocationLifetime. Passwords, HMACs and user names are never
// logged; refusals are logged at most once per interval per kind.
package relay

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pion/turn/v4"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	turnapi "github.com/tabcast/tabcast/plugins/turn"
)

// Identity of the plugin.
const (
	Name    = "turnd"
	Version = "0.1.0"
)

const (
	// maxCredentials bounds the live credential table (~200 B an entry).
	maxCredentials = 20000
	// maxScopeField bounds each Scope string.
	maxScopeField = 256
	// logEvery is the shortest interval between two refusal logs of a kind.
	logEvery = 10 * time.Second
)

type counters struct {
	allocationsTotal, authFailures, permissionDenies, quotaRejects atomic.Uint64
	relayedBytes, relayedPackets, policyDrops, bandwidthDrops      atomic.Uint64
	// tcpRelayRefusals counts RFC 6062 requests answered with an error
	// (turnd relays UDP only); not in turnapi.Stats, which has no field.
	tcpRelayRefusals atomic.Uint64
}

// credEntry is one minted, unrevoked credential.
type credEntry struct {
	scope   turnapi.Scope
	tag     string // fingerprint of the secret it was minted with
	expires int64  // unix seconds, as in the username
}

// Plugin implements turn.Relay. Its lifecycle (Info, ConfigSchema, Ping,
// strict config decoding) is base.Lifecycle's; Life ends on Shutdown.
type Plugin struct {
	*base.Lifecycle[Config]
	log   *slog.Logger
	rl    *rateLog
	stats counters

	mu        sync.Mutex // serializes SetConfig, start and Shutdown
	cfg       Config
	set       *settings
	inst      *instance
	shut      bool
	credMu    sync.Mutex // guards the table and the secrets
	creds     map[string]*credEntry
	cur, prev *secret
	secretsAt time.Time
}

var _ turnapi.Relay = (*Plugin)(nil)

// New returns a Plugin with the default config; the server starts on
// SetConfig (or the first MintCredential). log may be nil.
func New(log *slog.Logger) *Plugin {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	p := &Plugin{log: log, rl: newRateLog(log, logEvery), cfg: DefaultConfig(), creds: map[string]*credEntry{}}
	p.Lifecycle = base.NewLifecycle(base.LifecycleSpec[Config]{
		Info: base.Info{
			Name: Name, Version: Version, Kind: plugins.KindTurn, APIVersion: 1,
			Capabilities: map[string]string{"transports": "udp,tcp,tls", "credentials": "turn-rest-hmac-sha1", "peers": "self-only"},
		},
		Schema:     configSchema,
		Defaults:   DefaultConfig,
		Apply:      p.applyConfig,
		OnShutdown: p.shutdown,
	})
	return p
}

// applyConfig (SetConfig, after strict decoding with absent keys taking
// defaults) validates the config, loads or creates the secret, and
// (re)starts the server when anything changed. Minted credentials survive
// a restart; allocations do not.
func (p *Plugin) applyConfig(_ context.Context, cfg Config) error {
	set, err := cfg.validate()
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return errors.New("turnd: shut down")
	}
	return p.applyLocked(set)
}

// sameConfig compares configs but for the secret files, which are
// reloaded without a restart.
func sameConfig(a, b Config) bool {
	a.SecretFile, a.PreviousSecretFile, b.SecretFile, b.PreviousSecretFile = "", "", "", ""
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

// applyLocked loads secrets and starts set. Caller holds p.mu.
func (p *Plugin) applyLocked(set *settings) error {
	cur, created, err := loadOrCreateSecret(set.SecretFile)
	if err != nil {
		return &base.ConfigError{Key: "secretFile", Message: err.Error()}
	}
	if created {
		p.log.Warn("generated a new TURN secret", "secretFile", set.SecretFile, "tag", cur.tag)
	}
	var prev *secret
	if set.PreviousSecretFile != "" {
		if prev, err = loadSecret(set.PreviousSecretFile); err != nil {
			return &base.ConfigError{Key: "previousSecretFile", Message: err.Error()}
		}
	}
	if p.inst != nil && p.set != nil && sameConfig(p.set.Config, set.Config) {
		p.setSecrets(cur, prev)
		p.set, p.cfg = set, set.Config
		return nil
	}
	if p.inst != nil {
		p.inst.close()
		p.inst = nil
	}
	inst, err := p.startInstance(set)
	if err != nil {
		return err
	}
	p.setSecrets(cur, prev)
	p.inst, p.set, p.cfg = inst, set, set.Config
	return nil
}

func (p *Plugin) setSecrets(cur, prev *secret) {
	p.credMu.Lock()
	defer p.credMu.Unlock()
	p.cur, p.prev, p.secretsAt = cur, prev, time.Now()
}

// running returns the instance, starting it with the current config if
// SetConfig was never called.
func (p *Plugin) running() (*instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		return nil, errors.New("turnd: shut down")
	}
	if p.inst != nil {
		return p.inst, nil
	}
	set, err := p.cfg.validate()
	if err != nil {
		return nil, fmt.Errorf("turnd: %w", err)
	}
	if err := p.applyLocked(set); err != nil {
		return nil, fmt.Errorf("turnd: %w", err)
	}
	return p.inst, nil
}

func validScope(s turnapi.Scope) error {
	for name, v := range map[string]string{"user": s.User, "session": s.Session, "peer": s.Peer} {
		if v == "" {
			return fmt.Errorf("turnd: scope %s is empty", name)
		}
		if len(v) > maxScopeField {
			return fmt.Errorf("turnd: scope %s longer than %d bytes", name, maxScopeField)
		}
	}
	if s.Generation < 0 {
		return errors.New("turnd: scope generation is negative")
	}
	return nil
}

// MintCredential implements turn.Relay.
func (p *Plugin) MintCredential(_ context.Context, scope turnapi.Scope, ttl time.Duration) (turnapi.Credential, error) {
	if err := validScope(scope); err != nil {
		return turnapi.Credential{}, err
	}
	if ttl <= 0 {
		return turnapi.Credential{}, errors.New("turnd: ttl must be positive")
	}
	if ttl > turnapi.MaxTTL {
		return turnapi.Credential{}, fmt.Errorf("turnd: ttl %v longer than the maximum %v", ttl, turnapi.MaxTTL)
	}
	inst, err := p.running()
	if err != nil {
		return turnapi.Credential{}, err
	}
	now := time.Now()
	p.housekeeping(now)
	raw := make([]byte, 12)
	if _, err := rand.Read(raw); err != nil {
		return turnapi.Credential{}, err
	}
	id := base64.RawURLEncoding.EncodeToString(raw)
	expires := now.Add(ttl)
	exp := expires.Unix()
	if expires.After(time.Unix(exp, 0)) {
		exp++ // round up: never expire before the promised time
	}
	username := strconv.FormatInt(exp, 10) + ":" + id

	p.credMu.Lock()
	if len(p.creds) >= maxCredentials {
		p.credMu.Unlock()
		return turnapi.Credential{}, fmt.Errorf("turnd: %d live credentials: revoke closed peers", maxCredentials)
	}
	cur := p.cur
	p.creds[id] = &credEntry{scope: scope, tag: cur.tag, expires: exp}
	p.credMu.Unlock()

	return turnapi.Credential{Username: username, Password: cur.password(username), URLs: inst.urls(), Expires: time.Unix(exp, 0)}, nil
}

// Revoke implements turn.Relay.
func (p *Plugin) Revoke(_ context.Context, scope turnapi.Scope) (turnapi.Revoked, error) {
	if err := validScope(scope); err != nil {
		return turnapi.Revoked{}, err
	}
	ids := map[string]bool{}
	p.credMu.Lock()
	for id, e := range p.creds {
		s := e.scope
		if s.User == scope.User && s.Session == scope.Session && s.Peer == scope.Peer && s.Generation <= scope.Generation {
			ids[id] = true
			delete(p.creds, id)
		}
	}
	p.credMu.Unlock()
	p.mu.Lock()
	inst := p.inst
	p.mu.Unlock()
	out := turnapi.Revoked{Credentials: len(ids)}
	if inst != nil && len(ids) > 0 {
		out.Allocations = inst.closeIDs(ids)
	}
	return out, nil
}

// Status implements turn.Relay.
func (p *Plugin) Status(context.Context) (turnapi.Stats, error) {
	p.mu.Lock()
	inst := p.inst
	p.mu.Unlock()
	st := turnapi.Stats{
		AllocationsTotal: p.stats.allocationsTotal.Load(), AuthFailures: p.stats.authFailures.Load(),
		PermissionDenies: p.stats.permissionDenies.Load(), QuotaRejects: p.stats.quotaRejects.Load(),
		RelayedBytes: p.stats.relayedBytes.Load(), RelayedPackets: p.stats.relayedPackets.Load(),
		PolicyDrops: p.stats.policyDrops.Load(), BandwidthDrops: p.stats.bandwidthDrops.Load(),
	}
	if inst != nil {
		st.AllocationsActive = inst.active()
	}
	p.credMu.Lock()
	st.CredentialsLive = len(p.creds)
	p.credMu.Unlock()
	return st, nil
}

// shutdown (Shutdown, once Life ended) stops the server, ends every
// allocation and forgets every credential.
func (p *Plugin) shutdown(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shut = true
	if p.inst != nil {
		p.inst.close()
		p.inst = nil
	}
	p.credMu.Lock()
	p.creds = map[string]*credEntry{}
	p.credMu.Unlock()
	return nil
}

// parseUsername splits "<expiry>:<id>".
func parseUsername(u string) (exp int64, id string, ok bool) {
	ts, id, found := strings.Cut(u, ":")
	if !found || id == "" || len(u) > 64 {
		return 0, "", false
	}
	exp, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return 0, "", false
	}
	return exp, id, true
}

// authenticate is the pion AuthHandler: the key of a live credential, or
// false (pion v4.1.4 then answers 400 Bad Request). A wrong password is
// caught by pion's integrity check afterwards and reported to onAuth.
func (p *Plugin) authenticate(username, realm string, src net.Addr) ([]byte, bool) {
	p.housekeeping(time.Now())
	exp, id, ok := parseUsername(username)
	reason := ""
	var key []byte
	switch {
	case !ok:
		reason, id = "malformed username", ""
	case exp < time.Now().Unix():
		reason = "expired"
	default:
		p.credMu.Lock()
		e := p.creds[id]
		var s *secret
		if e != nil {
			for _, cand := range []*secret{p.cur, p.prev} {
				if cand != nil && cand.tag == e.tag {
					s = cand
				}
			}
		}
		p.credMu.Unlock()
		switch {
		case e == nil:
			reason = "unknown or revoked"
		case e.expires != exp:
			reason = "expiry does not match the minted one"
		case s == nil:
			reason = "minted with a retired secret"
		default:
			key = turn.GenerateAuthKey(username, realm, s.password(username))
		}
	}
	if key == nil {
		p.stats.authFailures.Add(1)
		p.rl.warnAddrs("auth", "TURN credential refused", []any{"client", addrOf(src)}, "reason", reason, "id", id)
		return nil, false
	}
	return key, true
}

// userOf is the scope user of a live credential's username.
func (p *Plugin) userOf(username string) (string, bool) {
	_, id, ok := parseUsername(username)
	if !ok {
		return "", false
	}
	p.credMu.Lock()
	defer p.credMu.Unlock()
	e := p.creds[id]
	if e == nil {
		return "", false
	}
	return e.scope.User, true
}

// housekeeping, at most once a second: drop expired credentials and reload
// secret files that changed (a removed previous secret retires it).
func (p *Plugin) housekeeping(now time.Time) {
	p.credMu.Lock()
	defer p.credMu.Unlock()
	if now.Sub(p.secretsAt) < time.Second {
		return
	}
	p.secretsAt = now
	for id, e := range p.creds {
		if e.expires < now.Unix() {
			delete(p.creds, id)
		}
	}
	if p.cur != nil && p.cur.changed() {
		if s, err := loadSecret(p.cur.path); err == nil {
			p.log.Warn("TURN secret file changed: reloaded", "secretFile", s.path, "tag", s.tag)
			p.cur = s
		} else {
			p.rl.warn("secret", "TURN secret file unreadable; keeping the loaded secret", "err", err)
		}
	}
	if p.prev != nil && p.prev.changed() {
		s, err := loadSecret(p.prev.path)
		switch {
		case err == nil:
			p.prev = s
		case errors.Is(err, fs.ErrNotExist):
			p.log.Warn("previous TURN secret removed: its credentials are no longer accepted", "previousSecretFile", p.prev.path)
			p.prev = nil
		default:
			p.rl.warn("secret", "previous TURN secret unreadable; keeping it", "err", err)
		}
	}
}

// nameTag is a short hash of a user name for logs.
func nameTag(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:6])
}
