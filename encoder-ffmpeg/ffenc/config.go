package ffenc

import (
	"fmt"

	"github.com/tabcast/tabcast/plugins/base"
)

// Hardware modes, for Config.Hardware and encoder.OpenParams.Hardware.
const (
	HardwareAuto  = "auto"
	HardwareOff   = "off"
	HardwareVAAPI = "vaapi"
	HardwareNVENC = "nvenc"
)

// Config is the plugin's config subtree. Absent keys keep their defaults.
type Config struct {
	// Hardware is the default for streams opened with an empty
	// OpenParams.Hardware: auto, off, vaapi or nvenc.
	Hardware string `json:"hardware"`
	// Threads is the encoder thread count (1..16). One thread keeps VP8
	// steady under neighbour load (see the encoding notes).
	Threads int `json:"threads"`
	// H264Preset is the libx264 preset: ultrafast, superfast or veryfast.
	H264Preset string `json:"h264Preset"`
	// VP8CPUUsed is libvpx's cpu-used, -16..-4. Only negative values are
	// allowed: they fix the speed level, while positive ones let libvpx
	// adapt its speed to wall-clock timing, which made CPU use and output
	// non-deterministic. -4 is the slowest level that still keeps 720p
	// real-time on one core.
	VP8CPUUsed int `json:"vp8CpuUsed"`
}

// DefaultConfig is the config used when SetConfig was never called or
// leaves keys out.
func DefaultConfig() Config {
	return Config{Hardware: HardwareAuto, Threads: 1, H264Preset: "ultrafast", VP8CPUUsed: -8}
}

// ParseConfig decodes a config subtree strictly over the defaults and
// validates it. Errors are *base.ConfigError naming the key.
func ParseConfig(configJSON []byte) (Config, error) {
	c := DefaultConfig()
	if err := base.DecodeStrict(configJSON, &c); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// Validate checks every key; errors are *base.ConfigError.
func (c Config) Validate() error {
	switch c.Hardware {
	case HardwareAuto, HardwareOff, HardwareVAAPI, HardwareNVENC:
	default:
		return &base.ConfigError{Key: "hardware", Message: fmt.Sprintf("%q is not one of auto, off, vaapi, nvenc", c.Hardware)}
	}
	if err := base.Range("threads", c.Threads, 1, 16); err != nil {
		return err
	}
	switch c.H264Preset {
	case "ultrafast", "superfast", "veryfast":
	default:
		return &base.ConfigError{Key: "h264Preset", Message: fmt.Sprintf("%q is not one of ultrafast, superfast, veryfast", c.H264Preset)}
	}
	return base.Range("vp8CpuUsed", c.VP8CPUUsed, -16, -4)
}

const configJSONSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "title": "encoder-ffmpeg",
  "type": "object",
  "additionalProperties": false,
  "properties": {
    "hardware": {"type": "string", "enum": ["auto", "off", "vaapi", "nvenc"], "default": "auto",
      "description": "Default hardware use for streams that do not ask: auto tries h264_vaapi then h264_nvenc (only those whose last probe passed) and falls back to libx264. A hardware encoder that fails while a stream runs hands that stream to libx264 and is re-probed at most every 30 s before new streams use it again."},
    "threads": {"type": "integer", "minimum": 1, "maximum": 16, "default": 1,
      "description": "Encoder threads per stream."},
    "h264Preset": {"type": "string", "enum": ["ultrafast", "superfast", "veryfast"], "default": "ultrafast",
      "description": "libx264 preset."},
    "vp8CpuUsed": {"type": "integer", "minimum": -16, "maximum": -4, "default": -8,
      "description": "libvpx cpu-used; negative values fix the speed level (more negative is faster)."}
  }
}`
