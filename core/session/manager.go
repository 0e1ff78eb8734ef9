package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/egress"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/core/telemetry"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// Plugin is what sessions need from a supervised plugin serving contract T
// (the appliance passes a *supervisor.Client[T]).
type Plugin[T any] interface {
	// Get returns the plugin's client and its generation, waiting while
	// the plugin restarts.
	Get(ctx context.Context) (T, uint64, error)
	// Call runs fn with the plugin's client; an error of fn that says the
	// plugin is broken is reported to the supervisor, which restarts the
	// plugin once per generation.
	Call(ctx context.Context, fn func(T) error) error
	// Report is Call's report for a client used beyond one call (an
	// encoder stream): err, from a call on generation gen, restarts the
	// plugin when it says the plugin is broken.
	Report(gen uint64, err error)
}

// Browser is what sessions need from the running Chromium.
type Browser interface {
	WSURL() string // for the capture plugins, which connect themselves
	// Conn is the browser's shared DevTools connection (agents).
	Conn(ctx context.Context) (*browser.BrowserConn, error)
	// DialConn is a DevTools connection of the caller's own (a CDP
	// proxy's client, core/cdpproxy).
	DialConn(ctx context.Context) (*browser.BrowserConn, error)
	NewPage(ctx context.Context, o browser.PageOptions) (*browser.Page, error)
	// AttachPage, NewTab, CloseTarget and WatchPages serve a session's
	// other tabs (pages.go).
	AttachPage(ctx context.Context, targetID string, o browser.PageOptions) (*browser.Page, error)
	NewTab(ctx context.Context, browserContextID string, o browser.PageOptions) (*browser.Page, error)
	CloseTarget(ctx context.Context, targetID string) error
	WatchPages(ctx context.Context, fn func(browser.TargetEvent)) (stop func(), err error)
	Done() <-chan struct{}
	// Close stops the browser; the manager calls it only on browsers it
	// launched itself (Config.Launch), the caller closes the one it passed.
	Close() error
}

// Config bounds the sessions.
type Config struct {
	Width, Height int
	MaxSessions   int
	MaxViewers    int
	Video         Video
	// Input is the policy every producer's actions obey.
	Input  input.Policy
	Logger *slog.Logger
	// IdleReclaim closes a ready session that had no viewer and no producer
	// for this long (terminal reason idle_reclaimed). 0 = never.
	IdleReclaim time.Duration
	// TerminalTTL is how long a closed or failed session stays listed with
	// its terminal snapshot; 0 means DefaultTerminalTTL.
	TerminalTTL time.Duration
	// Launch starts a new Chromium after the current one died, on the next
	// Create. nil = no relaunch (Create then answers ErrUnavailable).
	// Browsers it returns are owned (and closed) by the Manager.
	Launch func(ctx context.Context) (Browser, error)
	// DownloadRoot holds each session's own download directory (made at
	// create, removed at close); "" = the system temp dir.
	DownloadRoot string
	// InputIdleWarn and InputIdleReclaim apply to watched sessions: with
	// no input from anyone for InputIdleWarn the session warns its viewers
	// (snapshot reclaimAt, state event idle_warning), and for
	// InputIdleReclaim it closes (idle_reclaimed). 0 = never.
	InputIdleWarn, InputIdleReclaim time.Duration
	// ProfileRoot holds persistent profiles, <owner>/<name>; LaunchProfile
	// starts a Chromium of its own on one (owned by its session). Without
	// them, persistent sessions are refused.
	ProfileRoot   string
	LaunchProfile func(ctx context.Context, dir, proxy string) (Browser, error)
	// Capture is CaptureAuto, CaptureTab or CaptureCDP ("" = cdp). Tab
	// capture needs TabCapture, the capture-tab plugin; auto uses it only
	// after ProbeTabCapture succeeded.
	Capture    string
	TabCapture Plugin[capture.Controllable]
	// Telemetry counts session creations and input events; nil = none.
	Telemetry *telemetry.Metrics
	// PopupsInBackground leaves the pages a session's current tab opens
	// (window.open, target=_blank) in the background, listed by the agent's
	// tabs; by default the session follows them, as a person clicking a
	// target=_blank link expects.
	PopupsInBackground bool
	// Egress gives each session's browser context its egress proxy; nil =
	// none (Chromium connects directly: tests of the session alone).
	Egress Egress
	// Upstream is the appliance's upstream proxy for every session without
	// one of its own; nil = direct.
	Upstream *egress.Upstream
	// Isolation is IsolationShared ("" too) or IsolationPerSession: a
	// Chromium of its own for every session (started with Launch).
	Isolation string
}

