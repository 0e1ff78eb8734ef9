// Package config loads the tabcast appliance configuration: embedded
// defaults < config file < TABCAST_* environment < command-line flags,
// strictly checked against the Config struct (unknown keys, wrong types and
// out-of-range values are errors naming the full key path).
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/providers/posflag"
	"github.com/knadh/koanf/providers/rawbytes"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/plugins"
)

// Config is the effective appliance configuration. Every field's default,
// meaning and allowed range is documented in config.default.yaml.
type Config struct {
	Server   Server   `koanf:"server"`
	Auth     Auth     `koanf:"auth"`
	Log      Log      `koanf:"log"`
	Browser  Browser  `koanf:"browser"`
	Sessions Sessions `koanf:"sessions"`
	Video    Video    `koanf:"video"`
	WebRTC   WebRTC   `koanf:"webrtc"`
	Turn     Turn     `koanf:"turn"`
	Input    Input    `koanf:"input"`
	Agent    Agent    `koanf:"agent"`
	Plugins  Plugins  `koanf:"plugins"`
}

// Agent is the policy of the agent API (HTTP, CLI, MCP).
type Agent struct {
	// AllowEval lets admin-scoped callers run JavaScript in pages.
	AllowEval bool `koanf:"allowEval"`
	// CDP serves the session-scoped DevTools endpoint
	// (/api/v1/sessions/{id}/cdp): a CDP client runs script in the page,
	// the same trust as AllowEval, so it is off by default.
	CDP bool `koanf:"cdp"`
	// CDPMaxConnections bounds the CDP clients of one session.
	CDPMaxConnections int `koanf:"cdpMaxConnections"`
	// CDPMaxMessageBytes: a client message over it closes the connection
	// (WebSocket close 1009).
	CDPMaxMessageBytes int `koanf:"cdpMaxMessageBytes"`
	// CDPInputDeadline is how long a client's input waits under exclusive
	// human control before it fails with human_in_control.
	CDPInputDeadline time.Duration `koanf:"cdpInputDeadline"`
	// CDPIdleTimeout ends a connection that sent nothing for this long.
	CDPIdleTimeout time.Duration `koanf:"cdpIdleTimeout"`
}

// Input is the policy the appliance enforces on human and agent input.
type Input struct {
	BlockedShortcuts   []string `koanf:"blockedShortcuts"`
	AllowRightClick    bool     `koanf:"allowRightClick"`
	AllowSchemes       []string `koanf:"allowSchemes"`
	AllowHosts         []string `koanf:"allowHosts"`
	DenyHosts          []string `koanf:"denyHosts"`
	DenyPrivate        bool     `koanf:"denyPrivate"`
	AllowLoopbackHosts []string `koanf:"allowLoopbackHosts"`
	MaxTextBytes       int      `koanf:"maxTextBytes"`
	MaxClipboardBytes  int      `koanf:"maxClipboardBytes"`
}

// Server is the HTTP listener.
type Server struct {
	Listen string `koanf:"listen"` // host:port
	// TLS: auto (HTTPS unless the listen host is loopback) | on | off.
	TLS      string `koanf:"tls"`
	CertFile string `koanf:"certFile"` // "" = generated in DataDir
	KeyFile  string `koanf:"keyFile"`
	// RedirectListen is a plain-HTTP listener that only redirects to HTTPS.
	RedirectListen string `koanf:"redirectListen"`
	// DataDir holds state the appliance makes: certificate, tokens, audit.
	DataDir string `koanf:"dataDir"`
}

// Auth is who may use the panel and the API.
type Auth struct {
	Mode      string        `koanf:"mode"`   // local | none
	Plugin    string        `koanf:"plugin"` // the auth plugin's name
	LoginIdle time.Duration `koanf:"loginIdle"`
	LoginMax  time.Duration `koanf:"loginMax"`
	// AgentTokenFile receives a token for the agent CLI at first start;
	// "" = DataDir/agent-token.
	AgentTokenFile string `koanf:"agentTokenFile"`
}

// Log is the structured logger.
type Log struct {
	Level string `koanf:"level"` // debug|info|warn|error
}

