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
type Logins struct {
	key       []byte
	idle, max time.Duration
	now       func() time.Time

	mu sync.Mutex
	m  map[string]*login
}

type login struct {
	p             Principal
	created, seen time.Time
}

// NewLogins returns an empty table; a login ends after idle without use or
// max after it began, whichever comes first.
func NewLogins(idle, max time.Duration) *Logins {
	return &Logins{key: randomBytes(32), idle: idle, max: max, now: time.Now, m: map[string]*login{}}
}

// Create starts a login for p and returns the cookie value and the login's
// CSRF token (p.CSRF is set to it in later lookups).
func (l *Logins) Create(p Principal) (cookie, csrf string) {
	id := b64(randomBytes(24))
	p.Method = MethodCookie
	p.CSRF = b64(randomBytes(24))
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) >= maxLogins {
		l.evictLocked(now)
	}
	l.m[id] = &login{p: p, created: now, seen: now}
	return id + "." + l.sign(id), p.CSRF
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
		delete(l.m, id)
		return Principal{}, false
	}
	s.seen = now
	return s.p, true
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
		fn(&s.p)
	}
	return ok
}

// Revoke ends one login (logout).
func (l *Logins) Revoke(cookie string) {
	if id, ok := l.verify(cookie); ok {
		l.mu.Lock()
		delete(l.m, id)
		l.mu.Unlock()
	}
}

// RevokeUser ends every login of user (password change, user deleted).
func (l *Logins) RevokeUser(user string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, s := range l.m {
		if s.p.User == user {
			delete(l.m, id)
		}
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
			delete(l.m, id)
			continue
		}
		if oldest == "" || s.seen.Before(l.m[oldest].seen) {
			oldest = id
		}
	}
	if len(l.m) >= maxLogins && oldest != "" {
		delete(l.m, oldest)
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
