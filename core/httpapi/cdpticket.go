package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/errcode"
)

// CDP tickets let a client that can only take a URL (browser-use's
// cdp_url) attach to a session's CDP endpoint: POST .../cdp/ticket makes
// one for the caller, and the URL carries it instead of a header.
const (
	// ticketTTL: long enough to hand the URL to a program, short enough
	// that a URL seen in a process list or a shell history is stale.
	ticketTTL = 60 * time.Second
	// maxTickets bounds the live tickets of the appliance, and
	// maxTicketsPerUser those of one user, so that a caller cannot fill
	// the table for everyone else.
	maxTickets        = 1024
	maxTicketsPerUser = 32
	// ticketBytes of randomness: 256 bits.
	ticketBytes = 32
)

// ticket is what a ticket stands for: the principal who made it (the
// connection is theirs, re-checked when it is used) and the one session
// it opens.
type ticket struct {
	p       access.Principal
	session string
	expires time.Time
}

// cdpTickets holds the live tickets by the SHA-256 of their secret: a
// memory dump or a debugger does not yield a usable ticket.
type cdpTickets struct {
	now func() time.Time

	mu   sync.Mutex
	byID map[[sha256.Size]byte]ticket
}

func newCDPTickets(now func() time.Time) *cdpTickets {
	if now == nil {
		now = time.Now
	}
	return &cdpTickets{now: now, byID: map[[sha256.Size]byte]ticket{}}
}

// issue makes a ticket for p on session and returns its secret and expiry.
func (t *cdpTickets) issue(p access.Principal, session string) (string, time.Time, error) {
	raw := make([]byte, ticketBytes)
	if _, err := rand.Read(raw); err != nil {
		return "", time.Time{}, errcode.New(errcode.Internal, "no randomness for a ticket")
	}
	secret := base64.RawURLEncoding.EncodeToString(raw)
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.pruneLocked(now)
	mine := 0
	for _, tk := range t.byID {
		if tk.p.User == p.User {
			mine++
		}
	}
	if len(t.byID) >= maxTickets || mine >= maxTicketsPerUser {
		return "", time.Time{}, errcode.New(errcode.RateLimited, "too many CDP tickets waiting to be used").
			WithHint("use or let expire the tickets made in the last minute").WithRecoverable(true)
	}
	exp := now.Add(ticketTTL)
	t.byID[sha256.Sum256([]byte(secret))] = ticket{p: p, session: session, expires: exp}
	return secret, exp, nil
}

// redeem uses up a ticket for session: it returns the principal who made
// it. A ticket works once, even when the answer is a refusal (a ticket for
// another session is spent too: it was shown where it does not belong).
func (t *cdpTickets) redeem(secret, session string) (access.Principal, bool) {
	if len(secret) > 128 {
		return access.Principal{}, false
	}
	h := sha256.Sum256([]byte(secret))
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	t.pruneLocked(now)
	tk, ok := t.byID[h]
	if !ok {
		return access.Principal{}, false
	}
	delete(t.byID, h)
	if tk.session != session {
		return access.Principal{}, false
	}
	return tk.p, true
}

func (t *cdpTickets) pruneLocked(now time.Time) {
	for h, tk := range t.byID {
		if !now.Before(tk.expires) {
			delete(t.byID, h)
		}
	}
}

// live is the number of tickets not used and not expired (tests).
func (t *cdpTickets) live() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked(t.now())
	return len(t.byID)
}
