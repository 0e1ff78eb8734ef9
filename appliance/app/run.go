// Package app is the Tabcast appliance's start: Run wires the plugins,
// Chromium, the sessions, the signaling, the agent API and the HTTP server
// in one linear sequence (run.go), and serves reloads (reload.go), the
// systemd watchdog (sdnotify.go), access and TLS (access.go) and the TURN
// relay (relay.go). The commands of the tabcast binary are package cli.
package app

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tabcast/tabcast/appliance/config"
	"github.com/tabcast/tabcast/appliance/web"
	"github.com/tabcast/tabcast/core/agent"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/cdpproxy"
	"github.com/tabcast/tabcast/core/certs"
	"github.com/tabcast/tabcast/core/egress"
	"github.com/tabcast/tabcast/core/httpapi"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/core/peer"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/signaling"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// NewLogger is the JSON logger at level; the level can change later (a
// config reload) through the returned LevelVar.
func NewLogger(w io.Writer, level string) (*slog.Logger, *slog.LevelVar) {
	lv := &slog.LevelVar{}
	setLevel(lv, level)
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lv})), lv
}

func setLevel(lv *slog.LevelVar, level string) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	lv.Set(l)
}

// PluginsDir is where plugin binaries live: the configured dir, or the
// directory of the running tabcast binary.
func PluginsDir(cfg *config.Config) (string, error) {
	if cfg.Plugins.Dir != "" {
		return filepath.Abs(cfg.Plugins.Dir)
	}
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("locate the tabcast binary: %w", err)
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		return "", fmt.Errorf("locate the tabcast binary: %w", err)
	}
	return filepath.Dir(exe), nil
}

// NewSupervisor is the plugin supervisor with the configured timings.
func NewSupervisor(cfg *config.Config, log *slog.Logger) *supervisor.Supervisor {
	return supervisor.New(supervisor.Options{
		Logger: log, StartTimeout: cfg.Plugins.StartTimeout, PingInterval: cfg.Plugins.PingInterval,
		CrashBudget: cfg.Plugins.CrashBudget, CrashWindow: cfg.Plugins.CrashWindow,
	})
}

// StartPlugin starts the plugin configured for role under sup: every
// plugin of run, doctor and access starts here.
func StartPlugin(ctx context.Context, sup *supervisor.Supervisor, cfg *config.Config, dir string, role plugins.Role) (*supervisor.Handle, error) {
	name := cfg.PluginIn(role)
	conf, err := pluginConfigFor(cfg, role)
	if err != nil {
		return nil, err
	}
	h, err := sup.Start(ctx, supervisor.Spec{
		Name: name, Kind: role.Kind, Path: filepath.Join(dir, name),
		SHA256: cfg.Plugins.SHA256[name], Config: conf,
	})
	if err != nil {
		return nil, fmt.Errorf("plugin %s (%s): %w", name, role.Kind, err)
	}
	return h, nil
}

// pluginConfigFor is what the plugin in role is given for cfg: its
// subtree, and for the relay what the appliance knows of itself too
// (relayConfig).
func pluginConfigFor(cfg *config.Config, role plugins.Role) ([]byte, error) {
	if role == plugins.RoleTurn {
		return relayConfig(cfg)
	}
	return cfg.PluginConfigJSON(cfg.PluginIn(role))
}

// inputPolicy is the configured input policy plus the appliance's own
// address, so that the built-in welcome page stays reachable.
func inputPolicy(cfg *config.Config, self string) input.Policy {
	p := input.DefaultPolicy()
	in := cfg.Input
	p.BlockedShortcuts = in.BlockedShortcuts
	p.AllowRightClick = in.AllowRightClick
	p.AllowSchemes = in.AllowSchemes
	p.AllowHosts = in.AllowHosts
	p.DenyHosts = in.DenyHosts
	p.DenyPrivate = in.DenyPrivate
	p.AllowLoopbackHosts = append(append([]string{}, in.AllowLoopbackHosts...), self)
	p.MaxText = in.MaxTextBytes
	p.MaxClipboard = in.MaxClipboardBytes
	return p
}

