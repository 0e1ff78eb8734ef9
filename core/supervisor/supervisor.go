// Package supervisor runs Tabcast plugins as supervised child processes
// (hashicorp/go-plugin over gRPC): it starts them, re-logs their output,
// pings them, restarts them with backoff when they crash or hang, marks them
// degraded when they keep failing, and makes sure no plugin process outlives
// the core, even when the core is SIGKILLed.
//
// Start semantics (decided here, the core relies on them):
//   - Start returns once the first start attempt has an outcome. On success
//     the handle is running.
//   - A permanent failure (the plugin refused its config, the binary's
//     SHA-256 does not match, the plugin reports another kind) is returned as
//     an error and the handle is degraded at once: no process is kept and no
//     restart is tried. A config error wraps the plugin's *base.ConfigError,
//     so base.AsConfigError(err) names the key.
//   - Any other failure of the first attempt is returned as an error AND the
//     handle stays supervised: it retries with backoff and becomes degraded
//     once the crash budget is spent. Client.Get waits (ctx-bounded) meanwhile.
//   - Start always returns a non-nil handle except for an invalid Spec, a
//     duplicate name, or a supervisor that is shut down.
package supervisor

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tabcast/tabcast/plugins"
)

// Spec says which plugin to run.
type Spec struct {
	Name   string          // plugin name = binary name, e.g. "capture-cdp"
	Kind   string          // plugins.KindCapture, KindEncoder, KindAuth, KindTurn
	Path   string          // absolute path of the binary
	SHA256 string          // optional hex; when set the binary must match (checked before every start, incl. restarts)
	Config json.RawMessage // the plugin's config subtree (JSON object), passed to SetConfig after every (re)start
}

// Options tune supervision. Zero (or negative) values take the defaults.
type Options struct {
	Logger        *slog.Logger
	StartTimeout  time.Duration // default 10s
	PingInterval  time.Duration // default 2s
	PingTimeout   time.Duration // default 1s (a plugin missing 2 pings in a row is hung)
	BackoffMin    time.Duration // default 250ms
	BackoffMax    time.Duration // default 15s
	HealthyReset  time.Duration // default 60s: backoff (and attempt count) reset after this long healthy
	CrashBudget   int           // default 5
	CrashWindow   time.Duration // default 2m: > CrashBudget crashes/failed starts within the window → degraded
	ShutdownGrace time.Duration // default 2s
}