// Browser is how Chromium is started.
type Browser struct {
	Path         string        `koanf:"path"`
	Headless     bool          `koanf:"headless"`
	NoSandbox    string        `koanf:"noSandbox"` // auto|true|false
	ExtraFlags   []string      `koanf:"extraFlags"`
	StartTimeout time.Duration `koanf:"startTimeout"`
	StartURL     string        `koanf:"startURL"` // "" = built-in welcome page
	Width        int           `koanf:"width"`
	Height       int           `koanf:"height"`
	// Isolation: shared (a BrowserContext per session in one Chromium) or
	// per-session (a Chromium per session: a browser crash reaches one).
	Isolation string `koanf:"isolation"`
	// Cgroup, if set, is the cgroup v2 directory Chromium starts in: the
	// image's second egress wall lets it reach loopback only
	// (image/rootfs/usr/lib/tabcast/libexec/browser-wall).
	Cgroup string `koanf:"cgroup"`
}

// Sessions are the session budgets.
type Sessions struct {
	OpenDefault bool `koanf:"openDefault"`
	Max         int  `koanf:"max"`
	MaxViewers  int  `koanf:"maxViewers"`
	// IdleReclaim closes a session nobody watches or drives for this long
	// (0 = never).
	IdleReclaim time.Duration `koanf:"idleReclaim"`
	// InputIdleWarn / InputIdleReclaim: a session nobody acts on is warned,
	// then closed (0 = never).
	InputIdleWarn    time.Duration `koanf:"inputIdleWarn"`
	InputIdleReclaim time.Duration `koanf:"inputIdleReclaim"`
	// DefaultOwner owns the session opened at start.
	DefaultOwner string `koanf:"defaultOwner"`
	// PopupsInBackground: a tab the current page opens (target=_blank,
	// window.open) stays in the background instead of being followed.
	PopupsInBackground bool `koanf:"popupsInBackground"`
	// Proxy: the upstream proxy (http://host:port or socks5://host:port)
	// every session's checked connections go through, "" = direct;
	// ProxyCredentialsFile holds its "user:password" (never the config).
	Proxy                string `koanf:"proxy"`
	ProxyCredentialsFile string `koanf:"proxyCredentialsFile"`
}

// Video is the encoded stream.
type Video struct {
	Codec string `koanf:"codec"` // auto|h264|vp8
	FPS   int    `koanf:"fps"`
	// IdleFPS: repeats of the last picture per second on a still page (the
	// encoder refines it), for a few seconds after the last change; 0 = none.
	IdleFPS          int           `koanf:"idleFps"`
	BitrateKbps      int           `koanf:"bitrateKbps"`
	KeyframeInterval time.Duration `koanf:"keyframeInterval"`
	Hardware         string        `koanf:"hardware"` // auto|off|vaapi|nvenc
	// Capture: auto (tab capture where the start-up probe works) | tab | cdp.
	Capture string `koanf:"capture"`
}

// WebRTC is the media transport.
type WebRTC struct {
	UDPPort    int      `koanf:"udpPort"` // 0 = ephemeral
	TCP        bool     `koanf:"tcp"`     // ICE-TCP on udpPort's number
	Interfaces []string `koanf:"interfaces"`
	Advertise  []string `koanf:"advertise"`
	RelayOnly  bool     `koanf:"relayOnly"`
	// ViewerNetworks are the CIDR prefixes viewers' ICE candidates may
	// name; [] = any private or public unicast address.
	ViewerNetworks []string `koanf:"viewerNetworks"`
}

// Turn is the embedded TURN relay (the turnd plugin).
type Turn struct {
	Enabled       bool          `koanf:"enabled"`
	Plugin        string        `koanf:"plugin"`
	CredentialTTL time.Duration `koanf:"credentialTTL"`
}

// Plugins is plugin discovery, supervision and per-plugin config.
type Plugins struct {
	Dir          string                    `koanf:"dir"` // "" = directory of the tabcast binary
	Capture      string                    `koanf:"capture"`
	TabCapture   string                    `koanf:"tabCapture"` // "" = none
	Encoder      string                    `koanf:"encoder"`
	StartTimeout time.Duration             `koanf:"startTimeout"`
	PingInterval time.Duration             `koanf:"pingInterval"`
	CrashBudget  int                       `koanf:"crashBudget"`
	CrashWindow  time.Duration             `koanf:"crashWindow"`
	SHA256       map[string]string         `koanf:"sha256"` // plugin name → hex sha256
	Config       map[string]map[string]any `koanf:"config"` // plugin name → opaque subtree
}

