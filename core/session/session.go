// Package session holds browser sessions: one isolated page each, its
// capture stream and one encode pipeline per codec that viewers use.
package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"

	"github.com/pion/webrtc/v4"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/browser"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/egress"
	"github.com/tabcast/tabcast/core/errcode"
	"github.com/tabcast/tabcast/core/input"
	"github.com/tabcast/tabcast/core/media"
	"github.com/tabcast/tabcast/core/viewer"
	"github.com/tabcast/tabcast/plugins/capture"
)

// State of a session.
type State string

const (
	StateStarting State = "starting"
	StateReady    State = "ready"
	StateClosing  State = "closing"
	StateClosed   State = "closed"
	StateFailed   State = "failed"
)

// Terminal reasons (safe to show).
const (
	ReasonBrowserCrashed = "browser_crashed"
	ReasonClosedByUser   = "closed_by_user"
	ReasonShutdown       = "appliance_restarting"
	// ReasonIdleReclaimed ends a session nobody watched or drove for
	// Config.IdleReclaim; the state is closed (an orderly end), not failed.
	ReasonIdleReclaimed = "idle_reclaimed"
)

// Errors with stable meaning at the API edge.
var (
	ErrNotFound    = errors.New("session not found")
	ErrCapacity    = errors.New("capacity exceeded")
	ErrCodec       = errors.New("codec not available")
	ErrUnavailable = errors.New("browser unavailable")
	ErrNotReady    = errors.New("session not ready")
	ErrBadProfile  = errors.New("bad profile")
)

var netErrRE = regexp.MustCompile(`net::ERR_[A-Z_]+`)

// maxFrameBytes bounds what a capture plugin may hand us as one picture.
const maxFrameBytes = 8 << 20

// Session is one isolated browser page and its media.
type Session struct {
	retired map[string]PipelineStats // counters of stopped pipelines, by codec (s.mu)
	id      string
	m       *Manager
	log     *slog.Logger
	page    *browser.Page // the current tab's page (s.mu)
	width   int
	height  int
	created time.Time

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu             sync.Mutex
	browser        Browser   // the Chromium holding page; set once in Create
	ended          time.Time // when the session became terminal
	state          State
	reason         string
	url, title     string
	pipes          map[string]*codecPipe
	viewers        int
	viewerInfo     map[string]ViewerInfo  // by peer id, from ViewerReport
	captures       map[string]*captureRun // running capture loops by mode
	capMode        string                 // CaptureTab or CaptureCDP; tab falls back to cdp once
	capModeCh      chan struct{}          // closed when capMode changes
	capFallback    string                 // why a tab-capture session fell back to cdp
	downloads      string                 // this session's download dir; removed at close
	egress         *egress.Listener       // this session's egress proxy listener; closed at close
	profile        string                 // persistent profile name, "" = ephemeral
	ownBrowser     Browser                // the profile's Chromium, closed with the session
	releaseProfile func()                 // frees the profile for the next session
	owner          string                 // fixed at Create
	ho             handoff                // control policy, holder, requests for a person
	snapKey        string                 // what Status last showed, for Revision
	snapRev        uint64
	invited        []string        // users invited to watch, sorted
	rec            sessionRecovery // crash containment (recover.go)
	present        map[string]int  // connected CDP clients by producer name (cdp.go)

	done chan struct{} // closed when the session starts closing

	// Tabs (pages.go): tabsMu serializes adopting, switching and closing
	// them and is taken before s.mu; tabs, cur and tabSeq are guarded by
	// s.mu. root is the session's first page, whose Close disposes the
	// browser context.
	tabsMu    sync.Mutex
	tabs      map[string]*tab
	cur       *tab
	tabSeq    uint64
	root      *browser.Page
	tabChecks chan tabCheck

	ex   *pageExec // the dispatcher's executor: the current tab's
	disp *dispatch.Dispatcher
	hub  stateHub

	jpegPipes   atomic.Pointer[[]*media.Pipeline] // the pipelines that encode the screencast's JPEGs
	passPipe    atomic.Pointer[media.Pipeline]    // the pipeline tab capture feeds, if any
	viewFixes   atomic.Int32                      // window corrections made for tab capture
	viewFixedAt atomic.Int64                      // unix ns of the last window correction
	lastFrame   atomic.Pointer[capture.Frame]

	thumbMu       sync.Mutex // one thumbnail screenshot at a time
	thumb         []byte
	thumbAt       time.Time
	lastInput     atomic.Int64 // unix ns of the last action by anyone
	reclaimAt     atomic.Int64 // unix ns the input-idle reclaim is due; 0 = not warned
	framesIn      atomic.Uint64
	badPluginOut  atomic.Uint64
	pluginDropped atomic.Uint64
	captureErr    atomic.Value // string
}