// DefaultTerminalTTL is how long terminal snapshots stay readable.
const DefaultTerminalTTL = 5 * time.Minute

// CreateOptions for one session; zero values take the configured defaults.
type CreateOptions struct {
	URL           string
	Width, Height int
	// KeepIdle exempts the session from idle reclaim: the appliance's
	// default session stays open for whoever opens the panel next.
	KeepIdle bool
	// Control is the control policy: ControlShared (default) or
	// ControlExclusive.
	Control string
	// Profile names a persistent profile of the owner (cookies and storage
	// kept across sessions and restarts); "" = ephemeral (the default).
	Profile string
	// Owner is the user the session belongs to (core/access decides what
	// that allows); "" for an appliance without users.
	Owner string
	// Proxy is the session's own upstream proxy (http:// or socks5://,
	// credentials in the URL), chained behind the policy check; "" = the
	// appliance's (Config.Upstream), if any.
	Proxy string

	// id, when set, is the session's id: the kept default session comes
	// back under its old one (recover.go).
	id string
}

// Manager owns every session.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	capture Plugin[capture.Capturer]     // the CDP screencast, also the fallback of tab capture
	tab     Plugin[capture.Controllable] // tab capture; nil when not configured
	encoder Plugin[encoder.Encoder]
	codecs  []string

	vid atomic.Pointer[Video] // the encode targets; SetVideo replaces them

	probeMu      sync.Mutex
	probe        TabProbe
	tabFallbacks atomic.Uint64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// bmu serializes relaunches: concurrent Creates wait for one launch.
	bmu     sync.Mutex
	browser Browser   // current; guarded by bmu
	owned   []Browser // launched by us, closed in Shutdown; guarded by bmu

	mu       sync.Mutex
	sessions map[string]*Session
	order    []string
	profiles map[string]bool // persistent profiles open now

	rec managerRecovery // crash containment and the kept default session (recover.go)
}

// NewManager returns a manager. codecs are the codecs the encoder plugin
// really produces (see Codecs), narrowed by cfg.Video.Codec.
func NewManager(cfg Config, b Browser, capturePlugin Plugin[capture.Capturer], encoderPlugin Plugin[encoder.Encoder], codecs []string) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TerminalTTL <= 0 {
		cfg.TerminalTTL = DefaultTerminalTTL
	}
	if cfg.Video.Codec != "" && cfg.Video.Codec != "auto" {
		codecs = slices.DeleteFunc(slices.Clone(codecs), func(c string) bool { return c != cfg.Video.Codec })
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, log: cfg.Logger, browser: b, capture: capturePlugin, tab: cfg.TabCapture, encoder: encoderPlugin,
		codecs: codecs, ctx: ctx, cancel: cancel, sessions: map[string]*Session{}, profiles: map[string]bool{},
	}
	v := cfg.Video
	m.vid.Store(&v)
	m.rec.init(b)
	m.wg.Add(3)
	go m.watchBrowser(b)
	go m.janitor()
	go m.tend()
	return m
}

// video is the current encode targets.
func (m *Manager) video() Video { return *m.vid.Load() }

// SetVideo changes the encode targets (a config reload): every running
// pipeline's bitrate target follows at once (its encoder moves there like
// on a bandwidth change), frame rate, keyframe interval and hardware apply
// whenever an encoder opens next (a new viewer's codec, a resolution step,
// a restart). The codec set stays as it was at start.
func (m *Manager) SetVideo(v Video) {
	v.Codec = m.video().Codec
	m.vid.Store(&v)
	for _, s := range m.live() {
		s.mu.Lock()
		pipes := make([]*codecPipe, 0, len(s.pipes))
		for _, p := range s.pipes {
			pipes = append(pipes, p)
		}
		s.mu.Unlock()
		for _, p := range pipes {
			p.Retarget()
		}
	}
}

