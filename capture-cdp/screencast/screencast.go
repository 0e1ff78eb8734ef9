// Package screencast is the capture-cdp plugin: it captures a Chromium tab
// with the DevTools Page.startScreencast stream (JPEG frames).
package screencast

import (
	"context"
	"io"
	"log/slog"

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

// Capturer implements capture.Capturer. Its lifecycle (Info, config,
// Ping) is base.Lifecycle's: streams already running keep the config they
// started with, and Shutdown ends them all (they return nil) and refuses
// new ones.
type Capturer struct {
	*base.Lifecycle[Config]
	log *slog.Logger
}

var _ capture.Capturer = (*Capturer)(nil)

// New returns a Capturer with the default config. log may be nil.
func New(log *slog.Logger) *Capturer {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Capturer{log: log, Lifecycle: base.NewLifecycle(base.LifecycleSpec[Config]{
		Info: base.Info{
			Name: Name, Version: Version, Kind: plugins.KindCapture, APIVersion: 1,
			Capabilities: map[string]string{"format": "jpeg", "transport": "cdp-screencast"},
		},
		Schema:   configSchema,
		Defaults: DefaultConfig,
		Apply:    func(_ context.Context, cfg Config) error { return cfg.validate() },
	})}
}

// ChromiumFlags: the DevTools screencast needs no extra flags.
func (c *Capturer) ChromiumFlags(context.Context) ([]string, error) {
	return nil, nil
}
