package session

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/plugins/encoder"
)

// PluginHandle is what sessions need from a supervised plugin.
type PluginHandle interface {
	// Client returns the plugin's client and its generation, waiting while
	// the plugin restarts.
	Client(ctx context.Context) (any, uint64, error)
	// ReportFailure says a call on generation gen failed as if the plugin
	// were broken; the supervisor restarts it once per generation.
	ReportFailure(gen uint64, err error)
}

// Browser is what sessions need from the running Chromium.
type Browser interface {
	WSURL() string
	NewPage(ctx context.Context, o browser.PageOptions) (*browser.Page, error)
	Done() <-chan struct{}
}

// Video are the encode targets for every pipeline.
type Video struct {
	Codec            string // auto, h264 or vp8: which codecs viewers may use
	FPS              int
	BitrateKbps      int
	KeyframeInterval time.Duration
	Hardware         string
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
}

// CreateOptions for one session; zero values take the configured defaults.
type CreateOptions struct {
	URL           string
	Width, Height int
}

// Manager owns every session.
type Manager struct {
	cfg     Config
	log     *slog.Logger
	browser Browser
	capture PluginHandle
	encoder PluginHandle
	codecs  []string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	sessions map[string]*Session
	order    []string
}

// NewManager returns a manager. codecs are the codecs the encoder plugin
// really produces (see Codecs), narrowed by cfg.Video.Codec.
func NewManager(cfg Config, b Browser, capturePlugin, encoderPlugin PluginHandle, codecs []string) *Manager {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Video.Codec != "" && cfg.Video.Codec != "auto" {
		codecs = slices.DeleteFunc(slices.Clone(codecs), func(c string) bool { return c != cfg.Video.Codec })
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &Manager{
		cfg: cfg, log: cfg.Logger, browser: b, capture: capturePlugin, encoder: encoderPlugin,
		codecs: codecs, ctx: ctx, cancel: cancel, sessions: map[string]*Session{},
	}
	m.wg.Add(1)
	go m.watchBrowser()
	return m
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

// watchBrowser fails every live session when Chromium dies, so viewers
// learn at once instead of watching a frozen picture.
func (m *Manager) watchBrowser() {
	defer m.wg.Done()
	select {
	case <-m.ctx.Done():
		return
	case <-m.browser.Done():
	}
	m.log.Error("browser exited; failing its sessions")
	for _, s := range m.live() {
		s.close(context.Background(), ReasonBrowserCrashed, true)
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
	select {
	case <-m.browser.Done():
		return nil, ErrUnavailable
	default:
	}
	if o.Width == 0 {
		o.Width = m.cfg.Width
	}
	if o.Height == 0 {
		o.Height = m.cfg.Height
	}
	id := newID()
	sctx, cancel := context.WithCancel(m.ctx)
	s := &Session{
		id: id, m: m, log: m.log.With("session", id), width: o.Width, height: o.Height,
		created: time.Now(), ctx: sctx, cancel: cancel, state: StateStarting, url: o.URL,
		pipes: map[string]*pipeline{},
	}
	m.mu.Lock()
	n := 0
	for _, x := range m.sessions {
		if st := x.Snapshot().State; st == StateStarting || st == StateReady {
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

	page, err := m.browser.NewPage(ctx, browser.PageOptions{Width: o.Width, Height: o.Height, URL: o.URL})
	if err != nil {
		cancel()
		m.remove(id)
		return nil, fmt.Errorf("%w: new page: %v", ErrUnavailable, err)
	}
	exec, err := input.New(page, m.cfg.Input, input.Events{
		OnPageState: s.onPageState, OnDialogOpened: s.onDialogOpened, OnDialogClosed: s.onDialogClosed,
	}, s.log.With("component", "input"))
	if err != nil {
		cancel()
		_ = page.Close(ctx)
		m.remove(id)
		return nil, fmt.Errorf("%w: input: %v", ErrUnavailable, err)
	}
	s.mu.Lock()
	s.page = page
	s.exec = exec
	s.disp = dispatch.New(dispatch.Config{Logger: s.log.With("component", "dispatch")}, exec)
	s.state = StateReady
	s.mu.Unlock()
	s.log.Info("session ready", "width", o.Width, "height", o.Height)
	return s, nil
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
func (m *Manager) List() []Snapshot {
	out := []Snapshot{}
	for _, s := range m.live() {
		out = append(out, s.Snapshot())
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

// Shutdown closes every session and stops the manager's goroutines.
func (m *Manager) Shutdown(ctx context.Context) {
	for _, s := range m.live() {
		s.close(ctx, ReasonShutdown, false)
	}
	m.cancel()
	m.wg.Wait()
}
