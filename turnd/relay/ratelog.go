package relay

import (
	"fmt"
	"log/slog"
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
}

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
func (l pionLogger) Warn(msg string)     { l.rl.warn("pion", "pion/turn", "scope", l.scope, "msg", msg) }
func (l pionLogger) Warnf(f string, a ...any) {
	l.Warn(fmt.Sprintf(f, a...))
}
func (l pionLogger) Error(msg string) {
	l.rl.warn("pion", "pion/turn error", "scope", l.scope, "msg", msg)
}
func (l pionLogger) Errorf(f string, a ...any) {
	l.Error(fmt.Sprintf(f, a...))
}