// Options says where Load reads its layers from.
type Options struct {
	Defaults []byte // embedded config.default.yaml
	// File is an explicit --config path, which must exist. "" means the
	// --config flag in Flags if set, else DefaultFile when it exists.
	File string
	// DefaultFile is read when it exists and no explicit file is given.
	// "" means DefaultFilePath.
	DefaultFile string
	Environ     []string       // os.Environ(); nil = no environment layer
	Flags       *pflag.FlagSet // parsed, with AddFlags' flags; may be nil
}

// DefaultFilePath is the config file read when it exists.
const DefaultFilePath = "/etc/tabcast/config.yaml"

// EnvPrefix starts every configuration environment variable. The prefix is
// reserved: a TABCAST_ variable that names no key is an error.
const EnvPrefix = "TABCAST_"

// Flag names registered by AddFlags.
const (
	FlagConfig   = "config"
	FlagSet      = "set"
	FlagListen   = "listen"
	FlagLogLevel = "log-level"
)

// shortcuts maps shortcut flags to the key they set.
var shortcuts = map[string]string{FlagListen: "server.listen", FlagLogLevel: "log.level"}

// AddFlags registers --config, --set (repeatable), --listen and --log-level.
func AddFlags(fs *pflag.FlagSet) {
	fs.String(FlagConfig, "", "config file (must exist; default "+DefaultFilePath+" when present)")
	fs.StringArray(FlagSet, nil, "set a config key: --set video.fps=30 (repeatable; lists comma-separated)")
	fs.String(FlagListen, "", "HTTP listen address host:port (= --set server.listen=ADDR)")
	fs.String(FlagLogLevel, "", "log level debug|info|warn|error (= --set log.level=L)")
}

// Load builds the effective configuration from all layers. It returns every
// problem found, joined, each naming its key path.
func Load(o Options) (*Config, error) {
	ld := &loader{k: koanf.New("."), origin: map[string]string{}}
	ld.loadDefaults(o.Defaults)
	if err := ld.loadFile(o); err != nil {
		return nil, err // a missing or unreadable file is not worth checking further
	}
	ld.loadEnv(o.Environ)
	ld.loadFlags(o.Flags)

	var cfg Config
	if err := ld.k.UnmarshalWithConf("", &cfg, koanf.UnmarshalConf{Tag: "koanf"}); err != nil {
		ld.errs = append(ld.errs, fmt.Errorf("config: decode: %w", err))
	}
	fillNil(&cfg)
	ld.errs = append(ld.errs, validate(&cfg, ld.originOf)...)
	if len(ld.errs) > 0 {
		return nil, errors.Join(ld.errs...)
	}
	return &cfg, nil
}

// fillNil makes absent lists and maps empty, so callers never see nil.
func fillNil(c *Config) {
	if c.Browser.ExtraFlags == nil {
		c.Browser.ExtraFlags = []string{}
	}
	if c.WebRTC.Interfaces == nil {
		c.WebRTC.Interfaces = []string{}
	}
	for _, l := range []*[]string{&c.Input.BlockedShortcuts, &c.Input.AllowSchemes, &c.Input.AllowHosts, &c.Input.DenyHosts, &c.Input.AllowLoopbackHosts} {
		if *l == nil {
			*l = []string{}
		}
	}
	if c.Plugins.SHA256 == nil {
		c.Plugins.SHA256 = map[string]string{}
	}
	if c.Plugins.Config == nil {
		c.Plugins.Config = map[string]map[string]any{}
	}
	for name, sub := range c.Plugins.Config {
		if sub == nil {
			c.Plugins.Config[name] = map[string]any{}
		}
	}
}

