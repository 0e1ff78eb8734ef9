package users

import (
	"container/list"
	"sync"
	"time"
)

// limiter counts login failures per key (a user name or a source IP) and
// locks a key out after maxFailures: the lockout is base, doubling with
// every further failure, capped at maxLockout. It holds at most maxKeys
// entries (least recently failed evicted first) so an attacker spraying
// names or addresses cannot grow memory; entries idle for forgetAfter are
// dropped on access.
type limiter struct {
	mu          sync.Mutex
	maxFailures int
	base        time.Duration
	maxLockout  time.Duration
	forgetAfter time.Duration
	maxKeys     int
	now         func() time.Time

	lru  *list.List // of *limitEntry, most recent at front
	byID map[string]*list.Element
}

type limitEntry struct {
	key      string
	failures int
	last     time.Time
	until    time.Time
}

func newLimiter(maxFailures int, base, maxLockout time.Duration, maxKeys int) *limiter {
	return &limiter{
		maxFailures: maxFailures, base: base, maxLockout: maxLockout,
		// Counters outlive the longest lockout so waiting it out does not
		// reset the doubling.
		forgetAfter: 2*maxLockout + 15*time.Minute,
		maxKeys:     maxKeys, now: time.Now,
		lru: list.New(), byID: map[string]*list.Element{},
	}
}

// blocked returns how long key is still locked out (0 when it is not).
func (l *limiter) blocked(key string) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	el, ok := l.byID[key]
	if !ok {
		return 0
	}
	e := el.Value.(*limitEntry)
	now := l.now()
	if now.Sub(e.last) > l.forgetAfter {
		l.remove(el)
		return 0
	}
	if d := e.until.Sub(now); d > 0 {
		return d
	}
	return 0
}

// fail records a failure of key.
func (l *limiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var e *limitEntry
	if el, ok := l.byID[key]; ok {
		e = el.Value.(*limitEntry)
		if now.Sub(e.last) > l.forgetAfter {
			e.failures = 0
		}
		l.lru.MoveToFront(el)
	} else {
		l.sweep(now)
		for l.lru.Len() >= l.maxKeys {
			l.remove(l.lru.Back())
		}
		e = &limitEntry{key: key}
		l.byID[key] = l.lru.PushFront(e)
	}
	e.failures++
	e.last = now
	if over := e.failures - l.maxFailures; over >= 0 {
		d := l.base
		for i := 0; i < over && d < l.maxLockout; i++ {
			d *= 2
		}
		e.until = now.Add(min(d, l.maxLockout))
	}
}

// reset forgets key (after a successful login).
func (l *limiter) reset(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if el, ok := l.byID[key]; ok {
		l.remove(el)
	}
}

// sweep drops idle entries from the back of the LRU.
func (l *limiter) sweep(now time.Time) {
	for el := l.lru.Back(); el != nil; el = l.lru.Back() {
		if now.Sub(el.Value.(*limitEntry).last) <= l.forgetAfter {
			return
		}
		l.remove(el)
	}
}

func (l *limiter) remove(el *list.Element) {
	delete(l.byID, el.Value.(*limitEntry).key)
	l.lru.Remove(el)
}

func (l *limiter) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lru.Len()
}
