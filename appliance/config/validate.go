package config

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tabcast/tabcast/core/egress"
)

// plainName is the form of a plugin name: it becomes a file name in the
// plugins dir, so nothing that could walk out of it.
var plainName = regexp.MustCompile(`^[a-z0-9-]+$`)

var userNameRE = regexp.MustCompile(`^[A-Za-z0-9._@-]{1,64}$`)

var hex64 = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// coreBrowserFlags are Chromium flags tabcast sets itself; letting
// browser.extraFlags override them would break isolation (a second
// --remote-debugging-address would expose CDP beyond loopback) or
// duplicate another key.
var coreBrowserFlags = []string{
	"--remote-debugging-address", "--remote-debugging-port", "--remote-debugging-pipe",
	"--remote-allow-origins", "--user-data-dir", "--headless", "--no-sandbox",
	"--window-size",
	// The egress wall: every request goes through the core's proxy.
	"--proxy-server", "--proxy-bypass-list", "--proxy-pac-url", "--no-proxy-server",
	"--proxy-auto-detect", "--enable-quic", "--host-resolver-rules", "--host-rules",
}

// Ranges, also documented in config.default.yaml and docs/operations.md.
const (
	minWidth, maxWidth   = 320, 3840
	minHeight, maxHeight = 240, 2160
)

type checker struct {
	origin func(string) string
	errs   []error
}

func (c *checker) fail(path, format string, args ...any) {
	c.errs = append(c.errs, &KeyError{Key: path, Problem: fmt.Sprintf(format, args...), Source: c.origin(path)})
}

func (c *checker) intRange(path string, v, lo, hi int) {
	if v < lo || v > hi {
		c.fail(path, "out of range: %d not in [%d, %d]", v, lo, hi)
	}
}

func (c *checker) durRange(path string, v, lo, hi time.Duration) {
	if v < lo || v > hi {
		c.fail(path, "out of range: %s not in [%s, %s]", v, lo, hi)
	}
}

func (c *checker) enum(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	c.fail(path, "invalid value %q: want one of %s", v, strings.Join(allowed, ", "))
}

func (c *checker) name(path, v string) {
	if !plainName.MatchString(v) {
		c.fail(path, "invalid plugin name %q: want [a-z0-9-]+", v)
	}
}

// validate checks ranges, enums and formats of the merged configuration.
var schemeRE = regexp.MustCompile(`^[a-z][a-z0-9+.-]{0,31}$`)

