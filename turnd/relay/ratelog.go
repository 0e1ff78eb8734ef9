package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"sync"
	"time"

	"github.com/pion/logging"
)

// rateLog logs at most one warning per kind per interval and says how many
// it suppressed in between, so a flood of bad credentials or denied peers
// cannot flood the log.
type rateLog struct {
	log   *slog.Logger
	every time.Duration

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int
}

func newRateLog(log *slog.Logger, every time.Duration) *rateLog {
	return &rateLog{log: log, every: every, last: map[string]time.Time{}, suppressed: map[string]int{}}
}

func (r *rateLog) warn(kind, msg string, args ...any) {
	r.warnAddrs(kind, msg, nil, args...)
}

// warnAddrs is warn for an event that names network addresses (a client's,
// a peer's): they stay out of the warning and go, with the same sampling,
// to a debug line of their own — addresses are logged at debug only.
func (r *rateLog) warnAddrs(kind, msg string, addrs []any, args ...any) {
	r.mu.Lock()
	now := time.Now()
	if now.Sub(r.last[kind]) < r.every {
		r.suppressed[kind]++
		r.mu.Unlock()
		return
	}
	n := r.suppressed[kind]
	r.last[kind], r.suppressed[kind] = now, 0
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressedSinceLast", n)
	}
	r.log.Warn(msg, args...)
	if len(addrs) > 0 && r.log.Enabled(context.Background(), slog.LevelDebug) {
		r.log.Debug(msg+" (addresses)", append(append([]any{}, args...), addrs...)...)
	}
}

// addrOf is a's text for a debug line ("" for none).
func addrOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// addrPattern finds IP addresses (with or without a port) in pion's
// messages, which quote clients, peers and 5-tuples.
var addrPattern = regexp.MustCompile(
	`\b(?:\d{1,3}\.){3}\d{1,3}\b|` + // IPv4
		`\[?[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}\]?`) // IPv6

// maskAddrs replaces the addresses in s.
func maskAddrs(s string) string { return addrPattern.ReplaceAllString(s, "[addr]") }

// pionLoggerFactory routes pion's logs: debug and info are dropped (pion
// logs usernames and per-packet detail there), warnings and errors go
// through the rate limiter.
type pionLoggerFactory struct{ rl *rateLog }

func (f pionLoggerFactory) NewLogger(scope string) logging.LeveledLogger {
	return pionLogger{rl: f.rl, scope: scope}
}

type pionLogger struct {
	rl    *rateLog
	scope string
}

func (pionLogger) Trace(string)          {}
func (pionLogger) Tracef(string, ...any) {}
func (pionLogger) Debug(string)          {}
func (pionLogger) Debugf(string, ...any) {}
func (pionLogger) Info(string)           {}
func (pionLogger) Infof(string, ...any)  {}

// Pion's own messages are logged masked; the full text (with addresses)
// goes to the debug line.
func (l pionLogger) Warn(msg string) {
	l.rl.warnAddrs("pion", "pion/turn", []any{"detail", msg}, "scope", l.scope, "msg", maskAddrs(msg))
}
func (l pionLogger) Warnf(f string, a ...any) {
	l.Warn(fmt.Sprintf(f, a...))
}
func (l pionLogger) Error(msg string) {
	l.rl.warnAddrs("pion", "pion/turn error", []any{"detail", msg}, "scope", l.scope, "msg", maskAddrs(msg))
}
func (l pionLogger) Errorf(f string, a ...any) {
	l.Error(fmt.Sprintf(f, a...))
}
