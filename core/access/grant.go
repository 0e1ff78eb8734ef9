package access

import (
	"context"
	"errors"
	"sync"
)

// Level is what a live connection may do on what it is connected to.
// Levels only go down while the connection lives: regaining rights takes a
// new connection, which is checked afresh.
type Level int8

// Levels, weakest first.
const (
	// LevelNone: nothing; the connection must end.
	LevelNone Level = iota
	// LevelView: watch (video, page state), no input.
	LevelView
	// LevelOperate: watch and act (input, agent commands).
	LevelOperate
)

func (l Level) String() string {
	switch l {
	case LevelView:
		return "view"
	case LevelOperate:
		return "operate"
	}
	return "none"
}

// errReleased ends a grant's context when its connection ended by itself.
var errReleased = errors.New("access: grant released")

// Grant is one live connection's hold on what its principal may do,
// re-checked by its Guard at every change. It implements the signaling
// package's Access.
type Grant struct {
	g     *Guard
	kind  string
	p     Principal
	need  Level
	check func(Principal) Level

	changed chan struct{} // one pending signal: the level went down
	ctx     context.Context
	cancel  context.CancelCauseFunc

	mu    sync.Mutex
	level Level
}

// lower sets the level to lvl when that is lower, signals Changed and, below
// the level the connection needs, ends its context. It reports whether the
// level went down.
func (gr *Grant) lower(lvl Level) bool {
	gr.mu.Lock()
	if lvl >= gr.level {
		gr.mu.Unlock()
		return false
	}
	gr.level = lvl
	gr.mu.Unlock()
	select {
	case gr.changed <- struct{}{}:
	default: // a signal is already pending; the reader reads the level
	}
	if lvl < gr.need {
		gr.cancel(ErrWithdrawn)
	}
	return true
}

// Level is what the connection may do now.
func (gr *Grant) Level() Level {
	gr.mu.Lock()
	defer gr.mu.Unlock()
	return gr.level
}

// CanView reports whether the connection may still watch.
func (gr *Grant) CanView() bool { return gr.Level() >= LevelView }

// CanInput reports whether the connection may still act.
func (gr *Grant) CanInput() bool { return gr.Level() >= LevelOperate }

// Changed receives (never closed) after the level went down; read Level
// then. It has one reader, the connection.
func (gr *Grant) Changed() <-chan struct{} { return gr.changed }

// Done is closed when the connection must end: the level fell below what
// it needs (Err is then ErrWithdrawn) or the grant was released.
func (gr *Grant) Done() <-chan struct{} { return gr.ctx.Done() }

// Withdrawn reports whether access was withdrawn (not merely released).
func (gr *Grant) Withdrawn() bool {
	return errors.Is(context.Cause(gr.ctx), ErrWithdrawn)
}

// Bind returns a child of parent that also ends, with cause ErrWithdrawn,
// when access is withdrawn: a request in flight (an agent command) stops
// at once. Call cancel when done, before Release.
func (gr *Grant) Bind(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(gr.ctx, func() {
		if gr.Withdrawn() {
			cancel(ErrWithdrawn)
		}
	})
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// Release ends the grant: the connection is gone. It is safe to call more
// than once.
func (gr *Grant) Release() {
	gr.g.mu.Lock()
	delete(gr.g.grants, gr)
	gr.g.mu.Unlock()
	gr.cancel(errReleased)
}
