package access

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"strings"
	"sync"
	"time"
)

// maxLogins bounds the login table; when full, expired logins go first,
// then the least recently used.
const maxLogins = 10000

// Logins are the panel's login sessions, held in memory: a restart logs
// everyone out. The cookie carries a random id and its HMAC under a key
// made at start, so a tampered or forged cookie fails before any lookup.
//
// Each login also has a handle, a random name that is not the cookie and
// survives the cookie's rotation: live connections opened with the login
// (core/access.Grant) follow it, so they end when the login ends.
type Logins struct {
	key       []byte
	idle, max time.Duration
	now       func() time.Time
	// credential, set by a Guard, fingerprints a user's password as the
	// directory has it now; a login remembers the one it began with, so a
	// password set elsewhere (the CLI) ends it. Nil: "".
	credential func(user string) string

	mu       sync.Mutex
	m        map[string]*login // by cookie id
	byHandle map[string]string // handle → cookie id
}

type login struct {
	p             Principal // p.login is the handle
	cred          string    // credential of the user when the login began
	created, seen time.Time
}

// NewLogins returns an empty table; a login ends after idle without use or
// max after it began, whichever comes first.
func NewLogins(idle, max time.Duration) *Logins {
	return &Logins{key: randomBytes(32), idle: idle, max: max, now: time.Now, m: map[string]*login{}, byHandle: map[string]string{}}
}

// Create starts a login for p and returns the cookie value and the login's
// CSRF token (p.CSRF is set to it in later lookups).
func (l *Logins) Create(p Principal) (cookie, csrf string) {
	id := b64(randomBytes(24))
	p.Method = MethodCookie
	p.CSRF = b64(randomBytes(24))
	p.login = b64(randomBytes(12))
	cred := l.credentialOf(p.User)
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) >= maxLogins {
		l.evictLocked(now)
	}
	l.m[id] = &login{p: p, cred: cred, created: now, seen: now}
	l.byHandle[p.login] = id
	return id + "." + l.sign(id), p.CSRF
}

func (l *Logins) credentialOf(user string) string {
	if l.credential == nil {
		return ""
	}
	return l.credential(user)
}

// Lookup returns the principal of a cookie value and renews its idle timer.
func (l *Logins) Lookup(cookie string) (Principal, bool) {
	id, ok := l.verify(cookie)
	if !ok {
		return Principal{}, false
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	if !ok {
		return Principal{}, false
	}
	if l.expired(s, now) {
		l.deleteLocked(id)
		return Principal{}, false
	}
	s.seen = now
	return s.p, true
}

// current returns the principal of a login by its handle, as the table
// has it now (its role follows the directory). A live connection is use:
// only the absolute expiry ends a login here, not the idle one.
func (l *Logins) current(handle string) (Principal, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[l.byHandle[handle]]
	if !ok || l.now().Sub(s.created) > l.max {
		return Principal{}, false
	}
	return s.p, true
}

// Rotate gives a live login a new cookie value (the old one stops working)
// after fn changed its principal; the login keeps its handle, so its live
// connections go on. It also takes the user's current credential: a
// password change through the API rotates the changing login.
func (l *Logins) Rotate(cookie string, fn func(*Principal)) (string, Principal, bool) {
	old, ok := l.verify(cookie)
	if !ok {
		return "", Principal{}, false
	}
	id := b64(randomBytes(24))
	l.mu.Lock()
	s, ok := l.m[old]
	if !ok {
		l.mu.Unlock()
		return "", Principal{}, false
	}
	user := s.p.User
	l.mu.Unlock()
	cred := l.credentialOf(user) // outside l.mu: it may take the guard's lock
	l.mu.Lock()
	defer l.mu.Unlock()
	if s2, ok := l.m[old]; !ok || s2 != s {
		return "", Principal{}, false
	}
	delete(l.m, old)
	if fn != nil {
		fn(&s.p)
	}
	s.cred, s.seen = cred, l.now()
	l.m[id] = s
	l.byHandle[s.p.login] = id
	return id + "." + l.sign(id), s.p, true
}

// Update replaces the principal of a live login (e.g. after a password
// change lifts MustChangePassword).
func (l *Logins) Update(cookie string, fn func(*Principal)) bool {
	id, ok := l.verify(cookie)
	if !ok {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.m[id]
	if ok {
		login := s.p.login
		fn(&s.p)
		s.p.login = login // the handle is the table's, not the caller's
	}
	return ok
}

// Revoke ends one login (logout).
func (l *Logins) Revoke(cookie string) {
	if id, ok := l.verify(cookie); ok {
		l.mu.Lock()
		l.deleteLocked(id)
		l.mu.Unlock()
	}
}

// RevokeUser ends every login of user (password change, user deleted).
func (l *Logins) RevokeUser(user string) {
	l.revokeUserExcept(user, "")
}

// RevokeOthers ends every login of p's user but p's own (the login that
// changed the password goes on).
func (l *Logins) RevokeOthers(p Principal) {
	if p.login == "" {
		return // not a login: ending them all would end nothing of p's
	}
	l.revokeUserExcept(p.User, p.login)
}

func (l *Logins) revokeUserExcept(user, keep string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.m {
		if s.p.User == user && (keep == "" || s.p.login != keep) {
			l.deleteLocked(id)
		}
	}
}

// reconcile brings every login in line with the user directory: fn gets
// the login's principal and credential and says whether it may go on, with
// which role and credential. Logins it refuses end.
func (l *Logins) reconcile(fn func(p Principal, cred string) (keep bool, role Role, newCred string)) (ended []Principal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.m {
		keep, role, cred := fn(s.p, s.cred)
		if !keep {
			ended = append(ended, s.p)
			l.deleteLocked(id)
			continue
		}
		s.p.Role, s.cred = role, cred
	}
	return ended
}

func (l *Logins) deleteLocked(id string) {
	if s, ok := l.m[id]; ok {
		delete(l.byHandle, s.p.login)
		delete(l.m, id)
	}
}

// Len is the number of live logins.
func (l *Logins) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.m)
}

func (l *Logins) expired(s *login, now time.Time) bool {
	return now.Sub(s.seen) > l.idle || now.Sub(s.created) > l.max
}

func (l *Logins) evictLocked(now time.Time) {
	var oldest string
	for id, s := range l.m {
		if l.expired(s, now) {
			l.deleteLocked(id)
			continue
		}
		if oldest == "" || s.seen.Before(l.m[oldest].seen) {
			oldest = id
		}
	}
	if len(l.m) >= maxLogins && oldest != "" {
		l.deleteLocked(oldest)
	}
}

func (l *Logins) sign(id string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(id))
	return b64(m.Sum(nil))
}

func (l *Logins) verify(cookie string) (string, bool) {
	id, sig, ok := strings.Cut(cookie, ".")
	if !ok || len(id) == 0 || len(id) > 64 {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(sig), []byte(l.sign(id))) != 1 {
		return "", false
	}
	return id, true
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go ≥ 1.24)
	return b
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
