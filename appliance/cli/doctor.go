package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"github.com/tabcast/tabcast/appliance/app"
	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/certs"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// check is one line of `tabcast doctor`.
type check struct {
	Name   string `json:"check"`
	Status string `json:"status"` // ok, warn (informational) or fail
	Detail string `json:"detail"`
	Hint   string `json:"hint,omitempty"`
}

func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	cfg, _, err := loadConfig("doctor", args, stderr, func(fs *pflag.FlagSet) {
		fs.BoolVar(&asJSON, "json", false, "print the checks as JSON")
	})
	var checks []check
	if err != nil {
		checks = append(checks, check{Name: "config", Status: "fail", Detail: err.Error(), Hint: "fix the named keys; `tabcast config check` validates"})
	} else {
		checks = append(checks, check{Name: "config", Status: "ok", Detail: "valid"})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		checks = append(checks, doctor(ctx, cfg, stderr)...)
		cancel()
	}
	failed := false
	for _, c := range checks {
		failed = failed || c.Status == "fail"
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(map[string]any{"ok": !failed, "checks": checks})
	} else {
		for _, c := range checks {
			line := fmt.Sprintf("%-4s %s: %s", map[string]string{"ok": "ok", "warn": "info", "fail": "FAIL"}[c.Status], c.Name, c.Detail)
			if c.Hint != "" && c.Status != "ok" {
				line += "\n       hint: " + c.Hint
			}
			fmt.Fprintln(stdout, line)
		}
	}
	if failed {
		return 1
	}
	return 0
}

func doctor(ctx context.Context, cfg *config.Config, stderr io.Writer) []check {
	var out []check
	if v, err := browser.Probe(ctx, cfg.Browser.Path); err != nil {
		out = append(out, check{Name: "chromium", Status: "fail", Detail: err.Error(), Hint: "install Debian's chromium (make deps) or set browser.path"})
	} else {
		out = append(out, check{Name: "chromium", Status: "ok", Detail: v + " at " + cfg.Browser.Path})
	}

	out = append(out, portChecks(cfg)...)

	dir, err := app.PluginsDir(cfg)
	if err != nil {
		return append(out, check{Name: "plugins", Status: "fail", Detail: err.Error(), Hint: "set plugins.dir"})
	}
	// Plugin logs would interleave with the report: keep them for failures only.
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	sup := app.NewSupervisor(cfg, log)
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = sup.Shutdown(sctx)
		cancel()
	}()
	for _, role := range []plugins.Role{plugins.RoleCapture, plugins.RoleEncoder} {
		name := cfg.PluginIn(role)
		h, err := app.StartPlugin(ctx, sup, cfg, dir, role)
		if err != nil {
			out = append(out, check{Name: "plugin " + name, Status: "fail", Detail: err.Error(),
				Hint: "build the plugins (make build) or check plugins.dir, plugins.sha256 and plugins.config." + name})
			continue
		}
		out = append(out, pluginCheck(ctx, h, filepath.Join(dir, name)))
		if role == plugins.RoleEncoder {
			out = append(out, encoderChecks(ctx, h)...)
		}
	}
	out = append(out, tabCaptureCheck(ctx, cfg, sup, dir))
	out = append(out, authChecks(ctx, cfg, sup, dir)...)
	out = append(out, turnChecks(ctx, cfg, sup, dir)...)
	return append(out, tlsCheck(cfg))
}