// maxInvited bounds a session's invitation list.
const maxInvited = 64

// Owner is the user the session belongs to.
func (s *Session) Owner() string { return s.owner }

// Invite lets user watch the session; false when the list is full.
func (s *Session) Invite(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, found := slices.BinarySearch(s.invited, user)
	if found {
		return true
	}
	if len(s.invited) >= maxInvited {
		return false
	}
	s.invited = slices.Insert(s.invited, i, user)
	return true
}

// Uninvite withdraws an invitation (viewers already watching stay until
// they disconnect).
func (s *Session) Uninvite(user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i, found := slices.BinarySearch(s.invited, user); found {
		s.invited = slices.Delete(s.invited, i, i+1)
	}
}

// Invited reports whether user was invited to watch.
func (s *Session) Invited(user string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, found := slices.BinarySearch(s.invited, user)
	return found
}

// Download is a file the session's page downloaded.
type Download struct {
	Name     string    `json:"name"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

// ErrNoDownload: no finished download of that name.
var ErrNoDownload = errors.New("session: no such download")

// maxDownloadsListed bounds a listing.
const maxDownloadsListed = 1000

// Downloads lists the finished downloads (Chromium writes partial ones as
// *.crdownload and renames them when done).
func (s *Session) Downloads() ([]Download, error) {
	out := []Download{}
	if s.downloads == "" {
		return out, nil
	}
	ents, err := os.ReadDir(s.downloads)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return out, nil // closed
		}
		return nil, fmt.Errorf("session: downloads: %w", err)
	}
	for _, e := range ents {
		if len(out) >= maxDownloadsListed {
			break
		}
		if !e.Type().IsRegular() || strings.HasSuffix(e.Name(), ".crdownload") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if fi, err := e.Info(); err == nil {
			out = append(out, Download{Name: e.Name(), Size: fi.Size(), Modified: fi.ModTime().UTC()})
		}
	}
	return out, nil
}

// OpenDownload opens a finished download by its plain name.
func (s *Session) OpenDownload(name string) (*os.File, error) {
	if s.downloads == "" || name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") || strings.HasSuffix(name, ".crdownload") {
		return nil, ErrNoDownload
	}
	f, err := os.OpenInRoot(s.downloads, name)
	if err != nil {
		return nil, ErrNoDownload
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, ErrNoDownload
	}
	return f, nil
}

// UploadDir is the session's upload area: files an agent may set on the
// page's file inputs (the agent API's upload command). It is made on first
// use (0700) inside the session's download directory as ".uploads" (hidden
// from Downloads and OpenDownload), so it is removed with it when the
// session closes. ErrNotReady once the session has closed.
func (s *Session) UploadDir() (string, error) {
	if s.downloads == "" {
		return "", ErrNotReady
	}
	dir := filepath.Join(s.downloads, ".uploads")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("%w: upload dir: %v", ErrNotReady, err)
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: upload dir", ErrNotReady)
	}
	return dir, nil
}

// closeOwnBrowser stops the Chromium of a persistent profile and frees the
// profile (no-op for an ephemeral session).
func (s *Session) closeOwnBrowser() {
	s.mu.Lock()
	own, release := s.ownBrowser, s.releaseProfile
	s.ownBrowser, s.releaseProfile = nil, nil
	s.mu.Unlock()
	if own != nil {
		if err := own.Close(); err != nil {
			s.log.Debug("close the profile's browser", "err", err)
		}
	}
	if release != nil {
		release()
	}
}

// Thumbnail returns a recent still picture of the page (JPEG) for the
// panel's session grid: the newest captured frame when someone watches,
// else a small screenshot taken now, at most one per thumbEvery, so a grid
// of sessions nobody opened still moves, without a peer per card.
func (s *Session) Thumbnail(ctx context.Context) ([]byte, time.Time, error) {
	if f := s.lastFrame.Load(); f != nil && f.Format == capture.FormatJPEG && time.Since(f.CaptureTime) < thumbEvery {
		return f.Data, f.CaptureTime, nil
	}
	s.thumbMu.Lock()
	defer s.thumbMu.Unlock()
	if s.thumb != nil && time.Since(s.thumbAt) < thumbEvery {
		return s.thumb, s.thumbAt, nil
	}
	pg := s.Page()
	if pg == nil {
		return nil, time.Time{}, ErrNotReady
	}
	q := int64(60)
	scale := min(1, thumbWidth/float64(s.width))
	out, err := cdp.Call(ctx, pg.Target(), page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: &q,
		Clip: &page.Viewport{X: 0, Y: 0, Width: float64(s.width), Height: float64(s.height), Scale: scale},
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("session: thumbnail: %w", err)
	}
	s.thumb, s.thumbAt = out.Data, time.Now()
	return s.thumb, s.thumbAt, nil
}

// Thumbnails: at most one screenshot per thumbEvery, thumbWidth CSS px wide.
const (
	thumbEvery = time.Second
	thumbWidth = 480.0
)

// Done is closed when the session starts closing (closed or failed).
func (s *Session) Done() <-chan struct{} { return s.done }

// ID returns the session id.
func (s *Session) ID() string { return s.id }

// Page is the session's browser tab (for agents' read-only CDP work:
// snapshots, queries, screenshots; input goes through the dispatcher).
// nil until the session is ready.
func (s *Session) Page() *browser.Page {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.page
}

// ErrNoBrowser is BrowserConn's error before the session has a browser.
var ErrNoBrowser = errors.New("session: no browser yet")

// BrowserConn is the shared DevTools connection of the Chromium holding
// the page (browser-level commands, out-of-process iframes); the browser
// owns and closes it.
func (s *Session) BrowserConn(ctx context.Context) (*browser.BrowserConn, error) {
	s.mu.Lock()
	b := s.browser
	s.mu.Unlock()
	if b == nil {
		return nil, ErrNoBrowser
	}
	return b.Conn(ctx)
}

// Viewport is the page's size in CSS pixels.
func (s *Session) Viewport() (w, h int) { return s.width, s.height }

// InputViewport is the current tab's viewport in CSS pixels, which the
// input executor maps normalized coordinates to: the session's size until a
// viewport action (a panel asking for its container's size) changed it.
func (s *Session) InputViewport() (w, h int) {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil && cur.exec != nil {
		if w, h := cur.exec.Viewport(); w > 0 && h > 0 {
			return w, h
		}
	}
	return s.width, s.height
}

// Codecs are the codecs viewers of this session can ask for, the preferred
// first: VP8 while the session captures its tab (the browser's own VP8 goes
// to viewers as it is, nothing re-encodes it), else the encoder's order.
func (s *Session) Codecs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.codecsLocked()
}

func (s *Session) codecsLocked() []string {
	if s.capMode != CaptureTab || !slices.Contains(s.m.codecs, passCodec) {
		return s.m.codecs
	}
	out := []string{passCodec}
	for _, c := range s.m.codecs {
		if c != passCodec {
			out = append(out, c)
		}
	}
	return out
}

// Subscribe attaches one viewer to codec's pipeline, starting it (and the
// capture) when it is the first. release detaches; it is idempotent.
func (s *Session) Subscribe(codec string) (webrtc.TrackLocal, func(), error) {
	if !s.m.hasCodec(codec) {
		return nil, nil, fmt.Errorf("%w: %s", ErrCodec, codec)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateReady {
		return nil, nil, fmt.Errorf("%w: %s", ErrNotReady, s.state)
	}
	if s.viewers >= s.m.cfg.MaxViewers {
		return nil, nil, fmt.Errorf("%w: %d viewers", ErrCapacity, s.viewers)
	}
	p := s.pipes[codec]
	if p == nil {
		np, err := s.newPipe(codec)
		if err != nil {
			return nil, nil, err
		}
		p = np
		s.pipes[codec] = p
		p.Start(s.ctx)
		s.publishPipesLocked()
	}
	p.refs++
	s.viewers++
	s.reconcileCapturesLocked() // only starts loops here: nothing to wait for
	p.RequestKeyframe(false)    // the new viewer needs a picture now
	var once sync.Once
	release := func() { once.Do(func() { s.release(p) }) }
	return p.Track(), release, nil
}

func (s *Session) release(p *codecPipe) {
	s.mu.Lock()
	p.refs--
	if s.viewers > 0 { // close() already zeroed it for a session that ended
		s.viewers--
	}
	var stopPipe *codecPipe
	if p.refs == 0 && s.pipes[p.Codec()] == p {
		delete(s.pipes, p.Codec())
		s.retireLocked(p)
		s.publishPipesLocked()
		stopPipe = p
	}
	stopCaptures := s.reconcileCapturesLocked()
	s.mu.Unlock()
	if stopPipe != nil {
		stopPipe.Stop()
	}
	for _, done := range stopCaptures {
		<-done
	}
}

// ViewerInfo is one viewer's transport as the appliance sees it, for the
// panel's per-viewer breakdown (never in logs or metrics: it names users).
type ViewerInfo struct {
	Peer        string `json:"peer"`
	User        string `json:"user,omitempty"`
	Codec       string `json:"codec"`
	Interactive bool   `json:"interactive"`
	// Path is host, srflx, prflx or relay; Protocol udp or tcp (ICE-TCP).
	Path     string `json:"path"`
	Protocol string `json:"protocol"`
	// RTTMs and LossPct come from the viewer's RTCP receiver reports;
	// EstimateKbps is the send-side bandwidth estimate for it.
	RTTMs        float64 `json:"rttMs"`
	LossPct      float64 `json:"lossPct"`
	EstimateKbps int     `json:"estimateKbps"`
	// SteadyKbps is the estimate without the recovery boost (peer.SteadyBitrate).
	SteadyKbps int       `json:"steadyKbps"`
	Updated    time.Time `json:"updated"`
}

// maxViewerInfos bounds the per-viewer table (MaxViewers bounds it first).
const maxViewerInfos = 64

// ViewerReport records a viewer's transport (every second while it
// watches) for the panel's table; its estimate, in bit/s as the peer's
// estimator gives it, steers codec's encoder (the weakest viewer's).
func (s *Session) ViewerReport(codec, user string, interactive bool, t viewer.Transport) {
	v := ViewerInfo{
		Peer: t.Peer, User: user, Codec: codec, Interactive: interactive, Path: t.Path, Protocol: t.Protocol,
		RTTMs: float64(t.RTT.Microseconds()) / 1000, LossPct: 100 * t.FractionLost,
		EstimateKbps: t.EstimateBps / 1000, SteadyKbps: t.SteadyBps / 1000, Updated: time.Now().UTC(),
	}
	s.mu.Lock()
	p := s.pipes[codec]
	if _, known := s.viewerInfo[v.Peer]; known || len(s.viewerInfo) < maxViewerInfos {
		if s.viewerInfo == nil {
			s.viewerInfo = map[string]ViewerInfo{}
		}
		s.viewerInfo[v.Peer] = v
	}
	s.mu.Unlock()
	// Under 1 kbit/s the estimator has nothing yet.
	if p != nil && t.EstimateBps >= 1000 {
		p.SetViewerRate(t.Peer, t.EstimateBps, t.SteadyBps)
	}
}

// ViewerGone drops a viewer's report and its say in the encoder's rate.
func (s *Session) ViewerGone(codec, peer string) {
	s.mu.Lock()
	p := s.pipes[codec]
	delete(s.viewerInfo, peer)
	s.mu.Unlock()
	if p != nil {
		p.SetViewerRate(peer, 0, 0)
	}
}

// RequestKeyframe turns a viewer's PLI/FIR into a (rate-limited) keyframe.
func (s *Session) RequestKeyframe(codec string) {
	s.mu.Lock()
	p := s.pipes[codec]
	s.mu.Unlock()
	if p != nil {
		p.RequestKeyframe(true)
	}
}

// Status is a session's state as the API and panels see it. (It is not
// core/snapshot.Snapshot, the page's accessibility tree; the panel's
// signaling message that carries it is still typed "snapshot".)
type Status struct {
	ID             string    `json:"id"`
	State          State     `json:"state"`
	TerminalReason string    `json:"terminalReason,omitempty"`
	URL            string    `json:"url"`
	Title          string    `json:"title"`
	Width          int       `json:"width"`
	Height         int       `json:"height"`
	CreatedAt      time.Time `json:"createdAt"`
	CaptureMode    string    `json:"captureMode"`
	Codecs         []string  `json:"codecs"`
	Viewers        int       `json:"viewers"`
	Producers      int       `json:"producers"`
	PageRevision   uint64    `json:"pageRevision"`
	FramesCaptured uint64    `json:"framesCaptured"`
	CaptureDropped uint64    `json:"captureDropped"`
	BadPluginOut   uint64    `json:"badPluginOutput"`
	CaptureError   string    `json:"captureError,omitempty"`
	// CaptureFallback says why a session that captured its tab went over to
	// the CDP screencast (e.g. tab_capture_failed).
	CaptureFallback string          `json:"captureFallback,omitempty"`
	Pipelines       []PipelineStats `json:"pipelines"`
	// Tabs counts the pages of the session's browser context (the current
	// one is streamed and driven).
	Tabs          int            `json:"tabs"`
	Owner         string         `json:"owner,omitempty"`
	Profile       string         `json:"profile,omitempty"`
	Control       Control        `json:"control"`
	HumanRequests []HumanRequest `json:"humanRequests"`
	// ReclaimAt is set while the session warns it will be closed for lack
	// of input.
	ReclaimAt *time.Time `json:"reclaimAt,omitempty"`
	// Revision grows whenever the state, page or audience changes.
	Revision uint64   `json:"revision"`
	Invited  []string `json:"invited"`
	// ViewerDetails is each viewer's transport, by user then peer (not
	// part of Revision: it moves every second).
	ViewerDetails []ViewerInfo `json:"viewerDetails"`
	// Recovering says why the session is recovering (renderer_crashed,
	// renderer_hung, browser_crashed); LastRecovery is its last recovery;
	// PageError is set while the current page's renderer, crashed again
	// soon after its automatic reload, is left as it is.
	Recovering   string    `json:"recovering,omitempty"`
	LastRecovery *Recovery `json:"lastRecovery,omitempty"`
	PageError    string    `json:"pageError,omitempty"`
	// Agents are the agents connected to the session now, as the panel
	// lists them beside its viewers: CDP clients ("cdp:<name>").
	Agents []string `json:"agents,omitempty"`
}

// Status returns the session's current state.
func (s *Session) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap := Status{
		ID: s.id, State: s.state, TerminalReason: s.reason, URL: s.url, Title: s.title,
		Width: s.width, Height: s.height, CreatedAt: s.created, CaptureMode: s.capMode,
		CaptureFallback: s.capFallback, Codecs: s.codecsLocked(), Viewers: s.viewers, Producers: s.hub.count(), FramesCaptured: s.framesIn.Load(),
		CaptureDropped: s.pluginDropped.Load(), BadPluginOut: s.badPluginOut.Load(),
		Pipelines: []PipelineStats{}, Owner: s.owner, Profile: s.profile, Invited: slices.Clone(s.invited),
		ViewerDetails: make([]ViewerInfo, 0, len(s.viewerInfo)), Tabs: len(s.tabs),
	}
	for _, v := range s.viewerInfo {
		snap.ViewerDetails = append(snap.ViewerDetails, v)
	}
	for name := range s.present {
		snap.Agents = append(snap.Agents, name)
	}
	slices.Sort(snap.Agents)
	slices.SortFunc(snap.ViewerDetails, func(a, b ViewerInfo) int {
		if c := strings.Compare(a.User, b.User); c != 0 {
			return c
		}
		return strings.Compare(a.Peer, b.Peer)
	})
	if s.ex != nil {
		snap.PageRevision = s.ex.PageRevision()
	}
	snap.Recovering, snap.PageError, snap.LastRecovery = s.recoveryLocked()
	if e, ok := s.captureErr.Load().(string); ok {
		snap.CaptureError = e
	}
	// The revision moves whenever what a person sees of the session moves
	// (not its counters), so panels can tell a new snapshot from a repeat.
	snap.Control, snap.HumanRequests = s.Control(), s.HumanRequests()
	if at := s.reclaimAt.Load(); at != 0 {
		t := time.Unix(0, at).UTC()
		snap.ReclaimAt = &t
	}
	key := fmt.Sprint(snap.State, snap.TerminalReason, snap.URL, snap.Title, snap.Width, snap.Height,
		snap.Viewers, snap.Producers, snap.PageRevision, snap.Tabs, snap.CaptureError, snap.CaptureMode, snap.Invited, snap.Control, len(snap.HumanRequests), snap.ReclaimAt != nil,
		snap.Recovering, snap.PageError, lastRecoveryAt(snap.LastRecovery), snap.Agents)
	for _, r := range snap.HumanRequests {
		key += r.ID
	}
	// The panel's viewer table is what a person sees too, and the socket's
	// push is its only source while the socket is up: its figures as shown
	// (RTT to 5 ms, loss to 0.1 %, the estimate to 100 kbit/s) move the
	// revision, their noise does not.
	for _, v := range snap.ViewerDetails {
		key += fmt.Sprint("|", v.Peer, v.User, v.Interactive, v.Path, v.Protocol,
			int(v.RTTMs/5), int(v.LossPct*10), v.EstimateKbps/100)
	}
	if key != s.snapKey {
		s.snapKey = key
		s.snapRev++
	}
	snap.Revision = s.snapRev
	for _, c := range s.m.codecs {
		if p := s.pipes[c]; p != nil {
			snap.Pipelines = append(snap.Pipelines, p.Stats(p.refs))
		}
	}
	return snap
}

// Navigate loads url in the session's page, if the input policy allows it.
func (s *Session) Navigate(ctx context.Context, url string) error {
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if st != StateReady {
		return fmt.Errorf("%w: %s", ErrNotReady, st)
	}
	if err := s.m.cfg.Input.CheckURL(ctx, url); err != nil {
		return err
	}
	var ex *input.Executor
	s.mu.Lock()
	if s.ex != nil {
		ex = s.ex.cur.Load()
	}
	s.mu.Unlock()
	var mark input.EgressMark
	if ex != nil {
		mark = ex.EgressMark()
	}
	err := s.Page().Navigate(ctx, url)
	if ex != nil {
		netErr := ""
		if err != nil {
			netErr = netErrRE.FindString(err.Error())
		}
		if ex.EgressBlocked(mark, netErr) {
			return input.ErrEgressBlocked
		}
	}
	if err != nil {
		// A page that does not load is the URL's problem, not the
		// appliance's: say so with Chromium's net error code (never the URL).
		if code := netErrRE.FindString(err.Error()); code != "" {
			return errcode.New(errcode.Failed, "the page did not load: "+code)
		}
		return fmt.Errorf("navigate: %w", err)
	}
	return nil
}

// close stops everything the session owns. reason is kept as the terminal
// reason; failed marks the session failed rather than closed.
func (s *Session) close(ctx context.Context, reason string, failed bool) {
	s.mu.Lock()
	if s.state == StateClosed || s.state == StateFailed || s.state == StateClosing {
		s.mu.Unlock()
		return
	}
	s.state = StateClosing
	if failed {
		// Nothing orderly is left to do on a dead browser: show the terminal
		// state now; cleanup below only reaps our own goroutines.
		s.state = StateFailed
		s.reason = reason
	}
	pipes := s.pipes
	s.pipes = map[string]*codecPipe{}
	for _, p := range pipes {
		s.retireLocked(p)
	}
	s.publishPipesLocked()
	s.mu.Unlock()
	close(s.done) // viewers are told and disconnected (see Done)

	s.cancel()
	for _, p := range pipes {
		p.Stop() // already cancelled with s.ctx: this waits for it
	}
	if s.disp != nil {
		s.disp.Close() // releases every producer's held input first
	}
	s.wg.Wait() // the tab watcher too: the tabs stay as they are from here
	s.mu.Lock()
	execs := make([]*input.Executor, 0, len(s.tabs)+1)
	pages := make([]*browser.Page, 0, len(s.tabs)+1)
	for _, t := range s.tabs {
		execs, pages = append(execs, t.exec), append(pages, t.page)
	}
	if s.cur != nil && s.tabs[s.cur.id] != s.cur {
		execs, pages = append(execs, s.cur.exec), append(pages, s.cur.page)
	}
	root := s.root
	s.mu.Unlock()
	for _, e := range execs {
		e.Close()
	}
	s.mu.Lock()
	var capDone []chan struct{}
	for mode, r := range s.captures {
		r.cancel()
		capDone = append(capDone, r.done)
		delete(s.captures, mode)
	}
	s.mu.Unlock()
	for _, done := range capDone {
		<-done
	}
	if !failed && root != nil {
		// Disposing the context closes every tab in it; the other tabs'
		// sessions are only detached then.
		if err := root.Close(ctx); err != nil {
			s.log.Debug("page close", "err", err)
		}
		for _, pg := range pages {
			if pg != root {
				_ = pg.CloseTab(ctx)
			}
		}
	}
	s.closeOwnBrowser()
	s.closeEgress()
	if s.downloads != "" {
		if err := os.RemoveAll(s.downloads); err != nil {
			s.log.Warn("remove the download dir", "err", err)
		}
	}
	s.mu.Lock()
	s.state = StateClosed
	if failed {
		s.state = StateFailed
	}
	s.reason = reason
	s.viewers = 0
	s.viewerInfo = nil
	s.ended = time.Now()
	st := s.state
	s.mu.Unlock()
	s.log.Info("session ended", "state", st, "reason", reason)
}

// inputIdleLoop warns, then closes, a session that people watch but nobody
// (person or agent) has acted on for warn / reclaim: a forgotten tab on a
// wall screen should not hold a browser forever. Owned like idleLoop.
func (s *Session) inputIdleLoop(warn, reclaim time.Duration) {
	defer s.m.wg.Done()
	t := time.NewTicker(min(max(reclaim/8, 10*time.Millisecond), 10*time.Second))
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			last := time.Unix(0, s.lastInput.Load())
			idle := now.Sub(last)
			switch {
			case idle >= reclaim:
				s.log.Info("reclaiming a session nobody acts on", "idle", reclaim)
				s.close(context.Background(), ReasonIdleReclaimed, false)
				return
			case warn > 0 && idle >= warn:
				at := last.Add(reclaim).UTC()
				if s.reclaimAt.Swap(at.UnixNano()) == 0 {
					s.hub.publish(action.StateEvent{Type: "idle_warning", Payload: map[string]any{"reclaimAt": at}}, func(*action.StateEvent) {})
				}
			default:
				s.reclaimAt.Store(0)
			}
		}
	}
}

// noteInput records that someone acted (for inputIdleLoop).
func (s *Session) noteInput() {
	s.lastInput.Store(time.Now().UnixNano())
	s.reclaimAt.Store(0)
}

// idleLoop closes the session once it has had no viewer and no producer
// for d. It is owned by the Manager's WaitGroup (not the session's: it
// calls close, which waits on the session's) and ends with the session.
func (s *Session) idleLoop(d time.Duration) {
	defer s.m.wg.Done()
	t := time.NewTicker(min(max(d/4, 10*time.Millisecond), 5*time.Second))
	defer t.Stop()
	idleStart := time.Now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			busy := s.viewers > 0 || s.hub.count() > 0
			s.mu.Unlock()
			switch {
			case busy:
				idleStart = time.Time{}
			case idleStart.IsZero():
				idleStart = now
			case now.Sub(idleStart) >= d:
				s.log.Info("reclaiming idle session", "idle", d)
				s.close(context.Background(), ReasonIdleReclaimed, false)
				return
			}
		}
	}
}
