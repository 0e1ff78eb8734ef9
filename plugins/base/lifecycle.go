package base

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"sync"
)

// LifecycleSpec describes what a plugin's Lifecycle serves.
type LifecycleSpec[C any] struct {
	// Info is returned by Info (Capabilities are copied for each call).
	Info Info
	// Schema is the JSON Schema of the plugin's config subtree.
	Schema string
	// Defaults is the config when a key is absent; ConfigSchema marshals it
	// as the defaults.
	Defaults func() C
	// Apply validates a decoded config (errors are *ConfigError naming the
	// key) and puts it in force; nil accepts every config that decodes.
	// Calls are serialized. Config returns a config only once Apply took it.
	Apply func(ctx context.Context, cfg C) error
	// OnShutdown runs once, after Life is done (end streams, close
	// listeners, remove temporary files); nil does nothing more.
	OnShutdown func(ctx context.Context) error
}

// Lifecycle is the part of the Plugin contract every plugin writes the same
// way: a fixed Info, ConfigSchema from a schema and the defaults, SetConfig
// decoding strictly (absent keys take the defaults, unknown keys are
// refused) before Apply, a Ping that fails once shut down, and a Shutdown
// that ends Life. A plugin embeds *Lifecycle[C] and defines the methods it
// serves differently (its own Info, say) on itself.
type Lifecycle[C any] struct {
	spec LifecycleSpec[C]

	life context.Context
	stop context.CancelFunc

	setMu sync.Mutex // serializes SetConfig (decode, Apply, store)
	mu    sync.Mutex
	cfg   C

	shutOnce sync.Once
	shutErr  error
}

// NewLifecycle returns a lifecycle whose config is spec.Defaults().
func NewLifecycle[C any](spec LifecycleSpec[C]) *Lifecycle[C] {
	life, stop := context.WithCancel(context.Background())
	return &Lifecycle[C]{spec: spec, life: life, stop: stop, cfg: spec.Defaults()}
}

// Info returns the plugin's identity.
func (l *Lifecycle[C]) Info(context.Context) (Info, error) {
	info := l.spec.Info
	info.Capabilities = maps.Clone(info.Capabilities)
	return info, nil
}

// ConfigSchema returns the schema and the defaults.
func (l *Lifecycle[C]) ConfigSchema(context.Context) (Schema, error) {
	def, err := json.Marshal(l.spec.Defaults())
	if err != nil {
		return Schema{}, err
	}
	return Schema{JSONSchema: []byte(l.spec.Schema), DefaultsJSON: def}, nil
}

// SetConfig replaces the config; absent keys take their defaults. A config
// Apply refuses changes nothing.
func (l *Lifecycle[C]) SetConfig(ctx context.Context, configJSON []byte) error {
	cfg := l.spec.Defaults()
	if err := DecodeStrict(configJSON, &cfg); err != nil {
		return err
	}
	l.setMu.Lock()
	defer l.setMu.Unlock()
	if l.spec.Apply != nil {
		if err := l.spec.Apply(ctx, cfg); err != nil {
			return err
		}
	}
	l.mu.Lock()
	l.cfg = cfg
	l.mu.Unlock()
	return nil
}

// Config is the config in force.
func (l *Lifecycle[C]) Config() C {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// Life ends on Shutdown: streams and servers of the plugin run within it.
func (l *Lifecycle[C]) Life() context.Context { return l.life }

// Ping fails once the plugin is shut down.
func (l *Lifecycle[C]) Ping(context.Context) error {
	if l.life.Err() != nil {
		return errors.New(l.spec.Info.Name + ": shut down")
	}
	return nil
}

// Shutdown ends Life, then runs OnShutdown (once: later calls return the
// first one's error).
func (l *Lifecycle[C]) Shutdown(ctx context.Context) error {
	l.shutOnce.Do(func() {
		l.stop()
		if l.spec.OnShutdown != nil {
			l.shutErr = l.spec.OnShutdown(ctx)
		}
	})
	return l.shutErr
}

var _ Plugin = (*Lifecycle[struct{}])(nil)
