package session

// Per-session browsers, and the default session kept across crashes.

import (
	"context"
	"fmt"
	"time"
)

// keptSession is the default session KeepDefault keeps.
type keptSession struct {
	id string // "" until it was created once
	o  CreateOptions
}

// isolatedBrowser launches a Chromium of the session's own (per-session
// isolation): its crash, or a crash of anything it runs, reaches no other
// session. The session closes it when it ends; a crash relaunches it.
func (m *Manager) isolatedBrowser(ctx context.Context, s *Session) (Browser, error) {
	if m.cfg.Launch == nil {
		return nil, fmt.Errorf("%w: per-session browsers need a launcher", ErrUnavailable)
	}
	b, err := m.cfg.Launch(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: launch the session's browser: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	s.ownBrowser, s.rec.relaunch = b, m.cfg.Launch
	s.mu.Unlock()
	m.watch(b) // a crash brings back only this session
	return b, nil
}

// KeepDefault creates the appliance's default session and keeps it: when
// it ends failed (its browser could not be brought back in time), or could
// not be created at all, it is created again, with the same id and
// options, as soon as a browser runs (tend). Closed by a person, it stays
// closed.
func (m *Manager) KeepDefault(ctx context.Context, o CreateOptions) (*Session, error) {
	s, err := m.Create(ctx, o)
	k := &keptSession{o: o}
	if s != nil {
		k.id = s.ID()
	}
	m.mu.Lock()
	m.rec.keep = k
	m.mu.Unlock()
	if err != nil {
		m.kickTend()
	}
	return s, err
}

// tend relaunches a dead shared browser that no recovery relaunched (so
// that /readyz comes back without waiting for a Create) and creates the
// kept default session again; it retries with backoff. Owned by m.wg.
func (m *Manager) tend() {
	defer m.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	backoff := keepRetryMin
	var next, downSince time.Time
	for {
		kicked := false
		select {
		case <-m.ctx.Done():
			return
		case <-m.rec.kick:
			kicked = true
		case <-t.C:
		}
		// A browser that just died is the recovery's to relaunch, within
		// its budget; it kicks when it is done. Past the budget without a
		// kick, nobody is on it.
		switch {
		case m.BrowserUp():
			downSince = time.Time{}
		case downSince.IsZero():
			downSince = time.Now()
		}
		relaunch := kicked || (!downSince.IsZero() && time.Since(downSince) > recoverBudget)
		if time.Now().Before(next) {
			continue
		}
		if m.tendOnce(relaunch) {
			backoff, next = keepRetryMin, time.Time{}
		} else {
			next = time.Now().Add(backoff)
			backoff = min(2*backoff, keepRetryMax)
		}
	}
}

// tendOnce does one round of tend (relaunch: a dead shared browser is its
// to relaunch); false asks for a retry later.
func (m *Manager) tendOnce(relaunch bool) bool {
	if m.rec.busy.Load() > 0 {
		return true // a recovery runs; it kicks when it is done
	}
	if !m.BrowserUp() && !relaunch {
		return true
	}
	if m.cfg.Launch != nil && !m.BrowserUp() {
		ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
		_, err := m.currentBrowser(ctx)
		cancel()
		if err != nil {
			m.log.Warn("relaunch the browser", "err", err)
			return false
		}
	}
	m.mu.Lock()
	k := m.rec.keep
	var id string
	var o CreateOptions
	if k != nil {
		id, o = k.id, k.o
	}
	m.mu.Unlock()
	if k == nil {
		return true
	}
	if id != "" {
		if s, err := m.Get(id); err == nil {
			switch s.Status().State {
			case StateFailed:
			case StateClosed:
				m.mu.Lock()
				if m.rec.keep == k {
					m.rec.keep = nil // closed on purpose: not ours to bring back
				}
				m.mu.Unlock()
				return true
			default:
				return true
			}
		}
		m.remove(id) // its terminal snapshot gives way to the new session
	}
	ctx, cancel := context.WithTimeout(m.ctx, 30*time.Second)
	defer cancel()
	o.id = id
	s, err := m.Create(ctx, o)
	if err != nil {
		m.log.Warn("create the default session again", "err", err)
		return false
	}
	m.mu.Lock()
	if m.rec.keep == k {
		k.id = s.ID()
	}
	m.mu.Unlock()
	m.log.Info("default session created again", "session", s.ID())
	return true
}