// Codecs derives the usable codecs from the encoder's probes: a codec is
// usable when some encoder for it opened for real.
func Codecs(probes []encoder.Probe) []string {
	var out []string
	for _, c := range []string{encoder.CodecH264, encoder.CodecVP8} {
		for _, p := range probes {
			if p.Codec == c && p.OK {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

func (m *Manager) hasCodec(c string) bool { return slices.Contains(m.codecs, c) }

// watchBrowser brings back every live session of b when b dies: a new
// page each in a relaunched browser, or a terminal state at once when
// none can be had (recover.go).
func (m *Manager) watchBrowser(b Browser) {
	defer m.wg.Done()
	select {
	case <-m.ctx.Done():
		return
	case <-gone(b):
	}
	m.browserDown(b)
}

// currentBrowser returns the running shared browser, relaunching a dead
// one when Config.Launch allows it.
func (m *Manager) currentBrowser(ctx context.Context) (Browser, error) {
	m.bmu.Lock()
	defer m.bmu.Unlock()
	return m.ensureBrowserLocked(ctx)
}

// Browser returns the current browser (possibly dead until the next
// Create relaunches it).
func (m *Manager) Browser() Browser {
	m.bmu.Lock()
	defer m.bmu.Unlock()
	return m.browser
}

// janitor removes terminal sessions once their snapshot is older than
// Config.TerminalTTL.
func (m *Manager) janitor() {
	defer m.wg.Done()
	ttl := m.cfg.TerminalTTL
	t := time.NewTicker(min(max(ttl/4, 10*time.Millisecond), 30*time.Second))
	defer t.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-t.C:
			for _, s := range m.live() {
				s.mu.Lock()
				ended := s.ended
				s.mu.Unlock()
				if !ended.IsZero() && now.Sub(ended) >= ttl {
					m.remove(s.id)
				}
			}
		}
	}
}

func (m *Manager) live() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*Session, 0, len(m.sessions))
	for _, id := range m.order {
		out = append(out, m.sessions[id])
	}
	return out
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Create opens a new isolated page and returns its session once ready.
func (m *Manager) Create(ctx context.Context, o CreateOptions) (*Session, error) {
	s, err := m.create(ctx, o)
	mode, result := m.captureModeForNew(), "ok"
	switch {
	case s != nil:
		mode, _ = s.captureMode()
	case errors.Is(err, ErrCapacity):
		result = "capacity"
	case errors.Is(err, ErrUnavailable):
		result = "unavailable"
	default:
		result = "error"
	}
	m.cfg.Telemetry.SessionCreated(result, mode)
	return s, err
}

// DispatchStats are the input dispatchers' snapshots of the live sessions.
func (m *Manager) DispatchStats() []dispatch.Stats {
	var out []dispatch.Stats
	for _, s := range m.live() {
		s.mu.Lock()
		d := s.disp
		s.mu.Unlock()
		if d != nil {
			out = append(out, d.Stats())
		}
	}
	return out
}

func (m *Manager) create(ctx context.Context, o CreateOptions) (*Session, error) {
	if o.Width == 0 {
		o.Width = m.cfg.Width
	}
	if o.Height == 0 {
		o.Height = m.cfg.Height
	}
	id := o.id
	if id == "" {
		id = newID()
	}
	sctx, cancel := context.WithCancel(m.ctx)
	s := &Session{
		done: make(chan struct{}),
		id:   id, m: m, log: m.log.With("session", id), width: o.Width, height: o.Height,
		created: time.Now(), ctx: sctx, cancel: cancel, state: StateStarting, url: o.URL,
		pipes: map[string]*codecPipe{}, owner: o.Owner,
		capMode: m.captureModeForNew(), capModeCh: make(chan struct{}),
	}
	s.ho.init(o.Control)
	s.lastInput.Store(time.Now().UnixNano())
	m.mu.Lock()
	if m.ctx.Err() != nil { // shutting down: Shutdown will not see this session
		m.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("%w: shutting down", ErrUnavailable)
	}
	n := 0
	for _, x := range m.sessions {
		if st := x.Status().State; st == StateStarting || st == StateReady || st == StateRecovering {
			n++
		}
	}
	if n >= m.cfg.MaxSessions {
		m.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("%w: %d sessions", ErrCapacity, n)
	}
	m.sessions[id] = s
	m.order = append(m.order, id)
	m.mu.Unlock()

	var (
		b   Browser
		err error
	)
	eg, err := m.openEgress(ctx, id, o)
	if err != nil {
		cancel()
		m.remove(id)
		return nil, err
	}
	s.mu.Lock()
	s.egress = eg
	s.mu.Unlock()
	switch {
	case o.Profile != "":
		b, err = m.profileBrowser(ctx, s, o.Owner, o.Profile, egressServer(eg))
	case m.cfg.Isolation == IsolationPerSession:
		b, err = m.isolatedBrowser(ctx, s)
	default:
		b, err = m.currentBrowser(ctx)
	}
	if err != nil {
		cancel()
		m.remove(id)
		s.closeEgress()
		return nil, err
	}
	s.mu.Lock()
	s.browser = b
	s.mu.Unlock()
	dl, err := os.MkdirTemp(m.cfg.DownloadRoot, "tabcast-downloads-"+id+"-")
	if err != nil {
		cancel()
		m.remove(id)
		s.closeOwnBrowser()
		s.closeEgress()
		return nil, fmt.Errorf("%w: download dir: %v", ErrUnavailable, err)
	}
	s.downloads = dl
	page, err := b.NewPage(ctx, browser.PageOptions{Width: o.Width, Height: o.Height, URL: o.URL, DownloadDir: dl, DefaultContext: o.Profile != "", Proxy: egressServer(eg)})
	if err != nil {
		cancel()
		m.remove(id)
		_ = os.RemoveAll(dl)
		s.closeOwnBrowser()
		s.closeEgress()
		return nil, fmt.Errorf("%w: new page: %v", ErrUnavailable, err)
	}
	// The first tab is current from the start, so its first page state
	// reaches the viewers.
	first := &tab{id: page.TargetID(), page: page, opened: 1, used: 1}
	first.vetted.Store(true)
	s.mu.Lock()
	s.cur, s.tabSeq = first, 1
	s.mu.Unlock()
	exec, err := s.newTabExec(first)
	if err != nil {
		cancel()
		_ = page.Close(ctx)
		m.remove(id)
		_ = os.RemoveAll(dl)
		s.closeOwnBrowser()
		s.closeEgress()
		return nil, fmt.Errorf("%w: input: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	if s.state != StateStarting || sctx.Err() != nil {
		// Failed (browser crash) or shut down while starting.
		st := s.state
		s.mu.Unlock()
		exec.Close()
		_ = page.Close(ctx)
		_ = os.RemoveAll(dl)
		s.closeOwnBrowser()
		s.closeEgress()
		return nil, fmt.Errorf("%w: session %s while starting", ErrUnavailable, st)
	}
	first.exec = exec
	s.page, s.root = page, page
	s.tabs = map[string]*tab{first.id: first}
	s.ex = newPageExec(exec, s.ready)
	s.disp = dispatch.New(dispatch.Config{Logger: s.log.With("component", "dispatch"), Telemetry: m.cfg.Telemetry}, s.ex)
	s.state = StateReady
	s.mu.Unlock()
	if err := s.startTabWatch(); err != nil {
		// The session still streams and drives its first tab; other tabs
		// are then neither followed nor listed.
		s.log.Warn("tabs: cannot watch the browser's pages", "err", err)
	}
	s.startWatchdog()
	if m.cfg.IdleReclaim > 0 && !o.KeepIdle {
		m.mu.Lock() // wg.Add must not race Shutdown's Wait
		if m.ctx.Err() == nil {
			m.wg.Add(1)
			go s.idleLoop(m.cfg.IdleReclaim)
		}
		m.mu.Unlock()
	}
	if m.cfg.InputIdleReclaim > 0 && !o.KeepIdle {
		m.mu.Lock()
		if m.ctx.Err() == nil {
			m.wg.Add(1)
			go s.inputIdleLoop(m.cfg.InputIdleWarn, m.cfg.InputIdleReclaim)
		}
		m.mu.Unlock()
	}
	s.log.Info("session ready", "width", o.Width, "height", o.Height)
	return s, nil
}

// profileName is the form of a persistent profile's name.
var profileName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ErrProfileInUse: the profile is open in another session.
var ErrProfileInUse = errors.New("session: the profile is open in another session")

// profileBrowser launches a Chromium of the session's own on the owner's
// persistent profile; one session per profile at a time. The session
// closes it (and frees the profile) when it ends.
func (m *Manager) profileBrowser(ctx context.Context, s *Session, owner, name, proxy string) (Browser, error) {
	if m.cfg.LaunchProfile == nil || m.cfg.ProfileRoot == "" {
		return nil, fmt.Errorf("%w: persistent profiles are not configured", ErrUnavailable)
	}
	if !profileName.MatchString(name) {
		return nil, fmt.Errorf("%w: profile name %q: want [a-z0-9-], 1..32", ErrBadProfile, name)
	}
	// The owner's name is hashed into the path: any user name is a safe
	// directory, and one user never reaches another's profiles.
	sum := sha256.Sum256([]byte(owner))
	key := hex.EncodeToString(sum[:8]) + "/" + name
	m.mu.Lock()
	if m.profiles[key] {
		m.mu.Unlock()
		return nil, ErrProfileInUse
	}
	m.profiles[key] = true
	m.mu.Unlock()
	release := func() {
		m.mu.Lock()
		delete(m.profiles, key)
		m.mu.Unlock()
	}
	dir := filepath.Join(m.cfg.ProfileRoot, key)
	b, err := m.cfg.LaunchProfile(ctx, dir, proxy)
	if err != nil {
		release()
		return nil, fmt.Errorf("%w: launch the profile's browser: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	s.profile, s.ownBrowser, s.releaseProfile = name, b, release
	// After a crash the same profile opens again (it stays reserved).
	s.rec.relaunch = func(ctx context.Context) (Browser, error) { return m.cfg.LaunchProfile(ctx, dir, proxy) }
	s.mu.Unlock()
	m.watch(b) // a crash reaches only this session
	return b, nil
}

func (m *Manager) remove(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, id)
	m.order = slices.DeleteFunc(m.order, func(x string) bool { return x == id })
}

// Get returns a session by id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return s, nil
}

// List returns every session's snapshot, oldest first.
func (m *Manager) List() []Status {
	out := []Status{}
	for _, s := range m.live() {
		out = append(out, s.Status())
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out
}

// Close closes one session; its snapshot stays readable.
func (m *Manager) Close(ctx context.Context, id string) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	s.close(ctx, ReasonClosedByUser, false)
	return nil
}

// Shutdown closes every session, stops the manager's goroutines and closes
// the browsers it launched itself.
func (m *Manager) Shutdown(ctx context.Context) {
	// Cancel first, under the lock: a Create in flight then either sees
	// it and gives up, or inserted its session before and is closed below.
	m.mu.Lock()
	m.cancel()
	m.mu.Unlock()
	for _, s := range m.live() {
		s.close(ctx, ReasonShutdown, false)
	}
	m.bmu.Lock()
	owned := m.owned
	m.owned = nil
	m.bmu.Unlock()
	for _, b := range owned {
		if err := b.Close(); err != nil {
			m.log.Debug("close browser", "err", err)
		}
	}
	m.wg.Wait()
}

// CheckURL applies the input policy to a URL a client asked for (the
// configured start page is the operator's and is not checked).
func (m *Manager) CheckURL(ctx context.Context, url string) error {
	return m.cfg.Input.CheckURL(ctx, url)
}
