package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/plugins"
	"go.yaml.in/yaml/v3"
)

func readDefaults(t testing.TB) []byte {
	t.Helper()
	b, err := os.ReadFile("../config.default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wantDefaults is the documented default configuration, written out by hand
// so a change to config.default.yaml must be made deliberately here too.
func wantDefaults() *Config {
	return &Config{
		Server: Server{Listen: "127.0.0.1:8080", TLS: "auto", DataDir: "/var/lib/tabcast"},
		Auth:   Auth{Mode: "local", Plugin: "auth-local", LoginIdle: time.Hour, LoginMax: 12 * time.Hour},
		Log:    Log{Level: "info"},
		Browser: Browser{
			Path:         "/usr/lib/chromium/chromium",
			Headless:     true,
			NoSandbox:    "auto",
			ExtraFlags:   []string{},
			StartTimeout: 20 * time.Second,
			StartURL:     "",
			Width:        1280,
			Height:       720,
			Isolation:    "shared",
		},
		Sessions: Sessions{OpenDefault: true, Max: 4, MaxViewers: 4, IdleReclaim: 2 * time.Minute, DefaultOwner: "admin",
			InputIdleWarn: 30 * time.Minute, InputIdleReclaim: 35 * time.Minute},
		Video: Video{
			Codec:            "auto",
			FPS:              24,
			IdleFPS:          2,
			BitrateKbps:      2500,
			KeyframeInterval: 2 * time.Second,
			Hardware:         "auto",
			Capture:          "auto",
		},
		WebRTC: WebRTC{UDPPort: 8443, TCP: true, Interfaces: []string{}, Advertise: []string{}, ViewerNetworks: []string{}},
		Turn:   Turn{Enabled: true, Plugin: "turnd", CredentialTTL: 10 * time.Minute},
		Agent:  Agent{CDPMaxConnections: 4, CDPMaxMessageBytes: 8 << 20, CDPInputDeadline: 30 * time.Second, CDPIdleTimeout: 5 * time.Minute},
		Input: Input{
			BlockedShortcuts: []string{"Ctrl+O", "Ctrl+S", "Ctrl+P", "Ctrl+Shift+I", "F12"},
			AllowRightClick:  true, AllowSchemes: []string{"http", "https"},
			AllowHosts: []string{}, DenyHosts: []string{}, DenyPrivate: true, AllowLoopbackHosts: []string{},
			MaxTextBytes: 1 << 20, MaxClipboardBytes: 1 << 20,
		},
		Plugins: Plugins{
			Dir:          "",
			Capture:      "capture-cdp",
			TabCapture:   "capture-tab",
			Encoder:      "encoder-ffmpeg",
			StartTimeout: 10 * time.Second,
			PingInterval: 2 * time.Second,
			CrashBudget:  5,
			CrashWindow:  2 * time.Minute,
			SHA256:       map[string]string{},
			Config: map[string]map[string]any{
				"capture-cdp":    {"quality": 80, "everyNthFrame": 1, "maxWidth": 0, "maxHeight": 0},
				"encoder-ffmpeg": {"hardware": "auto", "threads": 1, "h264Preset": "ultrafast"},
				"auth-local": {"usersFile": "/etc/tabcast/users.yaml", "initialPasswordFile": "/etc/tabcast/initial-admin-password",
					"maxFailures": 5, "lockoutBase": "1s"},
				"turnd": {"listenUDP": ":3478", "listenTCP": ":3478", "listenTLS": "", "secretFile": "/var/lib/tabcast/turn-secret",
					"maxAllocationsPerUser": 5, "maxAllocations": 100, "relayPortMin": 49160, "relayPortMax": 49400},
			},
		},
	}
}

// setup describes one Load call: optional config file content (written to
// a temp file and passed as the default file), environment and flag args.
type setup struct {
	file  *string // nil = no file
	env   []string
	args  []string
	tweak func(*Options)
}

func str(s string) *string { return &s }

func (s setup) options(t *testing.T) Options {
	t.Helper()
	dir := t.TempDir()
	o := Options{
		Defaults:    readDefaults(t),
		DefaultFile: filepath.Join(dir, "absent.yaml"),
		Environ:     s.env,
	}
	if s.file != nil {
		o.DefaultFile = filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(o.DefaultFile, []byte(*s.file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if s.args != nil {
		fs := pflag.NewFlagSet("tabcast", pflag.ContinueOnError)
		AddFlags(fs)
		if err := fs.Parse(s.args); err != nil {
			t.Fatal(err)
		}
		o.Flags = fs
	}
	if s.tweak != nil {
		s.tweak(&o)
	}
	return o
}

func (s setup) load(t *testing.T) (*Config, error) {
	t.Helper()
	return Load(s.options(t))
}

func TestDefaultsOnly(t *testing.T) {
	cfg, err := Load(Options{Defaults: readDefaults(t), DefaultFile: filepath.Join(t.TempDir(), "none.yaml")})
	if err != nil {
		t.Fatalf("Load(defaults): %v", err)
	}
	if want := wantDefaults(); !reflect.DeepEqual(cfg, want) {
		t.Fatalf("defaults differ:\n got %#v\nwant %#v", cfg, want)
	}
	for name, want := range map[string]string{
		"capture-cdp":    `{"everyNthFrame":1,"maxHeight":0,"maxWidth":0,"quality":80}`,
		"encoder-ffmpeg": `{"h264Preset":"ultrafast","hardware":"auto","threads":1}`,
		"auth-none":      `{}`,
		// The browser's encoder starts at video.fps and video.bitrateKbps.
		"capture-tab": `{"maxBitrateKbps":2500,"maxFps":24}`,
	} {
		got, err := cfg.PluginConfigJSON(name)
		if err != nil || string(got) != want {
			t.Errorf("PluginConfigJSON(%s) = %s, %v; want %s", name, got, err, want)
		}
	}
}

// Every key in config.default.yaml, plugin subtrees included, carries a
// comment right above it (or on its line).
func TestDefaultsFileEveryKeyCommented(t *testing.T) {
	var doc yaml.Node
	if err := yaml.Unmarshal(readDefaults(t), &doc); err != nil {
		t.Fatal(err)
	}
	var keys int
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		if n.Kind == yaml.DocumentNode {
			for _, c := range n.Content {
				walk(c, prefix)
			}
			return
		}
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			path := joinPath(prefix, k.Value)
			keys++
			if strings.TrimSpace(k.HeadComment) == "" && strings.TrimSpace(k.LineComment) == "" {
				t.Errorf("%s: no comment", path)
			}
			walk(v, path)
		}
	}
	walk(&doc, "")
	if want := len(schema.leaves()); keys < want {
		t.Fatalf("saw %d keys, fewer than the %d schema leaves", keys, want)
	}
}

func TestDefaultsMissingKey(t *testing.T) {
	b := strings.Replace(string(readDefaults(t)), "  fps: 24\n", "", 1)
	_, err := Load(Options{Defaults: []byte(b), DefaultFile: filepath.Join(t.TempDir(), "none.yaml")})
	wantErrs(t, err, "config: video.fps: missing from the embedded defaults")
}

// wantErrs fails unless err contains every want substring.
func wantErrs(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error; want %q", want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q\ndoes not contain %q", err, w)
		}
	}
}

func TestFileErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		file string
		want []string
	}{
		{"unknown top-level key", "vidoe: {fps: 30}\n", []string{"config: vidoe: unknown key (from file "}},
		{"unknown nested key", "video:\n  fsp: 30\n", []string{"config: video.fsp: unknown key"}},
		{"unknown key deep", "server:\n  lisen: x\n", []string{"config: server.lisen: unknown key"}},
		{"case typo hints", "video:\n  bitratekbps: 3000\n", []string{"config: video.bitratekbps: unknown key (did you mean video.bitrateKbps?)"}},
		{"dotted key", "video.fps: 30\n", []string{"config: video.fps: unknown key (dotted keys are not expanded"}},
		{"int from string", "video:\n  fps: \"abc\"\n", []string{`config: video.fps: wrong type: want integer, got "abc"`}},
		{"int from float", "video:\n  fps: 2.5\n", []string{`config: video.fps: wrong type: want integer, got 2.5`}},
		{"bool from int", "sessions:\n  openDefault: 3\n", []string{`config: sessions.openDefault: wrong type: want boolean, got 3`}},
		{"string from int", "log:\n  level: 1\n", []string{`config: log.level: wrong type: want string, got 1`}},
		{"section from scalar", "video: 3\n", []string{`config: video: wrong type: want mapping, got 3`}},
		{"list from string", "webrtc:\n  interfaces: eth0\n", []string{`config: webrtc.interfaces: wrong type: want list of strings, got "eth0"`}},
		{"list item", "webrtc:\n  interfaces: [eth0, 5]\n", []string{`config: webrtc.interfaces: wrong type: item 1: want string, got 5`}},
		{"null scalar", "video:\n  fps:\n", []string{`config: video.fps: wrong type: want integer, got null`}},
		{"fps zero", "video:\n  fps: 0\n", []string{"config: video.fps: out of range: 0 not in [1, 60]"}},
		{"idleFps above fps", "video:\n  fps: 2\n  idleFps: 3\n", []string{"config: video.idleFps: 3 is above video.fps (2)"}},
		{"idleFps negative", "video:\n  idleFps: -1\n", []string{"config: video.idleFps: out of range: -1 not in [0, 10]"}},
		{"width huge", "browser:\n  width: 99999\n", []string{"config: browser.width: out of range: 99999 not in [320, 3840]"}},
		{"codec enum", "video:\n  codec: av1\n", []string{`config: video.codec: invalid value "av1": want one of auto, h264, vp8`}},
		{"log enum", "log:\n  level: verbose\n", []string{`config: log.level: invalid value "verbose"`}},
		{"bad duration", "video:\n  keyframeInterval: 2 secs\n", []string{`config: video.keyframeInterval: wrong type: want duration (e.g. "2s", "500ms"), got "2 secs"`}},
		{"bare number duration", "browser:\n  startTimeout: 20\n", []string{`config: browser.startTimeout: wrong type: want duration`}},
		{"duration range", "video:\n  keyframeInterval: 1m\n", []string{"config: video.keyframeInterval: out of range: 1m0s not in [500ms, 10s]"}},
		{"cdp connections zero", "agent:\n  cdpMaxConnections: 0\n", []string{"config: agent.cdpMaxConnections: out of range: 0 not in [1, 64]"}},
		{"cdp message tiny", "agent:\n  cdpMaxMessageBytes: 100\n", []string{"config: agent.cdpMaxMessageBytes: out of range: 100 not in [1048576, 67108864]"}},
		{"cdp deadline", "agent:\n  cdpInputDeadline: 10m\n", []string{"config: agent.cdpInputDeadline: out of range: 10m0s not in [1s, 5m0s]"}},
		{"cdp bool", "agent:\n  cdp: yes please\n", []string{"config: agent.cdp: wrong type: want boolean"}},
		{"negative duration", "plugins:\n  crashWindow: -5s\n", []string{"config: plugins.crashWindow: out of range: -5s"}},
		{"non-loopback listen without auth", "server:\n  listen: 0.0.0.0:8080\nauth:\n  mode: none\n", []string{`config: auth.mode: none is allowed only when server.listen is a loopback address (got "0.0.0.0:8080")`}},
		{"all-interfaces listen without TLS", "server:\n  listen: \":8080\"\n  tls: \"off\"\n", []string{"config: server.tls: off is allowed only when server.listen is a loopback address"}},
		{"cert without key", "server:\n  certFile: /etc/tabcast/cert.pem\n", []string{"config: server.certFile: certFile and keyFile go together"}},
		{"relative data dir", "server:\n  dataDir: data\n", []string{`config: server.dataDir: must be an absolute path, got "data"`}},
		{"auth mode", "auth:\n  mode: ldap\n", []string{`config: auth.mode: invalid value "ldap"`}},
		{"login expiry", "auth:\n  loginIdle: 1s\n", []string{"config: auth.loginIdle: out of range: 1s not in [1m0s, 720h0m0s]"}},
		{"default owner", "sessions:\n  defaultOwner: \"a b\"\n", []string{`config: sessions.defaultOwner: invalid user name "a b"`}},
		{"unparsable listen", "server:\n  listen: localhost\n", []string{`config: server.listen: invalid address "localhost"`}},
		{"listen port", "server:\n  listen: 127.0.0.1:http\n", []string{`config: server.listen: invalid port "http"`}},
		{"udp port", "webrtc:\n  udpPort: 80\n", []string{"config: webrtc.udpPort: out of range: 80 not 0 or in [1024, 65535]"}},
		{"viewer networks", "webrtc:\n  viewerNetworks: [10.0.0.0/33, 192.168.1.0/24, 10.1.2.3, \"::ffff:10.0.0.0/104\", 169.254.0.0/24, 127.0.0.0/8]\n", []string{
			`config: webrtc.viewerNetworks[0]: not a CIDR prefix: "10.0.0.0/33" (e.g. 10.20.0.0/16 or fd00:20::/48)`,
			`config: webrtc.viewerNetworks[2]: not a CIDR prefix: "10.1.2.3"`,
			`config: webrtc.viewerNetworks[3]: write IPv4 ranges in IPv4 form: "::ffff:10.0.0.0/104"`,
			`config: webrtc.viewerNetworks[4]: 169.254.0.0/24 is link-local, which viewers' ICE candidates may never name`,
			`config: webrtc.viewerNetworks[5]: 127.0.0.0/8 is loopback, which viewers' ICE candidates may never name`,
		}},
		{"noSandbox enum", "browser:\n  noSandbox: maybe\n", []string{`config: browser.noSandbox: invalid value "maybe"`}},
		{"start url scheme", "browser:\n  startURL: file:///etc/passwd\n", []string{`config: browser.startURL: invalid URL "file:///etc/passwd"`}},
		{"extra flag form", "browser:\n  extraFlags: [lang=en]\n", []string{`config: browser.extraFlags[0]: invalid Chromium flag "lang=en"`}},
		{"extra flag core", "browser:\n  extraFlags: [--lang=en, --remote-debugging-address=0.0.0.0]\n", []string{`config: browser.extraFlags[1]: --remote-debugging-address is set by tabcast itself`}},
		{"plugin name", "plugins:\n  capture: ../evil\n", []string{`config: plugins.capture: invalid plugin name "../evil"`}},
		{"plugins dir relative", "plugins:\n  dir: plugins\n", []string{`config: plugins.dir: must be an absolute path`}},
		{"sha256 format", "plugins:\n  sha256:\n    capture-cdp: abc\n", []string{`config: plugins.sha256.capture-cdp: invalid sha256 "abc"`}},
		{"sha256 type", "plugins:\n  sha256:\n    capture-cdp: 5\n", []string{`config: plugins.sha256.capture-cdp: wrong type: want string, got 5`}},
		{"plugin subtree type", "plugins:\n  config:\n    capture-cdp: 5\n", []string{`config: plugins.config.capture-cdp: wrong type: want mapping, got 5`}},
		{"plugin subtree name", "plugins:\n  config:\n    Capture_CDP: {quality: 1}\n", []string{`config: plugins.config.Capture_CDP: invalid plugin name`}},
		{"plugin keys differing in case", "plugins:\n  config:\n    relayx:\n      realm: a\n      Realm: b\n", []string{`config: plugins.config.relayx.realm: same key as Realm (plugins match key names case-insensitively)`}},
		{"plugin subtree not JSON", "plugins:\n  config:\n    capture-cdp: {quality: .inf}\n", []string{`config: plugins.config.capture-cdp: cannot be passed to the plugin as JSON`}},
		{"all errors reported", "video:\n  fps: 0\n  codec: av1\n  fsp: 1\nbrowser:\n  width: 1\n", []string{
			"video.fps: out of range", "video.codec: invalid value", "video.fsp: unknown key", "browser.width: out of range",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := setup{file: str(tc.file)}.load(t)
			if cfg != nil {
				t.Errorf("got a config along with the error")
			}
			wantErrs(t, err, tc.want...)
		})
	}
}