func validate(cfg *Config, origin func(string) string) []error {
	c := &checker{origin: origin}

	loopback := c.listen("server.listen", cfg.Server.Listen)
	sv := cfg.Server
	c.enum("server.tls", sv.TLS, "auto", "on", "off")
	if (sv.CertFile == "") != (sv.KeyFile == "") {
		c.fail("server.certFile", "certFile and keyFile go together: set both or neither")
	}
	for key, f := range map[string]string{"server.certFile": sv.CertFile, "server.keyFile": sv.KeyFile, "server.dataDir": sv.DataDir} {
		if f != "" && !filepath.IsAbs(f) {
			c.fail(key, "must be an absolute path, got %q", f)
		}
	}
	if sv.DataDir == "" {
		c.fail("server.dataDir", "must not be empty")
	}
	if sv.RedirectListen != "" {
		c.listen("server.redirectListen", sv.RedirectListen)
		if sv.TLS == "off" {
			c.fail("server.redirectListen", "redirects to HTTPS, but server.tls is off")
		}
	}
	au := cfg.Auth
	c.enum("auth.mode", au.Mode, "local", "none")
	c.name("auth.plugin", au.Plugin)
	c.durRange("auth.loginIdle", au.LoginIdle, time.Minute, 30*24*time.Hour)
	c.durRange("auth.loginMax", au.LoginMax, time.Minute, 90*24*time.Hour)
	if au.AgentTokenFile != "" && !filepath.IsAbs(au.AgentTokenFile) {
		c.fail("auth.agentTokenFile", "must be an absolute path or empty, got %q", au.AgentTokenFile)
	}
	// Off loopback, everyone on the LAN can reach the appliance: it must
	// know who they are, and browsers allow WebRTC only in secure contexts.
	if !loopback && au.Mode == "none" {
		c.fail("auth.mode", "none is allowed only when server.listen is a loopback address (got %q)", cfg.Server.Listen)
	}
	if !loopback && sv.TLS == "off" {
		c.fail("server.tls", "off is allowed only when server.listen is a loopback address: browsers allow WebRTC and the clipboard only over https or on localhost")
	}
	c.enum("log.level", cfg.Log.Level, "debug", "info", "warn", "error")

	b := cfg.Browser
	if b.Path == "" {
		c.fail("browser.path", "must not be empty")
	}
	c.enum("browser.noSandbox", b.NoSandbox, "auto", "true", "false")
	for i, f := range b.ExtraFlags {
		c.extraFlag(fmt.Sprintf("browser.extraFlags[%d]", i), f)
	}
	c.durRange("browser.startTimeout", b.StartTimeout, time.Second, 2*time.Minute)
	c.startURL("browser.startURL", b.StartURL)
	c.intRange("browser.width", b.Width, minWidth, maxWidth)
	c.enum("browser.isolation", b.Isolation, "shared", "per-session")
	if b.Cgroup != "" && (!filepath.IsAbs(b.Cgroup) || filepath.Clean(b.Cgroup) != b.Cgroup || !strings.HasPrefix(b.Cgroup, "/sys/fs/cgroup/")) {
		c.fail("browser.cgroup", "must be a clean absolute path under /sys/fs/cgroup/ (a cgroup v2 directory), or empty")
	}
	c.intRange("browser.height", b.Height, minHeight, maxHeight)

	c.intRange("sessions.max", cfg.Sessions.Max, 1, 64)
	c.intRange("sessions.maxViewers", cfg.Sessions.MaxViewers, 1, 64)
	ss := cfg.Sessions
	if ss.InputIdleReclaim != 0 {
		c.durRange("sessions.inputIdleReclaim", ss.InputIdleReclaim, time.Second, 24*time.Hour)
	}
	if ss.InputIdleWarn != 0 {
		c.durRange("sessions.inputIdleWarn", ss.InputIdleWarn, time.Second, 24*time.Hour)
		if ss.InputIdleReclaim != 0 && ss.InputIdleWarn >= ss.InputIdleReclaim {
			c.fail("sessions.inputIdleWarn", "must be shorter than sessions.inputIdleReclaim (%s)", ss.InputIdleReclaim)
		}
	}
	if !userNameRE.MatchString(cfg.Sessions.DefaultOwner) {
		c.fail("sessions.defaultOwner", "invalid user name %q", cfg.Sessions.DefaultOwner)
	}
	if d := cfg.Sessions.IdleReclaim; d != 0 {
		c.durRange("sessions.idleReclaim", d, time.Second, 24*time.Hour)
	}
	c.upstreamProxy(ss.Proxy, ss.ProxyCredentialsFile)

	v := cfg.Video
	c.enum("video.codec", v.Codec, "auto", "h264", "vp8")
	c.intRange("video.fps", v.FPS, 1, 60)
	c.intRange("video.idleFps", v.IdleFPS, 0, 10)
	if v.IdleFPS > v.FPS && v.FPS >= 1 {
		c.fail("video.idleFps", "%d is above video.fps (%d)", v.IdleFPS, v.FPS)
	}
	c.intRange("video.bitrateKbps", v.BitrateKbps, 100, 20000)
	c.durRange("video.keyframeInterval", v.KeyframeInterval, 500*time.Millisecond, 10*time.Second)
	c.enum("video.hardware", v.Hardware, "auto", "off", "vaapi", "nvenc")
	c.enum("video.capture", v.Capture, "auto", "tab", "cdp")
	if v.Capture == "tab" && cfg.Plugins.TabCapture == "" {
		c.fail("video.capture", "tab needs a tab-capture plugin (plugins.tabCapture is empty)")
	}

	if p := cfg.WebRTC.UDPPort; p != 0 && (p < 1024 || p > 65535) {
		c.fail("webrtc.udpPort", "out of range: %d not 0 or in [1024, 65535]", p)
	}
	for i, name := range cfg.WebRTC.Interfaces {
		if strings.TrimSpace(name) == "" || strings.ContainsAny(name, ", ") {
			c.fail(fmt.Sprintf("webrtc.interfaces[%d]", i), "invalid interface name %q", name)
		}
	}

	for i, a := range cfg.WebRTC.Advertise {
		if net.ParseIP(a) == nil {
			c.fail(fmt.Sprintf("webrtc.advertise[%d]", i), "not an IP address: %q", a)
		}
	}
	for i, s := range cfg.WebRTC.ViewerNetworks {
		key := fmt.Sprintf("webrtc.viewerNetworks[%d]", i)
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			c.fail(key, "not a CIDR prefix: %q (e.g. 10.20.0.0/16 or fd00:20::/48)", s)
			continue
		}
		if p.Addr().Is4In6() {
			c.fail(key, "write IPv4 ranges in IPv4 form: %q", s)
			continue
		}
		// These classes are refused whatever the list says (a viewer on the
		// box is recognized by its own address): naming one is a mistake.
		for _, d := range []struct{ prefix, class string }{
			{"127.0.0.0/8", "loopback"}, {"::1/128", "loopback"}, {"169.254.0.0/16", "link-local"}, {"fe80::/10", "link-local"},
			{"224.0.0.0/4", "multicast"}, {"ff00::/8", "multicast"}, {"0.0.0.0/8", "unspecified"}, {"::/128", "unspecified"},
			{"240.0.0.0/4", "reserved"},
		} {
			if dp := netip.MustParsePrefix(d.prefix); dp.Bits() <= p.Bits() && dp.Contains(p.Addr()) {
				c.fail(key, "%s is %s, which viewers' ICE candidates may never name", s, d.class)
				break
			}
		}
	}
	if cfg.WebRTC.TCP && cfg.WebRTC.UDPPort == 0 {
		c.fail("webrtc.tcp", "ICE over TCP shares webrtc.udpPort's number: set webrtc.udpPort")
	}
	tu := cfg.Turn
	c.name("turn.plugin", tu.Plugin)
	c.durRange("turn.credentialTTL", tu.CredentialTTL, time.Minute, 10*time.Minute)
	if tu.Enabled && cfg.WebRTC.UDPPort == 0 {
		c.fail("turn.enabled", "the relay forwards only to the appliance's own ICE port: set webrtc.udpPort")
	}
	if cfg.WebRTC.RelayOnly && !tu.Enabled {
		c.fail("webrtc.relayOnly", "needs the relay: set turn.enabled")
	}

	ag := cfg.Agent
	c.intRange("agent.cdpMaxConnections", ag.CDPMaxConnections, 1, 64)
	c.intRange("agent.cdpMaxMessageBytes", ag.CDPMaxMessageBytes, 1<<20, 64<<20)
	c.durRange("agent.cdpInputDeadline", ag.CDPInputDeadline, time.Second, 5*time.Minute)
	c.durRange("agent.cdpIdleTimeout", ag.CDPIdleTimeout, 10*time.Second, 24*time.Hour)

	in := cfg.Input
	for i, sc := range in.BlockedShortcuts {
		if strings.TrimSpace(sc) == "" || len(sc) > 64 {
			c.fail(fmt.Sprintf("input.blockedShortcuts[%d]", i), "invalid shortcut %q", sc)
		}
	}
	for i, sc := range in.AllowSchemes {
		if !schemeRE.MatchString(sc) {
			c.fail(fmt.Sprintf("input.allowSchemes[%d]", i), "invalid scheme %q", sc)
		}
	}
	for key, l := range map[string][]string{"input.allowHosts": in.AllowHosts, "input.denyHosts": in.DenyHosts, "input.allowLoopbackHosts": in.AllowLoopbackHosts} {
		for i, h := range l {
			if strings.TrimSpace(h) == "" || strings.ContainsAny(h, " /,") && !strings.Contains(h, "/") {
				c.fail(fmt.Sprintf("%s[%d]", key, i), "invalid host %q", h)
			}
		}
	}
	c.intRange("input.maxTextBytes", in.MaxTextBytes, 1, 16<<20)
	c.intRange("input.maxClipboardBytes", in.MaxClipboardBytes, 1, 16<<20)

	p := cfg.Plugins
	if p.Dir != "" && !filepath.IsAbs(p.Dir) {
		c.fail("plugins.dir", "must be an absolute path or empty, got %q", p.Dir)
	}
	c.name("plugins.capture", p.Capture)
	if p.TabCapture != "" {
		c.name("plugins.tabCapture", p.TabCapture)
	}
	c.name("plugins.encoder", p.Encoder)
	c.durRange("plugins.startTimeout", p.StartTimeout, time.Second, 2*time.Minute)
	c.durRange("plugins.pingInterval", p.PingInterval, 100*time.Millisecond, time.Minute)
	c.intRange("plugins.crashBudget", p.CrashBudget, 1, 100)
	c.durRange("plugins.crashWindow", p.CrashWindow, time.Second, time.Hour)
	for _, name := range sortedKeys(p.SHA256) {
		path := "plugins.sha256." + name
		c.name(path, name)
		if !hex64.MatchString(p.SHA256[name]) {
			c.fail(path, "invalid sha256 %q: want 64 hex digits", p.SHA256[name])
		} else {
			p.SHA256[name] = strings.ToLower(p.SHA256[name])
		}
	}
	for _, name := range sortedKeys(p.Config) {
		path := "plugins.config." + name
		c.name(path, name)
		// The subtree is handed to the plugin as JSON; catch what JSON cannot
		// carry (e.g. .inf, non-string keys in lists) now rather than at start.
		if _, err := json.Marshal(p.Config[name]); err != nil {
			c.fail(path, "cannot be passed to the plugin as JSON: %v", err)
		}
	}
	return c.errs
}