// authChecks: the auth plugin answers, and the agent CLI has its token. A
// users file that does not exist yet is left alone: starting the plugin
// would create the first admin, whose one-time password only `tabcast run`
// shows.
func authChecks(ctx context.Context, cfg *config.Config, sup *supervisor.Supervisor, dir string) []check {
	if cfg.Auth.Mode == "none" {
		return []check{{Name: "auth", Status: "warn", Detail: "off (auth.mode none): everyone who reaches " + cfg.Server.Listen + " is admin"}}
	}
	var out []check
	usersFile, _ := cfg.Plugins.Config[cfg.Auth.Plugin]["usersFile"].(string)
	if _, err := os.Stat(usersFile); usersFile != "" && err != nil {
		out = append(out, check{Name: "plugin " + cfg.Auth.Plugin, Status: "warn", Detail: "no users file yet (" + usersFile + "): the first `tabcast run` creates admin and prints a one-time password"})
	} else if h, err := app.StartPlugin(ctx, sup, cfg, dir, plugins.RoleAuth); err != nil {
		out = append(out, check{Name: "plugin " + cfg.Auth.Plugin, Status: "fail", Detail: err.Error(), Hint: "check plugins.config." + cfg.Auth.Plugin})
	} else {
		out = append(out, pluginCheck(ctx, h, filepath.Join(dir, cfg.Auth.Plugin)))
	}
	file := app.AgentTokenFile(cfg)
	switch st, err := os.Stat(file); {
	case err != nil:
		out = append(out, check{Name: "agent token", Status: "warn", Detail: "not created yet (" + file + "); `tabcast run` writes it"})
	case st.Mode().Perm()&0o077 != 0:
		out = append(out, check{Name: "agent token", Status: "fail", Detail: fmt.Sprintf("%s has mode %v", file, st.Mode().Perm()), Hint: "chmod 600 " + file})
	default:
		out = append(out, check{Name: "agent token", Status: "ok", Detail: file + " (mode 0600)"})
	}
	return out
}

// tlsCheck shows the certificate browsers will be asked to trust.
func tlsCheck(cfg *config.Config) check {
	if !app.TLSWanted(cfg) {
		return check{Name: "tls", Status: "warn", Detail: "off: plain HTTP on " + cfg.Server.Listen + " (loopback only)"}
	}
	certFile, keyFile := cfg.Server.CertFile, cfg.Server.KeyFile
	if certFile == "" {
		certFile, keyFile = filepath.Join(cfg.Server.DataDir, "tls-cert.pem"), filepath.Join(cfg.Server.DataDir, "tls-key.pem")
		if _, err := os.Stat(certFile); err != nil {
			return check{Name: "tls", Status: "warn", Detail: "no certificate yet: `tabcast run` generates a self-signed one in " + cfg.Server.DataDir}
		}
	}
	r, err := certs.NewReloader(certFile, keyFile)
	if err != nil {
		return check{Name: "tls", Status: "fail", Detail: err.Error(), Hint: "fix server.certFile/keyFile, or delete the generated pair to make a new one"}
	}
	leaf := r.Leaf()
	return check{Name: "tls", Status: "ok", Detail: fmt.Sprintf("%s valid until %s, SHA-256 fingerprint %s",
		certFile, leaf.NotAfter.Format("2006-01-02"), certs.Fingerprint(leaf.Raw))}
}

func pluginCheck(ctx context.Context, h *supervisor.Handle, path string) check {
	name := "plugin " + h.Name()
	p, _, err := supervisor.Dispense[base.Plugin](h).Get(ctx)
	if err != nil {
		return check{Name: name, Status: "fail", Detail: err.Error(), Hint: "see `tabcast run` logs for the plugin's stderr"}
	}
	start := time.Now()
	if err := p.Ping(ctx); err != nil {
		return check{Name: name, Status: "fail", Detail: "does not answer: " + err.Error()}
	}
	st := h.Status()
	return check{Name: name, Status: "ok", Detail: fmt.Sprintf("%s %s, API v%d, answers in %s (%s)",
		st.Info.Name, st.Info.Version, st.APIVersion, time.Since(start).Round(time.Microsecond), path)}
}

func encoderChecks(ctx context.Context, h *supervisor.Handle) []check {
	enc, _, err := supervisor.Dispense[encoder.Encoder](h).Get(ctx)
	if err != nil {
		return nil
	}
	probes, err := enc.Capabilities(ctx)
	if err != nil {
		return []check{{Name: "encoders", Status: "fail", Detail: err.Error()}}
	}
	var out []check
	for _, p := range probes {
		c := check{Name: "encoder " + p.Encoder, Status: "ok", Detail: fmt.Sprintf("%s opens and encodes (%s)", p.Codec, p.Duration)}
		if !p.OK {
			c.Status, c.Detail = "fail", "unavailable: "+p.Error
			if p.Hardware {
				// No GPU is a normal machine: software takes over.
				c.Status = "warn"
				c.Hint = "hardware encoding needs /dev/dri (VAAPI) or an NVIDIA driver; software encoding is used"
			} else {
				c.Hint = "install Debian's FFmpeg libraries (make deps)"
			}
		}
		out = append(out, c)
	}
	codecs := session.Codecs(probes)
	if len(codecs) == 0 {
		out = append(out, check{Name: "codecs", Status: "fail", Detail: "no encoder for H.264 or VP8 opens", Hint: "install Debian's FFmpeg libraries (make deps)"})
	} else {
		out = append(out, check{Name: "codecs", Status: "ok", Detail: fmt.Sprint(codecs)})
	}
	return out
}

