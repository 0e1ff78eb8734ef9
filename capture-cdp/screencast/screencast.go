// Package screencast is the capture-cdp plugin: it captures a Chromium tab
// with the DevTools Page.startScreencast stream (JPEG frames).
package screencast

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

// Identity of the plugin.
const (
	Name    = "capture-cdp"
	Version = "0.1.0"
)

// Config is the plugin's config subtree.
type Config struct {
	// Quality is the JPEG quality Chromium encodes with.
	Quality int `json:"quality"`
	// EveryNthFrame makes Chromium send only every n-th composited frame.
	EveryNthFrame int `json:"everyNthFrame"`
	// MaxWidth and MaxHeight bound the frame size; 0 means the target's size.
	MaxWidth  int `json:"maxWidth"`
	MaxHeight int `json:"maxHeight"`
}

// DefaultConfig is the config when a key is absent.
func DefaultConfig() Config {
	return Config{Quality: 80, EveryNthFrame: 1}
}

func (c Config) validate() error {
	if err := base.Range("quality", c.Quality, 1, 100); err != nil {
		return err
	}
	if err := base.Range("everyNthFrame", c.EveryNthFrame, 1, 10); err != nil {
		return err
	}
	if c.MaxWidth != 0 {
		if err := base.Range("maxWidth", c.MaxWidth, 16, 3840); err != nil {
			return err
		}
	}
	if c.MaxHeight != 0 {
		if err := base.Range("maxHeight", c.MaxHeight, 16, 2160); err != nil {
			return err
		}
	}
	return nil
}

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "capture-cdp",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "quality": {"type": "integer", "minimum": 1, "maximum": 100, "default": 80,
      "description": "JPEG quality of the screencast frames."},
    "everyNthFrame": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1,
      "description": "Send only every n-th composited frame."},
    "maxWidth": {"type": "integer", "default": 0, "anyOf": [{"const": 0}, {"minimum": 16, "maximum": 3840}],
      "description": "Maximum frame width; 0 = the target's width."},
    "maxHeight": {"type": "integer", "default": 0, "anyOf": [{"const": 0}, {"minimum": 16, "maximum": 2160}],
      "description": "Maximum frame height; 0 = the target's height."}
  }
}`

// Capturer implements capture.Capturer.
type Capturer struct {
	log *slog.Logger

	mu  sync.Mutex
	cfg Config

	// life ends every stream on Shutdown.
	life     context.Context
	shutdown context.CancelFunc
}

var _ capture.Capturer = (*Capturer)(nil)

// New returns a Capturer with the default config. log may be nil.
func New(log *slog.Logger) *Capturer {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	life, shutdown := context.WithCancel(context.Background())
	return &Capturer{log: log, cfg: DefaultConfig(), life: life, shutdown: shutdown}
}

func (c *Capturer) Info(context.Context) (base.Info, error) {
	return base.Info{
		Name: Name, Version: Version, Kind: plugins.KindCapture, APIVersion: 1,
		Capabilities: map[string]string{"format": "jpeg", "transport": "cdp-screencast"},
	}, nil
}

func (c *Capturer) ConfigSchema(context.Context) (base.Schema, error) {
	def, err := json.Marshal(DefaultConfig())
	if err != nil {
		return base.Schema{}, err
	}
	return base.Schema{JSONSchema: []byte(configSchema), DefaultsJSON: def}, nil
}

// SetConfig replaces the config; absent keys take their defaults. Streams
// already running keep the config they started with.
func (c *Capturer) SetConfig(_ context.Context, configJSON []byte) error {
	cfg := DefaultConfig()
	if err := base.DecodeStrict(configJSON, &cfg); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	c.mu.Lock()
	c.cfg = cfg
	c.mu.Unlock()
	return nil
}

func (c *Capturer) config() Config {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.cfg
}

func (c *Capturer) Ping(context.Context) error {
	if c.life.Err() != nil {
		return errors.New("capture-cdp: shut down")
	}
	return nil
}

// Shutdown ends all streams (they return nil) and refuses new ones.
func (c *Capturer) Shutdown(context.Context) error {
	c.shutdown()
	return nil
}

// ChromiumFlags: the DevTools screencast needs no extra flags.
func (c *Capturer) ChromiumFlags(context.Context) ([]string, error) {
	return nil, nil
}