// listen accepts host:port with a numeric port and reports whether the
// host is a loopback one (an empty host means every interface).
func (c *checker) listen(path, v string) bool {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		c.fail(path, "invalid address %q: want host:port", v)
		return true
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		c.fail(path, "invalid port %q in %q: want 0..65535", port, v)
		return true
	}
	return IsLoopbackHost(host)
}

// IsLoopbackHost reports whether host (of a listen address) is loopback.
func IsLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *checker) startURL(path, v string) {
	if v == "" || v == "about:blank" || strings.HasPrefix(v, "data:") {
		return
	}
	u, err := url.Parse(v)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return
	}
	c.fail(path, "invalid URL %q: want http(s)://host/..., about:blank, data: or empty", v)
}

func (c *checker) extraFlag(path, f string) {
	if !strings.HasPrefix(f, "--") || len(f) == 2 {
		c.fail(path, "invalid Chromium flag %q: want --name or --name=value", f)
		return
	}
	name, _, _ := strings.Cut(f, "=")
	for _, core := range coreBrowserFlags {
		if strings.EqualFold(name, core) {
			c.fail(path, "%s is set by tabcast itself and cannot be overridden", name)
			return
		}
	}
}

// upstreamProxy checks sessions.proxy (no credentials in it: they belong in
// sessions.proxyCredentialsFile, which config print never shows) and its
// credentials file.
func (c *checker) upstreamProxy(raw, credFile string) {
	if credFile != "" && !filepath.IsAbs(credFile) {
		c.fail("sessions.proxyCredentialsFile", "must be an absolute path")
	}
	if raw == "" {
		if credFile != "" {
			c.fail("sessions.proxyCredentialsFile", "set without sessions.proxy")
		}
		return
	}
	u, err := url.Parse(raw)
	if err != nil {
		c.fail("sessions.proxy", "not a URL")
		return
	}
	if u.User != nil {
		c.fail("sessions.proxy", "credentials belong in sessions.proxyCredentialsFile, not in the URL")
		return
	}
	if _, err := egress.ParseUpstream(raw, ""); err != nil {
		c.fail("sessions.proxy", "%v", err)
	}
}