// appliance is everything `tabcast run` owns, in start order.
type appliance struct {
	log      *slog.Logger
	sup      *supervisor.Supervisor
	capture  *supervisor.Handle
	tab      *supervisor.Handle // tab capture; nil with video.capture cdp or when it would not start
	encoder  *supervisor.Handle
	browser  *browser.Browser
	peers    *peer.Factory
	sessions *session.Manager
	signal   *signaling.Handler
	probes   []encoder.Probe
	codecs   []string
	gate     *gate
	agents   *agent.Service
	relay    *supervisor.Handle // nil without turn.enabled
	egress   *egress.Proxy      // every session's egress proxy
	upstream *egress.Upstream   // sessions.proxy; nil = direct
	cfg      *config.Config     // what runs now; replaced by reloads (one at a time, on run's goroutine)
	rl       Options
	listing  atomic.Bool // a watchdog liveness check is listing sessions
	// pluginFlags are the capture plugins' Chromium flags at start
	// (relaunchOptions asks them again for a relaunch).
	pluginFlags []string
}

// Run starts the appliance with cfg and serves until ctx ends: every
// manager is started here, in order, and stopped in reverse (shutdown).
func Run(ctx context.Context, cfg *config.Config, log *slog.Logger, stdout io.Writer, rl Options) error {
	a := &appliance{log: log, cfg: cfg, rl: rl}
	defer a.shutdown()
	// From the start: a SIGHUP during start-up must not end the process
	// (its default); it is served once the appliance runs.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)

	dir, err := PluginsDir(cfg)
	if err != nil {
		return err
	}
	a.sup = NewSupervisor(cfg, log)
	if a.capture, err = StartPlugin(ctx, a.sup, cfg, dir, plugins.RoleCapture); err != nil {
		return err
	}
	if a.encoder, err = StartPlugin(ctx, a.sup, cfg, dir, plugins.RoleEncoder); err != nil {
		return err
	}
	if cfg.Video.Capture != session.CaptureCDP && cfg.Plugins.TabCapture != "" {
		a.tab, err = StartPlugin(ctx, a.sup, cfg, dir, plugins.RoleTabCapture)
		if err != nil {
			if cfg.Video.Capture == session.CaptureTab {
				return err
			}
			// auto: the screencast serves every session.
			log.Warn("tab capture plugin did not start; sessions use the CDP screencast", "err", err)
			a.tab = nil
		}
	}
	flags, probes, err := a.pluginFacts(ctx)
	if err != nil {
		return err
	}
	a.probes, a.codecs = probes, session.Codecs(probes)
	a.pluginFlags = append([]string{}, flags...) // relaunchOptions swaps them
	if len(a.codecs) == 0 {
		return errors.New("the encoder plugin can produce neither H.264 nor VP8; run `tabcast doctor`")
	}
	if a.gate, err = openGate(ctx, cfg, a.sup, dir, stdout, log); err != nil {
		return err
	}

	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (server.listen): %w", cfg.Server.Listen, err)
	}
	scheme := "http"
	if a.gate.tlsConf != nil {
		scheme = "https"
		// Sessions open the built-in welcome page from the appliance
		// itself: Chromium trusts exactly this certificate's key.
		flags = append(flags, "--ignore-certificate-errors-spki-list="+base64.StdEncoding.EncodeToString(a.gate.spki))
	}
	// self is how Chromium on this box reaches the panel (the welcome page).
	self := ln.Addr().(*net.TCPAddr)
	selfHost := self.IP.String()
	if self.IP.IsUnspecified() {
		selfHost = "127.0.0.1"
	}
	selfAddr := net.JoinHostPort(selfHost, strconv.Itoa(self.Port))
	base := scheme + "://" + selfAddr

	// The egress wall (core/egress): every session's browsing goes through
	// a loopback proxy of its own that decides on the address it connects
	// to, so that the policy holds for subresources, popups and redirects
	// and against DNS rebinding.
	if err := a.startEgress(cfg, selfAddr); err != nil {
		ln.Close()
		return err
	}

	bopts := browser.Options{
		Path: cfg.Browser.Path, Headless: cfg.Browser.Headless, NoSandbox: cfg.Browser.NoSandbox,
		ExtraFlags:   append(append([]string{}, cfg.Browser.ExtraFlags...), flags...),
		StartTimeout: cfg.Browser.StartTimeout, Logger: log.With("component", "browser"),
		Cgroup: cfg.Browser.Cgroup,
	}
	a.browser, err = browser.Launch(ctx, bopts)
	if err != nil {
		ln.Close()
		return fmt.Errorf("start chromium: %w", err)
	}

	if cfg.Turn.Enabled {
		if a.relay, err = StartPlugin(ctx, a.sup, cfg, dir, plugins.RoleTurn); err != nil {
			ln.Close()
			return err
		}
	}
	viewerNets, err := peer.ParseViewerNetworks(cfg.WebRTC.ViewerNetworks)
	if err != nil {
		ln.Close()
		return fmt.Errorf("webrtc.viewerNetworks: %w", err)
	}
	tm := newTelemetry()
	a.peers, err = peer.NewFactory(peer.Config{
		UDPPort: cfg.WebRTC.UDPPort, TCP: cfg.WebRTC.TCP, Interfaces: cfg.WebRTC.Interfaces,
		Advertise: cfg.WebRTC.Advertise, RelayOnly: cfg.WebRTC.RelayOnly, MaxBitrateKbps: cfg.Video.BitrateKbps,
		ViewerNetworks: viewerNets, Telemetry: tm,
		Logger: log.With("component", "peer"),
	})
	if err != nil {
		ln.Close()
		return fmt.Errorf("webrtc: %w", err)
	}
	a.sessions = session.NewManager(session.Config{
		Width: cfg.Browser.Width, Height: cfg.Browser.Height,
		MaxSessions: cfg.Sessions.Max, MaxViewers: cfg.Sessions.MaxViewers,
		Video:         sessionVideo(cfg.Video),
		Input:         inputPolicy(cfg, selfAddr),
		IdleReclaim:   cfg.Sessions.IdleReclaim,
		InputIdleWarn: cfg.Sessions.InputIdleWarn, InputIdleReclaim: cfg.Sessions.InputIdleReclaim,
		PopupsInBackground: cfg.Sessions.PopupsInBackground,
		Egress:             a.egress, Upstream: a.upstream,
		// After a Chromium crash the sessions move to a fresh one (and a
		// session of its own has one, with per-session isolation).
		Launch: func(ctx context.Context) (session.Browser, error) {
			return browser.Launch(ctx, a.relaunchOptions(ctx, bopts))
		},
		Isolation: cfg.Browser.Isolation,
		// Persistent profiles live in the data dir, one Chromium each.
		ProfileRoot: filepath.Join(cfg.Server.DataDir, "profiles"),
		LaunchProfile: func(ctx context.Context, dir, proxy string) (session.Browser, error) {
			o := a.relaunchOptions(ctx, bopts)
			o.ProfileDir, o.Proxy = dir, proxy
			return browser.Launch(ctx, o)
		},
		Logger:  log.With("component", "session"),
		Capture: cfg.Video.Capture, TabCapture: sessionPlugin[capture.Controllable](a.tab),
		Telemetry: tm,
	}, a.browser, sessionPlugin[capture.Capturer](a.capture), sessionPlugin[encoder.Encoder](a.encoder), a.codecs)
	if cfg.Video.Capture == session.CaptureAuto && a.tab != nil {
		a.sessions.ProbeTabCapture(ctx)
	}
	a.agents = agent.NewService(log.With("component", "agent"))
	a.agents.SetPolicy(agent.Policy{AllowEval: cfg.Agent.AllowEval})
	sopts := signaling.Options{Sessions: a.sessions, Peers: a.peers, RelayOnly: cfg.WebRTC.RelayOnly, Logger: log.With("component", "signaling"), Telemetry: tm}
	if a.relay != nil {
		sopts.ICEServers = iceServers(a.relay, cfg.Turn.CredentialTTL)
	}
	a.signal = signaling.NewHandler(sopts)
	// The session-scoped CDP endpoint's proxy: only when agent.cdp is on
	// (off, the HTTP side answers cdp_disabled without it).
	var cdp cdpproxy.Endpoint
	if cfg.Agent.CDP {
		cdp = cdpproxy.New(cdpproxy.Config{MaxConnections: cfg.Agent.CDPMaxConnections, Limits: cdpproxy.Limits{
			MaxMessageBytes: cfg.Agent.CDPMaxMessageBytes,
			IdleTimeout:     int(cfg.Agent.CDPIdleTimeout / time.Second),
			InputDeadline:   int(cfg.Agent.CDPInputDeadline / time.Second),
		}}, a.sessions, log, cdpproxy.Deps{Audit: a.gate.opts.Audit, Metrics: tm})
	}

	srv := &http.Server{
		Handler: httpapi.New(httpapi.Options{
			Sessions: a.sessions, Signal: a.signal, Panel: web.FS, Status: a.status, Ready: a.ready, Plugins: a.pluginMetrics,
			Auth: a.gate.opts, Agent: a.agents, Metrics: a.extraMetrics, Logger: log.With("component", "http"),
			Telemetry: tm, Processes: a.pluginProcesses,
			CDP: httpapi.CDPOptions{Enabled: cfg.Agent.CDP, Endpoint: cdp, MaxMessageBytes: cfg.Agent.CDPMaxMessageBytes},
		}),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		TLSConfig:         a.gate.tlsConf,
	}
	srvErr := make(chan error, 2)
	go func() {
		if srv.TLSConfig != nil {
			srvErr <- srv.ServeTLS(ln, "", "")
			return
		}
		srvErr <- srv.Serve(ln)
	}()
	var redirect *http.Server
	if cfg.Server.RedirectListen != "" && a.gate.tlsConf != nil {
		rln, err := net.Listen("tcp", cfg.Server.RedirectListen)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("listen on %s (server.redirectListen): %w", cfg.Server.RedirectListen, err)
		}
		redirect = &http.Server{Handler: redirector(a.gate.certNames, strconv.Itoa(self.Port)), ReadHeaderTimeout: 10 * time.Second,
			ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
		go func() { srvErr <- redirect.Serve(rln) }()
	}

	if cfg.Sessions.OpenDefault {
		start := cfg.Browser.StartURL
		if start == "" {
			start = base + "/welcome"
		}
		cctx, cancel := context.WithTimeout(ctx, cfg.Browser.StartTimeout)
		// Kept: a crash that ends it (its browser could not be brought
		// back in time) is followed by the same session as soon as a
		// browser runs, and so is a failed start.
		s, err := a.sessions.KeepDefault(cctx, session.CreateOptions{URL: start, KeepIdle: true, Owner: cfg.Sessions.DefaultOwner})
		cancel()
		if err != nil {
			log.Error("default session failed; retrying", "err", err)
		} else {
			log.Info("default session ready", "session", s.ID())
		}
	}
	// systemd (Type=notify): started; its watchdog is fed while the HTTP
	// server and the session manager answer.
	notify := newNotifier()
	if err := notify.send("READY=1"); err != nil {
		log.Warn("systemd notify", "err", err)
	}
	wctx, stopWatchdog := context.WithCancel(ctx)
	watchdogDone := make(chan struct{})
	go func() {
		defer close(watchdogDone)
		// The gate's TLS config, not srv.TLSConfig: Serve sets the latter
		// (HTTP/2 set-up) on a plain HTTP server too.
		watchdog(wctx, notify, watchdogEvery(), a.liveness(ln.Addr(), a.gate.tlsConf != nil), log)
	}()
	defer func() {
		stopWatchdog()
		<-watchdogDone
	}()
	fmt.Fprintf(stdout, "Tabcast is running. Open the panel: %s/\n", base)
	if self.IP.IsUnspecified() {
		for _, h := range certs.Hosts() {
			if ip := net.ParseIP(h); ip != nil && !ip.IsLoopback() {
				fmt.Fprintf(stdout, "  on the LAN: %s://%s/\n", scheme, net.JoinHostPort(h, strconv.Itoa(self.Port)))
			}
		}
	}

wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down")
			break wait
		case err := <-srvErr:
			return fmt.Errorf("http server: %w", err)
		case <-hup:
			_ = notify.send("RELOADING=1")
			a.reload(ctx)
			_ = notify.send("READY=1")
		}
	}
	_ = notify.send("STOPPING=1")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if redirect != nil {
		_ = redirect.Shutdown(sctx)
	}
	return nil
}

// pluginFacts asks the plugins for what the core needs before launching
// Chromium: the capture plugin's Chromium flags and the encoder's probes.
func (a *appliance) pluginFacts(ctx context.Context) ([]string, []encoder.Probe, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var flags []string
	for _, h := range []*supervisor.Handle{a.capture, a.tab} {
		if h == nil {
			continue
		}
		c, _, err := supervisor.Dispense[capture.Capturer](h).Get(cctx)
		if err != nil {
			return nil, nil, fmt.Errorf("capture plugin %s: %w", h.Status().Name, err)
		}
		f, err := c.ChromiumFlags(cctx)
		if err != nil {
			return nil, nil, fmt.Errorf("capture plugin %s flags: %w", h.Status().Name, err)
		}
		flags = append(flags, f...)
	}
	enc, _, err := supervisor.Dispense[encoder.Encoder](a.encoder).Get(cctx)
	if err != nil {
		return nil, nil, fmt.Errorf("encoder plugin: %w", err)
	}
	probes, err := enc.Capabilities(cctx)
	if err != nil {
		return nil, nil, fmt.Errorf("encoder plugin capabilities: %w", err)
	}
	return flags, probes, nil
}