func (o Options) withDefaults() Options {
	dur := func(d *time.Duration, def time.Duration) {
		if *d <= 0 {
			*d = def
		}
	}
	dur(&o.StartTimeout, 10*time.Second)
	dur(&o.PingInterval, 2*time.Second)
	dur(&o.PingTimeout, time.Second)
	dur(&o.BackoffMin, 250*time.Millisecond)
	dur(&o.BackoffMax, 15*time.Second)
	dur(&o.HealthyReset, 60*time.Second)
	dur(&o.CrashWindow, 2*time.Minute)
	dur(&o.ShutdownGrace, 2*time.Second)
	if o.BackoffMax < o.BackoffMin {
		o.BackoffMax = o.BackoffMin
	}
	if o.CrashBudget <= 0 {
		o.CrashBudget = 5
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Sentinel errors; Client.Get and Start wrap them with the plugin name.
var (
	// ErrDegraded: the plugin failed too often (or permanently) and is no
	// longer restarted.
	ErrDegraded = errors.New("plugin degraded")
	// ErrStopped: the supervisor has been shut down.
	ErrStopped = errors.New("plugin stopped")
)

// forceWait bounds how long Shutdown still waits once its context has
// expired and every process group has been SIGKILLed.
const forceWait = 5 * time.Second

// Supervisor owns every plugin process it starts.
type Supervisor struct {
	opts Options
	log  *slog.Logger

	// stopCtx is cancelled when Shutdown begins; forceCtx when Shutdown's
	// context expires (no more grace: kill now).
	stopCtx    context.Context
	stop       context.CancelFunc
	forceCtx   context.Context
	force      context.CancelFunc
	wg         sync.WaitGroup // one per handle run loop
	mu         sync.Mutex
	closed     bool
	handles    []*Handle
	shutdownCh chan struct{} // closed when every run loop has returned
}

// New returns a supervisor with no plugins.
func New(o Options) *Supervisor {
	o = o.withDefaults()
	s := &Supervisor{opts: o, log: o.Logger, shutdownCh: make(chan struct{})}
	s.stopCtx, s.stop = context.WithCancel(context.Background())
	s.forceCtx, s.force = context.WithCancel(context.Background())
	return s
}

// Start launches the plugin and returns once it serves (handshake done,
// Info read, SetConfig OK), or with the first attempt's error (see the
// package doc for which failures keep the handle retrying).
func (s *Supervisor) Start(ctx context.Context, spec Spec) (*Handle, error) {
	spec, err := checkSpec(spec)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("plugin %s: %w", spec.Name, ErrStopped)
	}
	keep := s.handles[:0:0]
	for _, h := range s.handles {
		if h.spec.Name != spec.Name {
			keep = append(keep, h)
			continue
		}
		if st := h.Status().State; st != StateDegraded && st != StateStopped {
			s.mu.Unlock()
			return nil, fmt.Errorf("plugin %s: already supervised (state %s)", spec.Name, st)
		}
		// A degraded handle of the same name is replaced in Handles(); its
		// (idle) run loop stays owned by s until Shutdown.
	}
	h := newHandle(s, spec)
	s.handles = append(keep, h)
	s.wg.Add(1)
	s.mu.Unlock()

	go h.run()

	select {
	case err := <-h.first:
		return h, err
	case <-ctx.Done():
		return h, fmt.Errorf("plugin %s: waiting for start: %w", spec.Name, ctx.Err())
	}
}

// Handles returns the supervised plugins, in start order.
func (s *Supervisor) Handles() []*Handle {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Handle(nil), s.handles...)
}

// Shutdown asks every plugin to shut down (Shutdown RPC, ShutdownGrace),
// kills what is left (whole process group) and waits until every process
// has exited and every supervision goroutine has returned. When ctx expires
// first, the remaining plugins are SIGKILLed at once and Shutdown waits a
// little longer for them before giving up with an error.
func (s *Supervisor) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	s.stop()
	if first {
		// Owned by s: returns once every run loop has, which they do once
		// their processes are gone.
		go func() {
			s.wg.Wait()
			close(s.shutdownCh)
		}()
	}
	select {
	case <-s.shutdownCh:
		return nil
	case <-ctx.Done():
	}
	s.force()
	t := time.NewTimer(forceWait)
	defer t.Stop()
	select {
	case <-s.shutdownCh:
		return fmt.Errorf("supervisor shutdown: grace cut short, plugins killed: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("supervisor shutdown: plugins still exiting %v after SIGKILL: %w", forceWait, ctx.Err())
	}
}

func checkSpec(spec Spec) (Spec, error) {
	if spec.Name == "" {
		return spec, errors.New("plugin spec: empty name")
	}
	if !slices.Contains(plugins.Kinds(), spec.Kind) {
		return spec, fmt.Errorf("plugin %s: unknown kind %q", spec.Name, spec.Kind)
	}
	if !filepath.IsAbs(spec.Path) {
		return spec, fmt.Errorf("plugin %s: path %q is not absolute", spec.Name, spec.Path)
	}
	if spec.SHA256 != "" {
		b, err := hex.DecodeString(spec.SHA256)
		if err != nil || len(b) != 32 {
			return spec, fmt.Errorf("plugin %s: sha256 is not 64 hex digits", spec.Name)
		}
	}
	cfg := bytes.TrimSpace(spec.Config)
	switch {
	case len(cfg) == 0:
		cfg = []byte("{}")
	case cfg[0] != '{' || !json.Valid(cfg):
		return spec, fmt.Errorf("plugin %s: config is not a JSON object", spec.Name)
	}
	// Own copy: the caller may reuse its buffer; we pass it at every restart.
	spec.Config = append(json.RawMessage(nil), cfg...)
	return spec, nil
}
