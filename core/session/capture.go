package session

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/plugins/capture"
	"google.golang.org/grpc/status"
)

// Capture modes: how a session's pictures are taken.
const (
	// CaptureTab: the browser captures and encodes the tab itself (the
	// capture-tab plugin); its VP8 goes to viewers without a re-encode.
	CaptureTab = "tab"
	// CaptureCDP: CDP screencast JPEGs, encoded by the encoder plugin.
	CaptureCDP = "cdp"
	// CaptureAuto (config only): tab where the start-up probe worked.
	CaptureAuto = "auto"
)

// passCodec is the codec tab capture delivers, written to viewers as is.
const passCodec = "vp8"

// Fallback reasons: tab capture of a session failed after its rebind, or a
// viewer's link is too poor for the browser's own encoding.
const (
	ReasonTabCaptureFailed = "tab_capture_failed"
	ReasonLowBandwidth     = "low_bandwidth"
)

// captureRun is one running capture loop of a session.
type captureRun struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// captureMode returns the session's capture mode and the channel closed
// when it changes.
func (s *Session) captureMode() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capMode, s.capModeCh
}

// passthroughLocked reports whether codec's pipeline forwards the browser's
// own encoded frames instead of encoding.
func (s *Session) passthroughLocked(codec string) bool {
	return s.capMode == CaptureTab && codec == passCodec
}

// reconcileCapturesLocked starts the capture loops the pipelines need and
// stops the others; it returns the done channels of stopped loops, to wait
// on outside the lock. Tab capture feeds the VP8 pipeline in tab mode; the
// CDP screencast feeds every pipeline that encodes.
func (s *Session) reconcileCapturesLocked() []chan struct{} {
	need := map[string]bool{}
	for codec := range s.pipes {
		if s.passthroughLocked(codec) {
			need[CaptureTab] = true
		} else {
			need[CaptureCDP] = true
		}
	}
	if s.state == StateRecovering && s.rec.reason == ReasonBrowserCrashed {
		// The session moves to a new browser: nothing to capture until
		// it did (readyAgainLocked starts the loops again). A tab
		// reloading after a renderer crash keeps its loops until
		// pageCrashed starts them over with the reload under way.
		clear(need)
	}
	var stopped []chan struct{}
	for mode, r := range s.captures {
		if !need[mode] {
			r.cancel()
			delete(s.captures, mode)
			stopped = append(stopped, r.done)
		}
	}
	for mode := range need {
		if s.captures[mode] != nil {
			continue
		}
		ctx, cancel := context.WithCancel(s.ctx)
		r := &captureRun{cancel: cancel, done: make(chan struct{})}
		if s.captures == nil {
			s.captures = map[string]*captureRun{}
		}
		s.captures[mode] = r
		go func() {
			defer close(r.done)
			if mode == CaptureTab {
				s.tabCaptureLoop(ctx)
			} else {
				s.cdpCaptureLoop(ctx)
			}
			// A loop that ended by itself (tab capture through a
			// recovery) leaves its place, so the next reconcile starts
			// it again. Nobody waits on r.done under s.mu.
			s.mu.Lock()
			if s.captures[mode] == r {
				delete(s.captures, mode)
			}
			s.mu.Unlock()
		}()
	}
	s.publishPipesLocked()
	return stopped
}

// publishPipesLocked hands the encoding pipelines to the screencast's
// frame callback and the passthrough one to tab capture's.
func (s *Session) publishPipesLocked() {
	jpeg := make([]*media.Pipeline, 0, len(s.pipes))
	for codec, p := range s.pipes {
		if !s.passthroughLocked(codec) {
			jpeg = append(jpeg, p.Pipeline)
		}
	}
	s.jpegPipes.Store(&jpeg)
	var pass *media.Pipeline
	if p := s.pipes[passCodec]; p != nil && s.passthroughLocked(passCodec) {
		pass = p.Pipeline
	}
	s.passPipe.Store(pass)
}

func (s *Session) cdpCaptureLoop(ctx context.Context) {
	media.Retry(ctx, func(ctx context.Context) error {
		return streamFrom(ctx, s, s.m.capture, s.onJPEG)
	}, func(err error) {
		if err != nil {
			// The plugin's error text can carry the browser's DevTools URL:
			// snapshots and logs get a stable code only.
			code := "capture_failed"
			if brokenPlugin(err) {
				code = "capture_plugin_unavailable"
			}
			s.captureErr.Store(code)
			s.log.Warn("capture stream ended", "code", code, "grpc", status.Code(err).String())
		}
	})
}