// PluginConfigJSON returns the plugin's subtree as a JSON object, "{}" when
// the plugin has none. Values are not masked: this goes to the plugin.
// AuthLocalFiles are the auth-local plugin's users file and one-time
// admin password file (plugins.config.auth-local; "" when unset), for the
// commands that hand them to the plugin or show them.
func (c *Config) AuthLocalFiles() (usersFile, initialPasswordFile string) {
	var ac struct {
		UsersFile           string `json:"usersFile"`
		InitialPasswordFile string `json:"initialPasswordFile"`
	}
	if b, err := c.PluginConfigJSON("auth-local"); err == nil {
		_ = json.Unmarshal(b, &ac)
	}
	return ac.UsersFile, ac.InitialPasswordFile
}

// PluginIn is the name of the plugin configured for role s (the value of
// s.ConfigKey; "" for an unknown role or an empty key, such as
// plugins.tabCapture without tab capture). TestPluginInCatalog keeps it in
// step with plugins.Catalog.
func (c *Config) PluginIn(s plugins.Role) string {
	switch s.ConfigKey {
	case plugins.RoleCapture.ConfigKey:
		return c.Plugins.Capture
	case plugins.RoleTabCapture.ConfigKey:
		return c.Plugins.TabCapture
	case plugins.RoleEncoder.ConfigKey:
		return c.Plugins.Encoder
	case plugins.RoleAuth.ConfigKey:
		return c.Auth.Plugin
	case plugins.RoleTurn.ConfigKey:
		return c.Turn.Plugin
	}
	return ""
}

func (c *Config) PluginConfigJSON(name string) ([]byte, error) {
	if c == nil {
		return []byte("{}"), nil
	}
	sub := map[string]any{}
	for k, v := range c.Plugins.Config[name] {
		sub[k] = v
	}
	if name != "" && name == c.Plugins.TabCapture {
		// The browser's encoder (tab capture) starts at the video targets,
		// as the encoder plugin does, unless its own subtree says otherwise:
		// a 24 fps appliance must not have the browser encode 30.
		for k, v := range map[string]int{"maxFps": c.Video.FPS, "maxBitrateKbps": c.Video.BitrateKbps} {
			if _, set := sub[k]; !set && v > 0 {
				sub[k] = v
			}
		}
	}
	if len(sub) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(sub)
	if err != nil {
		return nil, fmt.Errorf("config: plugins.config.%s: %w", name, err)
	}
	return b, nil
}

// loader accumulates layers into one koanf instance.
type loader struct {
	k      *koanf.Koanf
	origin map[string]string // key path → source of the value in effect
	errs   []error
}

// originOf returns the source of path's value, or of its nearest ancestor.
func (ld *loader) originOf(path string) string {
	for p := path; p != ""; {
		if s, ok := ld.origin[p]; ok {
			return s
		}
		i := strings.LastIndexByte(p, '.')
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return ""
}

// apply normalizes one layer's raw map and merges it over the layers below.
func (ld *loader) apply(l *layer, raw map[string]any) {
	l.set = map[string]string{}
	norm := l.normalize(raw)
	// Keep the spelling a lower layer used for plugin keys, so a file's
	// "Quality" overrides the default "quality" instead of adding a second
	// key the plugin would see as the same one.
	if plugins, ok := norm["plugins"].(map[string]any); ok {
		if subs, ok := plugins["config"].(map[string]any); ok {
			for name, sub := range subs {
				existing, _ := ld.k.Get("plugins.config." + name).(map[string]any)
				if m, ok := sub.(map[string]any); ok {
					alignKeys(m, existing)
				}
			}
		}
	}
	ld.errs = append(ld.errs, l.errs...)
	for p, s := range l.set {
		ld.origin[p] = s
	}
	if err := ld.k.Load(mapProvider(norm), nil); err != nil {
		ld.errs = append(ld.errs, fmt.Errorf("config: merge: %w", err))
	}
}

func (ld *loader) loadDefaults(b []byte) {
	raw := koanf.New(".")
	if err := raw.Load(rawbytes.Provider(b), safeYAML{}); err != nil {
		ld.errs = append(ld.errs, fmt.Errorf("config: embedded defaults: %w", err))
		return
	}
	ld.apply(&layer{origin: fixedOrigin("defaults")}, raw.Raw())
	// The defaults file is the single source of defaults: every key must be
	// there, so nothing silently falls back to a Go zero value.
	for _, n := range schema.leaves() {
		if !ld.k.Exists(n.path) {
			ld.errs = append(ld.errs, &KeyError{Key: n.path, Problem: "missing from the embedded defaults"})
		}
	}
}

// filePath returns the config file to read, whether it was asked for
// explicitly, and "" when there is none.
func (o Options) filePath() (string, bool) {
	if o.File != "" {
		return o.File, true
	}
	if o.Flags != nil && o.Flags.Changed(FlagConfig) {
		if p, err := o.Flags.GetString(FlagConfig); err == nil {
			return p, true
		}
	}
	if o.DefaultFile != "" {
		return o.DefaultFile, false
	}
	return DefaultFilePath, false
}

func (ld *loader) loadFile(o Options) error {
	path, explicit := o.filePath()
	if path == "" {
		return fmt.Errorf("config: --config: empty path")
	}
	if _, err := os.Stat(path); err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if explicit {
			return fmt.Errorf("config: config file given with --config: %w", err)
		}
		return fmt.Errorf("config: config file: %w", err)
	}
	raw := koanf.New(".")
	if err := raw.Load(file.Provider(path), safeYAML{}); err != nil {
		return fmt.Errorf("config: config file %s: %w", path, err)
	}
	ld.apply(&layer{origin: fixedOrigin("file " + path)}, raw.Raw())
	return nil
}