// ready reports whether new sessions can be served: not while no browser
// runs (from a Chromium crash until its relaunch, which follows at once).
func (a *appliance) ready() error {
	if !a.sessions.BrowserUp() {
		return errors.New("no browser runs")
	}
	hs := []*supervisor.Handle{a.capture, a.encoder}
	for _, h := range []*supervisor.Handle{a.gate.plugin, a.relay} {
		if h != nil {
			hs = append(hs, h)
		}
	}
	for _, h := range hs {
		if st := h.Status(); st.State != supervisor.StateRunning {
			return fmt.Errorf("plugin %s is %s", st.Name, st.State)
		}
	}
	return nil
}

func (a *appliance) status() any {
	plugs := []supervisor.Status{}
	for _, h := range a.sup.Handles() {
		plugs = append(plugs, h.Status())
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	return map[string]any{
		"version": a.rl.Version, "browser": a.browser.Version(), "plugins": plugs,
		"codecs": a.codecs, "encoderProbes": a.probes, "capture": a.sessions.CaptureStatus(),
		// For operators and the leak tests: these must not grow with use.
		"process": map[string]any{"goroutines": runtime.NumGoroutine(), "openFiles": len(fds)},
	}
}

// extraMetrics are samples from the relay, if it runs.
func (a *appliance) extraMetrics(ctx context.Context) []httpapi.Metric {
	var out []httpapi.Metric
	if a.egress != nil {
		st := a.egress.Stats()
		out = append(out,
			httpapi.Metric{Name: "tabcast_egress_connections_total", Type: "counter", Help: "Connections of the sessions' browsers the egress policy allowed.", Value: float64(st.Allowed)},
			httpapi.Metric{Name: "tabcast_egress_refused_total", Type: "counter", Help: "Connections of the sessions' browsers the egress policy refused (by the address they would reach).", Value: float64(st.Refused)})
	}
	if a.relay == nil {
		return out
	}
	return append(out, relayMetrics(a.relay)(ctx)...)
}

// startEgress starts the sessions' egress proxy with the input policy
// (the same rules a navigation meets, here applied to the address) and
// the appliance's upstream proxy.
func (a *appliance) startEgress(cfg *config.Config, selfAddr string) error {
	dp, err := inputPolicy(cfg, selfAddr).DialPolicy()
	if err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	if cfg.Sessions.Proxy != "" {
		if a.upstream, err = egress.ParseUpstream(cfg.Sessions.Proxy, cfg.Sessions.ProxyCredentialsFile); err != nil {
			return fmt.Errorf("sessions.proxy: %w", err)
		}
	}
	a.egress, err = egress.New(egress.Options{Decider: dp, Logger: a.log.With("component", "egress")})
	return err
}

func (a *appliance) pluginMetrics() []httpapi.PluginMetric {
	var out []httpapi.PluginMetric
	for _, h := range a.sup.Handles() {
		st := h.Status()
		out = append(out, httpapi.PluginMetric{Name: st.Name, State: st.State, Generation: st.Generation, Restarts: st.Restarts})
	}
	return out
}

// shutdown stops what was started, in reverse order; each step tolerates
// the ones before it never having run.
func (a *appliance) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if a.signal != nil {
		a.signal.Close()
	}
	if a.agents != nil {
		a.agents.Close()
	}
	if a.sessions != nil {
		a.sessions.Shutdown(ctx)
	}
	if a.peers != nil {
		_ = a.peers.Close()
	}
	if a.browser != nil {
		_ = a.browser.Close()
	}
	if a.egress != nil {
		_ = a.egress.Close()
	}
	if a.sup != nil {
		_ = a.sup.Shutdown(ctx)
	}
	a.gate.close()
}

// sessionPlugin is h typed as contract T for the session manager; a nil
// handle (a plugin not configured) stays a nil interface.
func sessionPlugin[T any](h *supervisor.Handle) session.Plugin[T] {
	if h == nil {
		return nil
	}
	return supervisor.Dispense[T](h)
}

// sessionVideo is the encode targets the session manager takes from config,
// at start and on reload.
func sessionVideo(v config.Video) session.Video {
	return session.Video{
		Codec: v.Codec, FPS: v.FPS, IdleFPS: v.IdleFPS, BitrateKbps: v.BitrateKbps,
		KeyframeInterval: v.KeyframeInterval, Hardware: v.Hardware,
	}
}