func portChecks(cfg *config.Config) []check {
	var out []check
	host, port, err := net.SplitHostPort(cfg.Server.Listen)
	if err == nil && port != "0" {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, port))
		if err != nil {
			out = append(out, check{Name: "port " + cfg.Server.Listen, Status: "fail", Detail: err.Error(), Hint: "another program (or a running tabcast) holds it; change server.listen"})
		} else {
			ln.Close()
			out = append(out, check{Name: "port " + cfg.Server.Listen, Status: "ok", Detail: "free"})
		}
	}
	if p := cfg.WebRTC.UDPPort; p > 0 {
		addr := ":" + strconv.Itoa(p)
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			out = append(out, check{Name: "udp port " + strconv.Itoa(p), Status: "fail", Detail: err.Error(), Hint: "change webrtc.udpPort"})
		} else {
			c.Close()
			out = append(out, check{Name: "udp port " + strconv.Itoa(p), Status: "ok", Detail: "free"})
		}
	}
	return out
}

// tabCaptureCheck runs the same tab-capture probe as `tabcast run` (a real
// capture of a probe tab in a Chromium started with the plugin's flags) and
// says which capture path sessions will use.
func tabCaptureCheck(ctx context.Context, cfg *config.Config, sup *supervisor.Supervisor, dir string) check {
	c := check{Name: "tab capture"}
	if cfg.Video.Capture == session.CaptureCDP || cfg.Plugins.TabCapture == "" {
		c.Status, c.Detail = "ok", "off (video.capture "+cfg.Video.Capture+", plugins.tabCapture "+strconv.Quote(cfg.Plugins.TabCapture)+"): sessions use the CDP screencast"
		return c
	}
	h, err := app.StartPlugin(ctx, sup, cfg, dir, plugins.RoleTabCapture)
	if err != nil {
		c.Status, c.Detail, c.Hint = "warn", err.Error(), "build the plugins (make build) or set video.capture cdp"
		return c
	}
	tab := supervisor.Dispense[capture.Controllable](h)
	tc, _, err := tab.Get(ctx)
	var flags []string
	if err == nil {
		flags, err = tc.ChromiumFlags(ctx)
	}
	if err != nil {
		c.Status, c.Detail = "warn", "plugin flags: "+err.Error()
		return c
	}
	bctx, cancel := context.WithTimeout(ctx, cfg.Browser.StartTimeout)
	defer cancel()
	b, err := browser.Launch(bctx, browser.Options{Path: cfg.Browser.Path, Headless: cfg.Browser.Headless, NoSandbox: cfg.Browser.NoSandbox,
		ExtraFlags: append(append([]string{}, cfg.Browser.ExtraFlags...), flags...), StartTimeout: cfg.Browser.StartTimeout})
	if err != nil {
		c.Status, c.Detail = "fail", "start chromium with the extension: "+err.Error()
		return c
	}
	defer b.Close()
	m := session.NewManager(session.Config{Capture: cfg.Video.Capture, TabCapture: tab, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))}, b, nil, nil, nil)
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		m.Shutdown(sctx)
		scancel()
	}()
	res := m.ProbeTabCapture(ctx)
	if res.OK {
		c.Status, c.Detail = "ok", fmt.Sprintf("works: first frame after %s; sessions capture their tab (VP8 from the browser, no re-encode)", res.FirstFrame.Round(time.Millisecond))
		return c
	}
	c.Status, c.Detail = "warn", "unavailable ("+res.Reason+"): sessions use the CDP screencast"
	c.Hint = "see `tabcast run` logs (capture-tab); set video.capture cdp to skip the probe"
	return c
}