func (ld *loader) loadEnv(environ []string) {
	if len(environ) == 0 {
		return
	}
	varOf := map[string]string{} // key path → variable name
	p := env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			segs := strings.Split(strings.TrimPrefix(name, EnvPrefix), "__")
			path, err := ld.resolve(segs, true)
			if err != nil {
				ld.errs = append(ld.errs, &KeyError{Key: path, Problem: err.Error(), Source: "env " + name})
				return "", nil // dropped; the error is reported
			}
			if prev, dup := varOf[path]; dup {
				ld.errs = append(ld.errs, &KeyError{Key: path, Problem: "set twice (also by " + prev + ")", Source: "env " + name})
				return "", nil
			}
			varOf[path] = name
			return path, value
		},
	})
	raw := koanf.New(".")
	if err := raw.Load(p, nil); err != nil {
		ld.errs = append(ld.errs, fmt.Errorf("config: environment: %w", err))
		return
	}
	ld.apply(&layer{strings: true, origin: func(path string) string {
		if v, ok := varOf[path]; ok {
			return "env " + v
		}
		return "env"
	}}, raw.Raw())
}

func (ld *loader) loadFlags(fs *pflag.FlagSet) {
	if fs == nil {
		return
	}
	raw := koanf.New(".")
	flagOf := map[string]string{}         // key path → flag that set it
	sets, _ := fs.GetStringArray(FlagSet) // absent flag = no --set
	for _, kv := range sets {
		key, value, ok := strings.Cut(kv, "=")
		if !ok {
			ld.errs = append(ld.errs, fmt.Errorf("config: --set %q: want key.path=value", kv))
			continue
		}
		path, err := ld.resolve(strings.Split(strings.TrimSpace(key), "."), false)
		if err != nil {
			ld.errs = append(ld.errs, &KeyError{Key: path, Problem: err.Error(), Source: "--set"})
			continue
		}
		// A later --set for the same key wins, like a later layer.
		if err := raw.Set(path, value); err != nil {
			ld.errs = append(ld.errs, fmt.Errorf("config: --set %s: %w", path, err))
			continue
		}
		flagOf[path] = "--set " + path
	}
	// Shortcut flags are applied after --set, so they win over it.
	p := posflag.ProviderWithFlag(fs, ".", nil, func(f *pflag.Flag) (string, any) {
		path, ok := shortcuts[f.Name]
		if !ok || !f.Changed {
			return "", nil
		}
		flagOf[path] = "--" + f.Name
		return path, f.Value.String()
	})
	if err := raw.Load(p, nil); err != nil {
		ld.errs = append(ld.errs, fmt.Errorf("config: flags: %w", err))
		return
	}
	ld.apply(&layer{strings: true, origin: func(path string) string {
		if f, ok := flagOf[path]; ok {
			return f
		}
		return "flags"
	}}, raw.Raw())
}

