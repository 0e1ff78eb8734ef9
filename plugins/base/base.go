// Package base holds the part of the plugin contract that every plugin kind
// shares: identity (Info), configuration (ConfigSchema, SetConfig) and
// liveness (Ping, Shutdown).
package base

import (
	"context"
	"errors"
	"fmt"
)

// Info identifies a running plugin.
type Info struct {
	Name         string
	Version      string
	Kind         string
	APIVersion   int
	Capabilities map[string]string
}

// Schema describes a plugin's config subtree.
type Schema struct {
	JSONSchema   []byte
	DefaultsJSON []byte
}

// Plugin is what every plugin implements and what the host can call on every
// plugin, whatever its kind.
type Plugin interface {
	Info(ctx context.Context) (Info, error)
	ConfigSchema(ctx context.Context) (Schema, error)
	// SetConfig applies the plugin's config subtree (a JSON object). A bad
	// value returns a *ConfigError naming the key.
	SetConfig(ctx context.Context, configJSON []byte) error
	Ping(ctx context.Context) error
	Shutdown(ctx context.Context) error
}

// ConfigError is a config value the plugin refused. Key is the path inside
// the plugin's subtree (for example "jpeg.quality").
type ConfigError struct {
	Key     string
	Message string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return "config: " + e.Message
	}
	return fmt.Sprintf("config key %q: %s", e.Key, e.Message)
}

// AsConfigError reports whether err is, or wraps, a *ConfigError.
func AsConfigError(err error) (*ConfigError, bool) {
	var ce *ConfigError
	ok := errors.As(err, &ce)
	return ce, ok
}