// tabCaptureLoop runs tab capture until it fails; the plugin has already
// tried one rebind by then, so the session goes over to the CDP screencast
// for good (viewers see one keyframe interval of the old picture at most).
func (s *Session) tabCaptureLoop(ctx context.Context) {
	err := streamFrom(ctx, s, s.m.tab, s.onEncoded)
	// After a tab switch the plugin may still be ending the old tab's
	// stream of this session: wait for it rather than fall back.
	for deadline := time.Now().Add(3 * time.Second); err != nil && ctx.Err() == nil && time.Now().Before(deadline) &&
		capture.IsAlreadyStreaming(err); {
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		err = streamFrom(ctx, s, s.m.tab, s.onEncoded)
	}
	if ctx.Err() != nil {
		return
	}
	if err == nil {
		err = errors.New("stream ended")
	}
	if s.brokeWithThePage(ctx) {
		// The browser or the page's renderer died under the capture: the
		// recovery restarts it on the page that comes back.
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A tab switch cancels this loop under s.mu: a stream that ended
	// because its tab went away is not a capture failure.
	if ctx.Err() != nil {
		return
	}
	s.fallBackLocked(ReasonTabCaptureFailed, err)
}

// fallBackToCDP switches the session to the CDP screencast.
func (s *Session) fallBackToCDP(reason string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fallBackLocked(reason, err)
}

func (s *Session) fallBackLocked(reason string, err error) {
	if s.capMode != CaptureTab || s.state == StateClosing || s.state == StateClosed || s.state == StateFailed || s.state == StateRecovering {
		return
	}
	// The error text can carry the DevTools URL: only its gRPC code is logged.
	s.log.Warn("the session goes over from tab capture to the CDP screencast", "reason", reason, "grpc", status.Code(err).String())
	s.capMode, s.capFallback = CaptureCDP, reason
	close(s.capModeCh)
	s.capModeCh = make(chan struct{})
	s.m.tabFallbacks.Add(1)
	// The tab loop is the caller: it is cancelled here and ends on return.
	s.reconcileCapturesLocked()
}

// streamFrom streams s's current tab from the capture plugin h (the CDP
// screencast or tab capture); h.Call reports a broken plugin.
func streamFrom[C capture.Capturer](ctx context.Context, s *Session, h Plugin[C], send func(capture.Frame) error) error {
	if h == nil {
		return errors.New("capture plugin: not configured")
	}
	pg := s.Page() // the current tab: a tab switch restarts the loops
	if pg == nil {
		return errors.New("capture: no page")
	}
	return h.Call(ctx, func(c C) error {
		return c.Stream(ctx, capture.Target{
			SessionID: s.id, BrowserWSURL: s.chromium().WSURL(), TargetID: pg.TargetID(),
			Width: s.width, Height: s.height,
		}, send)
	})
}

// saneCaptureTime replaces a clock we cannot trust: it must not poison
// frame-age figures.
func saneCaptureTime(t time.Time) time.Time {
	if t.IsZero() || time.Since(t) > time.Minute || time.Until(t) > time.Minute {
		return time.Now()
	}
	return t
}

// accept checks a capture plugin's frame (the format this path takes, a
// sane size and clock) and counts it: plugin output is input like any other.
func (s *Session) accept(f *capture.Frame, want capture.Format) bool {
	if f.Format != want || len(f.Data) == 0 || len(f.Data) > maxFrameBytes {
		s.badPluginOut.Add(1)
		return false
	}
	f.CaptureTime = saneCaptureTime(f.CaptureTime)
	s.framesIn.Add(1)
	s.pluginDropped.Store(f.Dropped)
	return true
}

// onJPEG takes one screencast frame. Plugin output is input like any other:
// frames we cannot use are counted and dropped.
func (s *Session) onJPEG(f capture.Frame) error {
	if !s.accept(&f, capture.FormatJPEG) {
		return nil
	}
	fp := &f
	s.lastFrame.Store(fp)
	if pipes := s.jpegPipes.Load(); pipes != nil {
		for _, p := range *pipes {
			p.Put(fp)
		}
	}
	return nil
}

// onEncoded takes one browser-encoded frame from tab capture and writes it
// to the VP8 pipeline's track as it is.
func (s *Session) onEncoded(f capture.Frame) error {
	if !s.accept(&f, capture.FormatVP8) {
		return nil
	}
	if p := s.passPipe.Load(); p != nil {
		p.Pass(f)
	}
	s.fitView(f.Width, f.Height)
	return nil
}

// maxViewFixes bounds the window corrections per session: the view settles
// in one or two (the browser shows a "sharing this tab" bar once capture
// starts, which takes room from the view once more).
const maxViewFixes = 6

// viewSettle: sizes reported this soon after a resize may predate it.
const viewSettle = 500 * time.Millisecond

// fitView resizes the page's window when the tab's captured view (fw×fh)
// is not the session's viewport. Tab capture records the tab's view, which
// the viewport override does not size (the headless browser still keeps
// room for its UI), so without this the picture lacks the bottom of the
// page and pointer positions land off by that much.
func (s *Session) fitView(fw, fh int) {
	dw, dh := viewCorrection(s.width, s.height, fw, fh)
	if dw == 0 && dh == 0 {
		return
	}
	// Frames of the old size keep coming until the resize reaches the
	// capture.
	if time.Since(time.Unix(0, s.viewFixedAt.Load())) < viewSettle {
		return
	}
	if n := s.viewFixes.Add(1); n > maxViewFixes {
		if n == maxViewFixes+1 {
			s.log.Warn("tab capture view does not match the viewport", "view", fmt.Sprintf("%dx%d", fw, fh), "viewport", fmt.Sprintf("%dx%d", s.width, s.height))
		}
		return
	}
	pg := s.Page()
	if pg == nil {
		return
	}
	// Synchronous, on the capture's own goroutine: a few CDP calls on a
	// keyframe, at most maxViewFixes times.
	ctx, cancel := context.WithTimeout(s.ctx, 2*time.Second)
	defer cancel()
	defer s.viewFixedAt.Store(time.Now().UnixNano())
	if err := pg.ResizeWindowBy(ctx, dw, dh); err != nil {
		s.log.Debug("fit the window to the viewport", "err", err)
		return
	}
	s.log.Info("resized the window to fit the tab's view to the viewport", "view", fmt.Sprintf("%dx%d", fw, fh), "by", fmt.Sprintf("%+d,%+d", dw, dh))
}

// viewCorrection is how much the window must grow for a captured frame of
// fw×fh to show a w×h viewport. The window's width is the view's width
// (no side UI), so: a short view arrives as (w, <h); a tall one is scaled
// down to fit w×h, arriving as (<w, h), and its real height is w·h/fw.
func viewCorrection(w, h, fw, fh int) (dw, dh int) {
	near := func(a, b int) bool { return a-b <= 1 && b-a <= 1 }
	switch {
	case fw <= 0 || fh <= 0 || near(fw, w) && near(fh, h):
		return 0, 0
	case near(fw, w) && fh < h:
		return 0, h - fh
	case near(fh, h) && fw < w:
		return 0, h - (w*h+fw/2)/fw
	case fw < w && fh < h:
		return w - fw, h - fh
	}
	return 0, 0
}

// tabControl sends a keyframe request (a PLI on the loopback peer) or a
// bitrate cap to the browser's encoder of this session's tab capture.
func (s *Session) tabControl(ctx context.Context, c capture.StreamControl) {
	if s.m.tab == nil {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	ctl, _, err := s.m.tab.Get(cctx)
	if err != nil {
		return
	}
	if err := ctl.Control(cctx, s.id, c); err != nil {
		s.log.Debug("tab capture control", "keyframe", c.Keyframe, "maxKbps", c.MaxBitrateKbps, "grpc", status.Code(err).String())
	}
}

// TabProbe is the outcome of the start-up tab-capture probe.
type TabProbe struct {
	// Mode is the configured capture mode (auto, tab or cdp).
	Mode string `json:"mode"`
	// Tried: a probe ran (auto with a capture-tab plugin configured).
	Tried bool `json:"tried"`
	OK    bool `json:"ok"`
	// Reason says why tab capture is not used, a stable code:
	// not_configured, plugin_unavailable, no_frames, capture_failed.
	Reason string `json:"reason,omitempty"`
	// FirstFrame is how long the probe took to its first frame.
	FirstFrame time.Duration `json:"firstFrameNs,omitempty"`
	At         time.Time     `json:"at"`
	// Fallbacks counts sessions that went over from tab capture to CDP.
	Fallbacks uint64 `json:"fallbacks"`
}

// tabProbeTimeout: a working tab capture delivers its first frame well
// within this; the probe gives up and auto falls back to CDP after it.
const tabProbeTimeout = 3 * time.Second

// probePage animates, so the capture has something to send at once.
const probePage = `data:text/html,<title>tabcast probe</title><style>body{margin:0;background:%23234}` +
	`div{width:80px;height:80px;background:%23e84;animation:m .5s infinite alternate}` +
	`@keyframes m{to{transform:translateX(300px)}}</style><div></div>`

var errProbeDone = errors.New("probe: got a frame")

// ProbeTabCapture runs a real tab capture of a probe tab and decides what
// auto means for new sessions. Safe to call again (e.g. from doctor).
func (m *Manager) ProbeTabCapture(ctx context.Context) TabProbe {
	res := TabProbe{Mode: m.captureSetting(), At: time.Now().UTC()}
	switch {
	case res.Mode == CaptureCDP:
		res.Reason = "not_configured"
	case m.tab == nil:
		res.Reason = "not_configured"
	default:
		res.Tried = true
		res.FirstFrame, res.Reason = m.probeTab(ctx)
		res.OK = res.Reason == ""
	}
	m.probeMu.Lock()
	m.probe = res
	m.probeMu.Unlock()
	if res.Tried {
		if res.OK {
			m.log.Info("tab capture probe: first frame", "after", res.FirstFrame.Round(time.Millisecond), "mode", res.Mode)
		} else {
			m.log.Warn("tab capture probe failed; sessions use the CDP screencast", "reason", res.Reason, "mode", res.Mode)
		}
	}
	return res
}

func (m *Manager) probeTab(ctx context.Context) (time.Duration, string) {
	ctx, cancel := context.WithTimeout(ctx, tabProbeTimeout+2*time.Second)
	defer cancel()
	c, _, err := m.tab.Get(ctx)
	if err != nil {
		return 0, "plugin_unavailable"
	}
	m.bmu.Lock()
	b := m.browser
	m.bmu.Unlock()
	pg, err := b.NewPage(ctx, browser.PageOptions{Width: 640, Height: 360, URL: probePage})
	if err != nil {
		return 0, "capture_failed"
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ccancel()
		_ = pg.Close(cctx)
	}()
	sctx, scancel := context.WithTimeout(ctx, tabProbeTimeout)
	defer scancel()
	start := time.Now()
	var first time.Duration
	err = c.Stream(sctx, capture.Target{SessionID: "probe-" + newID(), BrowserWSURL: b.WSURL(), TargetID: pg.TargetID(), Width: 640, Height: 360},
		func(f capture.Frame) error {
			if f.Format != capture.FormatVP8 || len(f.Data) == 0 {
				return nil
			}
			first = time.Since(start)
			return errProbeDone
		})
	switch {
	case first > 0:
		return first, ""
	case sctx.Err() != nil:
		return 0, "no_frames"
	default:
		m.log.Debug("tab capture probe", "grpc", status.Code(err).String())
		return 0, "capture_failed"
	}
}

// captureSetting is the configured mode, normalised.
func (m *Manager) captureSetting() string {
	switch m.cfg.Capture {
	case CaptureAuto, CaptureTab:
		return m.cfg.Capture
	}
	return CaptureCDP
}

// captureModeForNew is the capture mode a new session starts in.
func (m *Manager) captureModeForNew() string {
	if m.tab == nil {
		return CaptureCDP
	}
	switch m.captureSetting() {
	case CaptureTab:
		return CaptureTab
	case CaptureAuto:
		m.probeMu.Lock()
		ok := m.probe.OK
		m.probeMu.Unlock()
		if ok {
			return CaptureTab
		}
	}
	return CaptureCDP
}

// CaptureStatus is the tab-capture probe result and fallback count, for
// doctor and the admin page.
func (m *Manager) CaptureStatus() TabProbe {
	m.probeMu.Lock()
	p := m.probe
	m.probeMu.Unlock()
	if p.Mode == "" {
		p.Mode = m.captureSetting()
	}
	p.Fallbacks = m.tabFallbacks.Load()
	return p
}