func TestFileAccepted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		file  string
		check func(*Config) bool
	}{
		{"empty file", "", func(c *Config) bool { return reflect.DeepEqual(c, wantDefaults()) }},
		{"comments only", "# nothing\n", func(c *Config) bool { return reflect.DeepEqual(c, wantDefaults()) }},
		{"unquoted bool noSandbox", "browser:\n  noSandbox: true\n", func(c *Config) bool { return c.Browser.NoSandbox == "true" }},
		{"ipv6 loopback", "server:\n  listen: \"[::1]:0\"\n", func(c *Config) bool { return c.Server.Listen == "[::1]:0" }},
		{"localhost", "server:\n  listen: localhost:9000\n", func(c *Config) bool { return c.Server.Listen == "localhost:9000" }},
		{"127/8", "server:\n  listen: 127.1.2.3:9000\n", func(c *Config) bool { return c.Server.Listen == "127.1.2.3:9000" }},
		{"hardware off", "video:\n  hardware: off\n", func(c *Config) bool { return c.Video.Hardware == "off" }},
		{"viewer networks", "webrtc:\n  viewerNetworks: [10.20.0.0/16, \"fd00:20::/48\", 0.0.0.0/0]\n", func(c *Config) bool {
			return reflect.DeepEqual(c.WebRTC.ViewerNetworks, []string{"10.20.0.0/16", "fd00:20::/48", "0.0.0.0/0"})
		}},
		{"lists replace", "webrtc:\n  interfaces: [eth0, lo]\n", func(c *Config) bool {
			return reflect.DeepEqual(c.WebRTC.Interfaces, []string{"eth0", "lo"})
		}},
		{"start urls", "browser:\n  startURL: https://example.test/x\n", func(c *Config) bool { return c.Browser.StartURL == "https://example.test/x" }},
		{"sha256 lowercased", "plugins:\n  sha256:\n    capture-cdp: " + strings.Repeat("AB", 32) + "\n", func(c *Config) bool {
			return c.Plugins.SHA256["capture-cdp"] == strings.Repeat("ab", 32)
		}},
		{"null section keeps defaults", "video:\n", func(c *Config) bool { return c.Video.FPS == 24 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := setup{file: str(tc.file)}.load(t)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("unexpected config: %+v", cfg)
			}
		})
	}
}