// resolve maps key segments written in env or --set onto the schema,
// matching names case-insensitively, and returns the canonical path. In env,
// plugin-name segments may use "_" for "-" (shells cannot export "-").
// It refuses paths that stop at a section: those can only be set key by key.
func (ld *loader) resolve(segs []string, isEnv bool) (string, error) {
	typed := strings.Join(segs, ".")
	if isEnv {
		typed = strings.ToLower(typed)
	}
	n := schema
	parts := make([]string, 0, len(segs))
	for i, s := range segs {
		if s == "" || strings.Contains(s, ".") && isEnv {
			return typed, errors.New("unknown key")
		}
		switch n.kind {
		case kSection:
			c := n.childFold(s)
			if c == nil {
				return typed, errors.New("unknown key")
			}
			parts = append(parts, c.name)
			n = c
		case kStringMap:
			parts = append(parts, pluginName(s, isEnv))
			if i != len(segs)-1 {
				return typed, errors.New("unknown key")
			}
			return strings.Join(parts, "."), nil
		case kPluginMaps:
			parts = append(parts, pluginName(s, isEnv))
			rest := segs[i+1:]
			if len(rest) == 0 {
				return strings.Join(parts, "."), errors.New("names a plugin's whole subtree, not a key")
			}
			// Reuse the spelling of a key already set by a lower layer, so
			// env QUALITY overrides quality instead of adding a second key.
			cur, _ := ld.k.Get(strings.Join(parts, ".")).(map[string]any)
			for _, r := range rest {
				name := r
				if isEnv {
					name = strings.ToLower(r)
				}
				if _, exact := cur[r]; exact {
					name = r
				} else {
					for k := range cur {
						if strings.EqualFold(k, r) {
							name = k
							break
						}
					}
				}
				parts = append(parts, name)
				cur, _ = cur[name].(map[string]any)
			}
			return strings.Join(parts, "."), nil
		default:
			return typed, errors.New("unknown key")
		}
	}
	if n.kind == kSection || n.kind == kStringMap || n.kind == kPluginMaps {
		return strings.Join(parts, "."), errors.New("names a section, not a key")
	}
	return strings.Join(parts, "."), nil
}

// alignKeys renames keys of in (recursively) that match a key of existing
// case-insensitively but not exactly, to existing's spelling.
func alignKeys(in, existing map[string]any) {
	if len(existing) == 0 {
		return
	}
	for _, k := range sortedKeys(in) {
		target := k
		if _, exact := existing[k]; !exact {
			for e := range existing {
				if strings.EqualFold(e, k) {
					target = e
					break
				}
			}
		}
		v := in[k]
		if target != k {
			if _, taken := in[target]; taken {
				continue // both spellings in one layer: reported by the layer
			}
			delete(in, k)
			in[target] = v
		}
		sub, ok1 := v.(map[string]any)
		ex, ok2 := existing[target].(map[string]any)
		if ok1 && ok2 {
			alignKeys(sub, ex)
		}
	}
}

func pluginName(s string, isEnv bool) string {
	s = strings.ToLower(s)
	if isEnv {
		s = strings.ReplaceAll(s, "_", "-")
	}
	return s
}

func fixedOrigin(s string) func(string) string { return func(string) string { return s } }

// mapProvider feeds an already-normalized map to koanf.Load.
type mapProvider map[string]any

func (m mapProvider) Read() (map[string]any, error) { return m, nil }
func (m mapProvider) ReadBytes() ([]byte, error) {
	return nil, errors.New("config: mapProvider has no bytes")
}

// safeYAML is koanf's YAML parser behind a recover, so no input can crash
// the appliance at start.
type safeYAML struct{}

func (safeYAML) Unmarshal(b []byte) (m map[string]any, err error) {
	defer func() {
		if r := recover(); r != nil {
			m, err = nil, fmt.Errorf("yaml: parser failed: %v", r)
		}
	}()
	return yaml.Parser().Unmarshal(b)
}

func (safeYAML) Marshal(m map[string]any) ([]byte, error) { return yaml.Parser().Marshal(m) }
