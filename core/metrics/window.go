// Package metrics holds the core's small, allocation-free measurement
// primitives: counters and fixed-size sample windows for percentiles.
package metrics

import (
	"slices"
	"sync"
	"time"
)

// Window keeps the last N duration samples (a ring) for percentiles. It is
// bounded by construction: recording never allocates after New.
type Window struct {
	mu    sync.Mutex
	buf   []time.Duration
	next  int
	full  bool
	count uint64
}

// NewWindow returns a window of n samples.
func NewWindow(n int) *Window {
	if n < 1 {
		n = 1
	}
	return &Window{buf: make([]time.Duration, n)}
}

// Add records one sample.
func (w *Window) Add(d time.Duration) {
	w.mu.Lock()
	w.buf[w.next] = d
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
	w.count++
	w.mu.Unlock()
}

// Summary is a snapshot of a window.
type Summary struct {
	Count uint64  `json:"count"`
	P50ms float64 `json:"p50Ms"`
	P95ms float64 `json:"p95Ms"`
	Maxms float64 `json:"maxMs"`
}

// Summary computes percentiles over the samples currently held.
func (w *Window) Summary() Summary {
	w.mu.Lock()
	n := w.next
	if w.full {
		n = len(w.buf)
	}
	s := make([]time.Duration, n)
	copy(s, w.buf[:n])
	count := w.count
	w.mu.Unlock()
	if n == 0 {
		return Summary{Count: count}
	}
	slices.Sort(s)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return Summary{
		Count: count,
		P50ms: ms(s[(n-1)*50/100]),
		P95ms: ms(s[(n-1)*95/100]),
		Maxms: ms(s[n-1]),
	}
}