func TestLayering(t *testing.T) {
	file := "video:\n  fps: 10\n  bitrateKbps: 1000\nserver:\n  listen: 127.0.0.1:7000\nlog:\n  level: warn\n"
	for _, tc := range []struct {
		name  string
		s     setup
		check func(*Config) bool
	}{
		{"file beats defaults", setup{file: str(file)}, func(c *Config) bool {
			return c.Video.FPS == 10 && c.Video.BitrateKbps == 1000 && c.Video.Codec == "auto"
		}},
		{"env beats file", setup{file: str(file), env: []string{"TABCAST_VIDEO__FPS=20", "PATH=/bin"}}, func(c *Config) bool {
			return c.Video.FPS == 20 && c.Video.BitrateKbps == 1000
		}},
		{"env keys case-insensitive", setup{env: []string{"TABCAST_VIDEO__BITRATEKBPS=3000", "TABCAST_sessions__openDefault=false"}}, func(c *Config) bool {
			return c.Video.BitrateKbps == 3000 && !c.Sessions.OpenDefault
		}},
		{"flags beat env", setup{file: str(file), env: []string{"TABCAST_VIDEO__FPS=20"}, args: []string{"--set", "video.fps=30"}}, func(c *Config) bool {
			return c.Video.FPS == 30
		}},
		{"later --set wins", setup{args: []string{"--set", "video.fps=30", "--set=VIDEO.FPS=31"}}, func(c *Config) bool {
			return c.Video.FPS == 31
		}},
		{"--listen beats env and file", setup{file: str(file), env: []string{"TABCAST_SERVER__LISTEN=127.0.0.1:7001"}, args: []string{"--listen", "127.0.0.1:7002"}}, func(c *Config) bool {
			return c.Server.Listen == "127.0.0.1:7002"
		}},
		{"--listen beats --set", setup{args: []string{"--listen", "[::1]:1", "--set", "server.listen=127.0.0.1:2"}}, func(c *Config) bool {
			return c.Server.Listen == "[::1]:1"
		}},
		{"--log-level", setup{file: str(file), args: []string{"--log-level", "debug"}}, func(c *Config) bool { return c.Log.Level == "debug" }},
		{"unchanged flags keep lower layers", setup{file: str(file), args: []string{}}, func(c *Config) bool {
			return c.Server.Listen == "127.0.0.1:7000" && c.Log.Level == "warn"
		}},
		{"env types", setup{env: []string{
			"TABCAST_BROWSER__HEADLESS=false", "TABCAST_BROWSER__STARTTIMEOUT=45s",
			"TABCAST_WEBRTC__INTERFACES=eth0, lo ,", "TABCAST_BROWSER__EXTRAFLAGS=",
		}}, func(c *Config) bool {
			return !c.Browser.Headless && c.Browser.StartTimeout == 45*time.Second &&
				reflect.DeepEqual(c.WebRTC.Interfaces, []string{"eth0", "lo"}) && len(c.Browser.ExtraFlags) == 0
		}},
		{"flag list", setup{file: str("browser:\n  extraFlags: [--a]\n"), args: []string{"--set", "browser.extraFlags=--lang=en,--b"}}, func(c *Config) bool {
			return reflect.DeepEqual(c.Browser.ExtraFlags, []string{"--lang=en", "--b"})
		}},
		{"env sha256 with underscore name", setup{env: []string{"TABCAST_PLUGINS__SHA256__CAPTURE_CDP=" + strings.Repeat("0", 64)}}, func(c *Config) bool {
			return c.Plugins.SHA256["capture-cdp"] == strings.Repeat("0", 64)
		}},
		{"explicit file via flag", setup{file: str("video: {fps: 5}\n"), args: []string{}, tweak: func(o *Options) {
			explicit := filepath.Join(filepath.Dir(o.DefaultFile), "explicit.yaml")
			if err := os.WriteFile(explicit, []byte("video: {fps: 7}\n"), 0o600); err != nil {
				panic(err)
			}
			if err := o.Flags.Set(FlagConfig, explicit); err != nil {
				panic(err)
			}
		}}, func(c *Config) bool { return c.Video.FPS == 7 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.s.load(t)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(cfg) {
				t.Fatalf("unexpected config: %+v", cfg)
			}
		})
	}
}

func TestEnvAndFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    setup
		want []string
	}{
		{"unknown env key", setup{env: []string{"TABCAST_VIDEO__NOPE=1"}}, []string{"config: video.nope: unknown key (from env TABCAST_VIDEO__NOPE)"}},
		{"unknown env section", setup{env: []string{"TABCAST_NOPE=1"}}, []string{"config: nope: unknown key (from env TABCAST_NOPE)"}},
		{"env past a leaf", setup{env: []string{"TABCAST_VIDEO__FPS__X=1"}}, []string{"config: video.fps.x: unknown key (from env TABCAST_VIDEO__FPS__X)"}},
		{"env names a section", setup{env: []string{"TABCAST_VIDEO=1"}}, []string{"config: video: names a section, not a key (from env TABCAST_VIDEO)"}},
		{"env names plugin subtree", setup{env: []string{"TABCAST_PLUGINS__CONFIG__CAPTURE_CDP=1"}}, []string{"config: plugins.config.capture-cdp: names a plugin's whole subtree"}},
		{"env wrong type", setup{env: []string{"TABCAST_VIDEO__FPS=abc"}}, []string{`config: video.fps: wrong type: want integer, got "abc" (from env TABCAST_VIDEO__FPS)`}},
		{"env bad bool", setup{env: []string{"TABCAST_BROWSER__HEADLESS=maybe"}}, []string{`config: browser.headless: wrong type: want boolean, got "maybe" (from env TABCAST_BROWSER__HEADLESS)`}},
		{"env range names var", setup{env: []string{"TABCAST_VIDEO__FPS=61"}}, []string{`config: video.fps: out of range: 61 not in [1, 60] (from env TABCAST_VIDEO__FPS)`}},
		{"env set twice", setup{env: []string{"TABCAST_VIDEO__FPS=20", "TABCAST_video__fps=21"}}, []string{`config: video.fps: set twice (also by TABCAST_VIDEO__FPS) (from env TABCAST_video__fps)`}},
		{"env bad listen", setup{env: []string{"TABCAST_SERVER__LISTEN=10.0.0.1:80", "TABCAST_AUTH__MODE=none"}}, []string{"config: auth.mode: none is allowed only when server.listen is a loopback address", "(from env TABCAST_AUTH__MODE)"}},
		{"--set unknown", setup{args: []string{"--set", "video.nope=1"}}, []string{"config: video.nope: unknown key (from --set)"}},
		{"--set no equals", setup{args: []string{"--set", "video.fps"}}, []string{`config: --set "video.fps": want key.path=value`}},
		{"--set wrong type", setup{args: []string{"--set", "video.fps=fast"}}, []string{`config: video.fps: wrong type: want integer, got "fast" (from --set video.fps)`}},
		{"--set duration", setup{args: []string{"--set", "plugins.pingInterval=2"}}, []string{`config: plugins.pingInterval: wrong type: want duration`}},
		{"--listen non-loopback", setup{args: []string{"--listen", "0.0.0.0:80", "--set", "server.tls=off"}}, []string{"config: server.tls: off is allowed only when server.listen is a loopback address", "(from --set server.tls)"}},
		{"--log-level bad", setup{args: []string{"--log-level", "loud"}}, []string{`config: log.level: invalid value "loud"`, "(from --log-level)"}},
		{"errors from all layers", setup{
			file: str("video:\n  fsp: 1\n"),
			env:  []string{"TABCAST_VIDEO__NOPE=1"},
			args: []string{"--set", "video.codec=av1"},
		}, []string{"video.fsp: unknown key (from file ", "video.nope: unknown key (from env", `video.codec: invalid value "av1"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.s.load(t)
			if cfg != nil {
				t.Errorf("got a config along with the error")
			}
			wantErrs(t, err, tc.want...)
		})
	}
}

func TestKeyErrorIsInspectable(t *testing.T) {
	_, err := setup{file: str("video:\n  fps: 0\n")}.load(t)
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != "video.fps" || !strings.HasPrefix(ke.Source, "file ") {
		t.Fatalf("errors.As KeyError: %v %+v", err, ke)
	}
}

func TestFileProblems(t *testing.T) {
	t.Run("explicit file missing", func(t *testing.T) {
		missing := filepath.Join(t.TempDir(), "nope.yaml")
		_, err := Load(Options{Defaults: readDefaults(t), File: missing})
		wantErrs(t, err, "config: config file given with --config", missing, "no such file")
	})
	t.Run("default file missing is fine", func(t *testing.T) {
		if _, err := Load(Options{Defaults: readDefaults(t), DefaultFile: filepath.Join(t.TempDir(), "nope.yaml")}); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("malformed YAML names file and line", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte("video:\n  fps: 30\n   codec: [h264\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Load(Options{Defaults: readDefaults(t), File: path})
		wantErrs(t, err, "config: config file "+path, "line 3")
	})
	t.Run("top level not a mapping", func(t *testing.T) {
		_, err := setup{file: str("- a\n- b\n")}.load(t)
		wantErrs(t, err, "config: config file ", "line 1")
	})
	t.Run("file is a directory", func(t *testing.T) {
		_, err := Load(Options{Defaults: readDefaults(t), File: t.TempDir()})
		wantErrs(t, err, "config: config file ", "is a directory")
	})
	t.Run("malformed defaults", func(t *testing.T) {
		_, err := Load(Options{Defaults: []byte("a: [\n"), DefaultFile: filepath.Join(t.TempDir(), "x")})
		wantErrs(t, err, "config: embedded defaults:")
	})
}

func TestPluginSubtrees(t *testing.T) {
	file := "plugins:\n  config:\n    capture-cdp:\n      Quality: 70\n    relayx:\n      realm: lab\n      nested: {a: [1, two]}\n"
	cfg, err := setup{
		file: str(file),
		env: []string{
			"TABCAST_PLUGINS__CONFIG__CAPTURE_CDP__EVERYNTHFRAME=2",   // existing spelling reused
			"TABCAST_PLUGINS__CONFIG__ENCODER-FFMPEG__VP8CPUUSED=-6",  // new key: lower-cased
			"TABCAST_PLUGINS__CONFIG__RELAYX__ENABLED=true",           // bool inferred
			"TABCAST_PLUGINS__CONFIG__RELAYX__NESTED__B=1.5",          // nested, float
			"TABCAST_PLUGINS__CONFIG__RELAYX__HOST=turn.example.test", // stays a string
			"TABCAST_PLUGINS__CONFIG__RELAYX__PORTTEXT=0x10",          // not decimal: string
		},
		args: []string{"--set", "plugins.config.capture-cdp.maxWidth=640", "--set", "plugins.config.relayx.Realm2=x",
			"--set", "video.fps=15", "--set", "plugins.config.capture-tab.maxBitrateKbps=900"},
	}.load(t)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"capture-cdp":    `{"everyNthFrame":2,"maxHeight":0,"maxWidth":640,"quality":70}`,
		"encoder-ffmpeg": `{"h264Preset":"ultrafast","hardware":"auto","threads":1,"vp8cpuused":-6}`,
		"relayx":         `{"Realm2":"x","enabled":true,"host":"turn.example.test","nested":{"a":[1,"two"],"b":1.5},"porttext":"0x10","realm":"lab"}`,
		// video.fps fills in; the subtree's own value wins.
		"capture-tab": `{"maxBitrateKbps":900,"maxFps":15}`,
	} {
		got, err := cfg.PluginConfigJSON(name)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s: got %s\nwant %s", name, got, want)
		}
		var m map[string]any
		if err := json.Unmarshal(got, &m); err != nil {
			t.Errorf("%s: not a JSON object: %v", name, err)
		}
	}
}

func TestPrint(t *testing.T) {
	file := "plugins:\n  sha256:\n    relayx: " + strings.Repeat("a", 64) + "\n  config:\n    relayx:\n      secret: x\n      realm: lab\n      users: {alice: {password: hunter2}}\n      apiKey: k1\n"
	cfg, err := setup{file: str(file)}.load(t)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Print(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, leak := range []string{"hunter2", ": x\n", "k1"} {
		if strings.Contains(out, leak) {
			t.Errorf("output leaks %q:\n%s", leak, out)
		}
	}
	for _, want := range []string{
		`secret: '****'`, `password: '****'`, `apiKey: '****'`, "realm: lab",
		"keyframeInterval: 2s", "relayx: " + strings.Repeat("a", 64), "extraFlags: []",
		"listen: 127.0.0.1:8080", "noSandbox: auto",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// Keys come out in the order of config.default.yaml.
	if strings.Index(out, "server:") > strings.Index(out, "plugins:") {
		t.Errorf("sections out of order:\n%s", out)
	}
}

// Print's output is itself a complete, valid config that loads back to the
// same configuration (when nothing was masked).
func TestPrintRoundTrip(t *testing.T) {
	cfg, err := setup{file: str("browser:\n  noSandbox: \"true\"\n  extraFlags: [--lang=en]\nwebrtc:\n  interfaces: [lo]\n")}.load(t)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := Print(&buf, cfg); err != nil {
		t.Fatal(err)
	}
	again, err := Load(Options{Defaults: buf.Bytes(), DefaultFile: filepath.Join(t.TempDir(), "none")})
	if err != nil {
		t.Fatalf("reloading printed config: %v\n%s", err, buf.String())
	}
	if !reflect.DeepEqual(cfg, again) {
		t.Fatalf("round trip differs:\n got %#v\nwant %#v", again, cfg)
	}
}

func TestIsSecretName(t *testing.T) {
	for name, want := range map[string]bool{
		"secret": true, "clientSecret": true, "password": true, "authToken": true, "apiKey": true, "key": true,
		"keyframeInterval": false, "keyboardLayout": false, "quality": false, "realm": false,
	} {
		if got := isSecretName(name); got != want {
			t.Errorf("isSecretName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestSources(t *testing.T) {
	s := setup{
		file: str("video: {fps: 5}\n"),
		env:  []string{"TABCAST_VIDEO__FPS=6", "HOME=/root", "TABCAST_LOG__LEVEL=debug"},
		args: []string{"--set", "video.codec=vp8", "--listen", "127.0.0.1:1"},
	}
	o := s.options(t)
	got := Sources(o)
	want := []string{
		"defaults",
		"file " + o.DefaultFile,
		"env TABCAST_LOG__LEVEL,TABCAST_VIDEO__FPS",
		"flags --set video.codec,--listen",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Sources = %q\nwant %q", got, want)
	}
	if got := Sources(setup{}.options(t)); !reflect.DeepEqual(got, []string{"defaults"}) {
		t.Fatalf("Sources(defaults only) = %q", got)
	}
}

// Every key appears in the configuration reference.
func TestDocsListEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range schema.leaves() {
		if !strings.Contains(string(b), "`"+n.path+"`") {
			t.Errorf("docs/operations.md does not document `%s`", n.path)
		}
	}
}

// Mutated and random YAML never panics and always yields exactly one of a
// config or an error.
func TestGarbageNeverPanics(t *testing.T) {
	base := readDefaults(t)
	rng := rand.New(rand.NewPCG(1, 2))
	seeds := [][]byte{
		base, []byte("{"), []byte("[[[[[["), []byte("a: &a [*a]"), []byte("\x00\xff\xfe"),
		[]byte("video: !!binary aGVsbG8="), []byte("plugins: {config: {x: {1: 2, [a]: b}}}"),
		[]byte("? [a, b]\n: c\n"), []byte("video: {fps: 99999999999999999999999}"),
		[]byte("a: !!timestamp 2001-12-14\n"), []byte("<<: {video: {fps: 3}}\n"),
		[]byte("plugins: {config: {x: [{a: {1: 2}}]}}"),
	}
	check := func(in []byte) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("panic on %q: %v", in, r)
			}
		}()
		// As the defaults (parsed by rawbytes) and as a file over good defaults.
		cfg, err := Load(Options{Defaults: in, DefaultFile: "/nonexistent/tabcast.yaml"})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load(%q) = %v, %v", in, cfg, err)
		}
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err = Load(Options{Defaults: base, File: path})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load(file %q) = %v, %v", in, cfg, err)
		}
		if cfg != nil {
			if err := Print(&bytes.Buffer{}, cfg); err != nil {
				t.Fatalf("Print: %v", err)
			}
			for name := range cfg.Plugins.Config {
				if _, err := cfg.PluginConfigJSON(name); err != nil {
					t.Fatalf("PluginConfigJSON(%s) after a successful Load: %v", name, err)
				}
			}
		}
	}
	for _, s := range seeds {
		check(s)
	}
	const punct = ":-[]{},&*!|>'\"%@`#?\n \t"
	for range 300 {
		b := append([]byte(nil), base...)
		for range 1 + rng.IntN(6) {
			i := rng.IntN(len(b))
			switch rng.IntN(4) {
			case 0: // flip to punctuation
				b[i] = punct[rng.IntN(len(punct))]
			case 1: // truncate
				b = b[:i]
			case 2: // delete a span
				j := min(len(b), i+rng.IntN(40))
				b = append(b[:i], b[j:]...)
			case 3: // random byte
				b[i] = byte(rng.IntN(256))
			}
			if len(b) == 0 {
				break
			}
		}
		check(b)
	}
}

func FuzzLoad(f *testing.F) {
	f.Add(readDefaults(f))
	f.Add([]byte("video: {fps: 30}\nplugins: {config: {x: {a: [1, {b: c}]}}}\n"))
	f.Add([]byte("a: &a [*a, *a]\n"))
	base := readDefaults(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(path, in, 0o600); err != nil {
			t.Fatal(err)
		}
		cfg, err := Load(Options{Defaults: base, File: path})
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Load = %v, %v", cfg, err)
		}
		if cfg != nil {
			if err := Print(&bytes.Buffer{}, cfg); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestPluginInCatalog: every catalog role is a config key whose default is
// the plugin Tabcast ships for it.
func TestPluginInCatalog(t *testing.T) {
	cfg, err := Load(Options{Defaults: readDefaults(t), DefaultFile: filepath.Join(t.TempDir(), "none.yaml")})
	if err != nil {
		t.Fatalf("Load(defaults): %v", err)
	}
	for _, s := range plugins.Catalog() {
		if got := cfg.PluginIn(s); got != s.Name {
			t.Errorf("%s defaults to %q, the catalog ships %q", s.ConfigKey, got, s.Name)
		}
	}
	if got := cfg.PluginIn(plugins.Role{ConfigKey: "plugins.nope"}); got != "" {
		t.Errorf("unknown role: %q", got)
	}
}
