// Package tabcapture is the capture-tab plugin: an embedded MV3 extension
// captures the session's tab in the browser and sends it, encoded by the
// browser (VP8), over a loopback-only WebRTC peer connection to a Pion peer
// in the plugin, which hands out the encoded frames without re-encoding.
package tabcapture

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

// Identity of the plugin.
const (
	Name    = "capture-tab"
	Version = "0.1.0"
)

// Config is the plugin's config subtree.
type Config struct {
	// Codec the browser is asked to send: "vp8" or "h264".
	Codec string `json:"codec"`
	// MaxBitrateKbps and MaxFPS are the encoder's starting caps.
	MaxBitrateKbps int `json:"maxBitrateKbps"`
	MaxFPS         int `json:"maxFps"`
}

// DefaultConfig is the config when a key is absent.
func DefaultConfig() Config { return Config{Codec: "vp8", MaxBitrateKbps: 2500, MaxFPS: 30} }

func (c Config) validate() error {
	if c.Codec != "vp8" && c.Codec != "h264" {
		return &base.ConfigError{Key: "codec", Message: fmt.Sprintf("%q: want vp8 or h264", c.Codec)}
	}
	if err := base.Range("maxBitrateKbps", c.MaxBitrateKbps, 100, 50000); err != nil {
		return err
	}
	return base.Range("maxFps", c.MaxFPS, 1, 60)
}

const configSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "capture-tab",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "codec": {"type": "string", "enum": ["vp8", "h264"], "default": "vp8",
      "description": "Codec the browser encodes the tab with."},
    "maxBitrateKbps": {"type": "integer", "minimum": 100, "maximum": 50000, "default": 2500,
      "description": "Starting bitrate cap of the browser's encoder."},
    "maxFps": {"type": "integer", "minimum": 1, "maximum": 60, "default": 30,
      "description": "Starting frame rate cap."}
  }
}`

// Capturer implements capture.Capturer and capture.Controller. Its
// lifecycle (Info, config, Ping) is base.Lifecycle's; Shutdown ends all
// streams and removes the extension directory.
type Capturer struct {
	*base.Lifecycle[Config]
	log *slog.Logger

	mu      sync.Mutex
	extDir  string
	streams map[string]*stream // by session id

	// marker is the tab title the browser's capture picker selects; see
	// ChromiumFlags. pickMu makes one stream at a time use it.
	marker string
	pickMu sync.Mutex
}

var (
	_ capture.Capturer   = (*Capturer)(nil)
	_ capture.Controller = (*Capturer)(nil)
)

// New returns a Capturer with the default config. log may be nil.
func New(log *slog.Logger) *Capturer {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	c := &Capturer{log: log, streams: map[string]*stream{},
		marker: capture.PickerTitlePrefix + hex.EncodeToString(b[:])}
	c.Lifecycle = base.NewLifecycle(base.LifecycleSpec[Config]{
		Info: base.Info{
			Name: Name, Version: Version, Kind: plugins.KindCapture, APIVersion: 1,
			Capabilities: map[string]string{"format": "vp8", "transport": "tab-capture"},
		},
		Schema:     configSchema,
		Defaults:   DefaultConfig,
		Apply:      func(_ context.Context, cfg Config) error { return cfg.validate() },
		OnShutdown: c.removeExtension,
	})
	return c
}

// removeExtension removes the extension directory, once every stream has
// been told to end (Shutdown).
func (c *Capturer) removeExtension(context.Context) error {
	c.mu.Lock()
	dir := c.extDir
	c.extDir = ""
	c.mu.Unlock()
	if dir != "" {
		return os.RemoveAll(dir)
	}
	return nil
}

// ChromiumFlags writes the embedded extension (once) and returns the flags
// that load it and let it capture without a prompt.
// --auto-select-tab-capture-source-by-title makes the capture picker choose
// the tab titled with this plugin's marker (see pickTab).
func (c *Capturer) ChromiumFlags(context.Context) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Life().Err() != nil {
		return nil, errors.New("capture-tab: shut down")
	}
	if c.extDir == "" {
		dir, err := writeExtension()
		if err != nil {
			return nil, fmt.Errorf("capture-tab: write extension: %w", err)
		}
		c.extDir = dir
	}
	return []string{
		"--load-extension=" + c.extDir,
		"--disable-extensions-except=" + c.extDir,
		"--allowlisted-extension-id=" + ExtensionID,
		"--auto-accept-this-tab-capture",
		"--auto-select-tab-capture-source-by-title=" + c.marker,
		"--autoplay-policy=no-user-gesture-required",
	}, nil
}

// Control applies sc to the running stream of sessionID.
func (c *Capturer) Control(ctx context.Context, sessionID string, sc capture.StreamControl) error {
	c.mu.Lock()
	s := c.streams[sessionID]
	c.mu.Unlock()
	if s == nil {
		return fmt.Errorf("capture-tab: no stream for session %q", sessionID)
	}
	return s.control(ctx, sc)
}
