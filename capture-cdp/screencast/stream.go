package screencast

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/jpeg"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/inspector"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/tabcast/tabcast/plugins/capture"
)

const (
	attachTimeout = 10 * time.Second
	stopTimeout   = 2 * time.Second
	ackTimeout    = 5 * time.Second
	// maxPendingAcks bounds the ack queue. Chromium holds back frames until
	// they are acked (a few in flight), so it never gets near this.
	maxPendingAcks = 64
	// settleAfter is how long the screencast must be quiet after a frame
	// before we take one screenshot of the settled page (see settleLoop).
	settleAfter = 250 * time.Millisecond
	// settleBurst is how many frames make a run worth settling.
	settleBurst = 3
	// settleTimeout bounds that screenshot.
	settleTimeout = 3 * time.Second
	// firstFrameWait is how long a new screencast may stay silent before a
	// screenshot stands in for its first frame (see settleLoop), and
	// firstFrameTries how many times that is tried.
	firstFrameWait  = 400 * time.Millisecond
	firstFrameTries = 12
)

// Stream captures target and calls send with the newest frame whenever the
// previous send returned. It returns nil when ctx ends (or on Shutdown), the
// error of send, or an error when the target or the browser goes away.
func (c *Capturer) Stream(ctx context.Context, t capture.Target, send func(capture.Frame) error) error {
	if c.Life().Err() != nil {
		return errors.New("capture-cdp: shut down")
	}
	if err := checkTarget(t); err != nil {
		return fmt.Errorf("capture-cdp: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.Life(), cancel)()

	s := &stream{
		log:     c.log.With("session", t.SessionID, "target", t.TargetID),
		target:  t,
		cfg:     c.Config(),
		send:    send,
		slot:    capture.NewSlot(),
		ackWake: make(chan struct{}, 1),
		moved:   make(chan struct{}, 1),
		crashed: make(chan string, 1),
		sendErr: make(chan error, 1),
		quit:    make(chan struct{}),
	}
	return s.run(ctx)
}

// checkTarget refuses anything but a loopback DevTools browser URL.
func checkTarget(t capture.Target) error {
	if t.TargetID == "" {
		return errors.New("target: empty TargetID")
	}
	if t.Width < 0 || t.Height < 0 {
		return fmt.Errorf("target: bad size %dx%d", t.Width, t.Height)
	}
	u, err := url.Parse(t.BrowserWSURL)
	if err != nil {
		return fmt.Errorf("target: BrowserWSURL: %w", err)
	}
	if u.Scheme != "ws" {
		return fmt.Errorf("target: BrowserWSURL scheme %q, want ws", u.Scheme)
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("target: BrowserWSURL host %q is not a loopback address", u.Hostname())
	}
	return nil
}

type stream struct {
	log    *slog.Logger
	target capture.Target
	cfg    Config
	send   func(capture.Frame) error
	t      *chromedp.Target // the capture session; set before any event

	// The newest frame waits here for the sender (sendLoop).
	slot *capture.Slot

	ackMu   sync.Mutex
	acks    []int64
	ackWake chan struct{} // cap 1

	moved chan struct{} // cap 1: a new screencast picture arrived (for settleLoop)
	// pictures counts the screencast pictures offered: a screenshot taken
	// while one arrived may be older than it, and is not sent after it.
	pictures atomic.Uint64
	last     []byte // the last screencast JPEG; onEvent's own

	crashed chan string // cap 1: the renderer crashed or the inspector detached
	sendErr chan error  // cap 1
	quit    chan struct{}
}

func (s *stream) run(ctx context.Context) error {
	// chromedp's contexts are ours, not ctx's: on cancel we still need the
	// session to stop the screencast and detach cleanly.
	allocCtx, cancelAlloc := remote.NewAllocator(context.Background(), s.target.BrowserWSURL,
		remote.NoModifyURL, remote.WithDialTimeout(attachTimeout))
	logf := func(format string, args ...any) { s.log.Debug("chromedp: " + fmt.Sprintf(format, args...)) }
	cctx, cancelC := chromedp.NewContext(allocCtx,
		chromedp.WithTargetID(target.ID(s.target.TargetID)),
		// Leave the page open: it belongs to the core.
		chromedp.WithDetachOnCancel(),
		chromedp.WithListener(s.onEvent),
		chromedp.WithBrowserOption(chromedp.WithBrowserLogf(logf), chromedp.WithBrowserErrorf(logf)),
	)
	defer func() {
		cancelC() // detaches the session
		cancelAlloc()
		if c := chromedp.FromContext(allocCtx); c != nil && c.Allocator != nil {
			c.Allocator.Wait()
		}
	}()

	// The first Run attaches and binds the session to cctx, so it cannot
	// carry ctx or a deadline; those abort it from the side.
	setupCtx, cancelSetup := context.WithTimeout(ctx, attachTimeout)
	stop := context.AfterFunc(setupCtx, cancelC)
	err := chromedp.Do(cctx, chromedp.Func(func(c context.Context, t *chromedp.Target) error {
		s.t = t
		return s.start(c)
	}))
	aborted := !stop()
	cancelSetup()
	switch {
	case aborted && ctx.Err() != nil:
		return nil // cancelled while attaching: a normal end
	case aborted:
		return fmt.Errorf("capture-cdp: attach to target %s: timed out after %v", s.target.TargetID, attachTimeout)
	case err != nil:
		return fmt.Errorf("capture-cdp: attach to target %s: %w", s.target.TargetID, err)
	}
	detached, err := chromedp.Detached(cctx)
	if err != nil {
		return fmt.Errorf("capture-cdp: %w", err)
	}

	var wg sync.WaitGroup
	wg.Go(func() { s.ackLoop(cctx) })
	wg.Go(func() {
		// The only caller of send. A slow send lets frames
		// pile up in the slot, where newer ones replace them.
		if err := s.slot.Send(s.quit, s.send); err != nil {
			s.sendErr <- err // cap 1, and sending stops here: never blocks
		}
	})
	wg.Go(func() { s.settleLoop(cctx) })
	defer func() {
		close(s.quit)
		wg.Wait()
	}()

	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if _, err := cdp.Call(sctx, s.t, page.StopScreencast, cdp.Empty{}); err != nil {
			s.log.Debug("stop screencast", "err", err)
		}
		return nil
	case err := <-s.sendErr:
		return err
	case why := <-s.crashed:
		return fmt.Errorf("capture-cdp: target %s %s", s.target.TargetID, why)
	case <-detached:
		return fmt.Errorf("capture-cdp: target %s closed (detached)", s.target.TargetID)
	case <-cctx.Done():
		return fmt.Errorf("capture-cdp: target %s: lost the connection to the browser", s.target.TargetID)
	}
}

// start asks for the screencast. Chromium keeps at most a few unacked frames
// in flight and drops what it produces beyond that; we ack at once and drop
// in our own slot instead. sendLastFrame makes Chromium keep the newest
// frame it could not send and send it on the next ack: without it the last
// change before the page goes still can be lost, and the viewer would show a
// stale picture until something moves again (seen in about 1 run in 5 on a
// busy machine). The default number of frames in flight gave the best rate;
// one frame in flight halves it.
func (s *stream) start(ctx context.Context) error {
	q := int64(s.cfg.Quality)
	sendLast := true
	p := page.StartScreencastParams{
		Format:        page.StartScreencastFormatJpeg,
		Quality:       &q,
		SendLastFrame: &sendLast,
		EveryNthFrame: int64(s.cfg.EveryNthFrame),
		MaxWidth:      int64(s.cfg.MaxWidth),
		MaxHeight:     int64(s.cfg.MaxHeight),
	}
	if p.MaxWidth == 0 {
		p.MaxWidth = int64(s.target.Width)
	}
	if p.MaxHeight == 0 {
		p.MaxHeight = int64(s.target.Height)
	}
	if _, err := cdp.Call(ctx, s.t, page.StartScreencast, p); err != nil {
		return fmt.Errorf("start screencast: %w", err)
	}
	return nil
}

// onEvent runs on chromedp's reader goroutine for the session: it must not
// block or call CDP. It hands acks to ackLoop and frames to the slot.
func (s *stream) onEvent(ev any) {
	switch e := ev.(type) {
	case *page.EventScreencastFrame:
		s.queueAck(e.SessionID)
		// Our settle screenshot makes Chromium send the screencast frame
		// again; the same bytes are the same picture, and passing them on
		// would wake settleLoop into a loop.
		if bytes.Equal(e.Data, s.last) {
			return
		}
		s.last = e.Data
		s.offer(screencastFrame(e))
		s.pictures.Add(1)
		select {
		case s.moved <- struct{}{}:
		default:
		}
	case *inspector.EventTargetCrashed:
		s.fail("crashed")
	case *inspector.EventDetached:
		// Chromium says "Render process gone." when the tab is closed.
		s.fail("closed (inspector detached: " + e.Reason + ")")
	}
}

func (s *stream) fail(why string) {
	select {
	case s.crashed <- why:
	default:
	}
}

func (s *stream) queueAck(id int64) {
	s.ackMu.Lock()
	if len(s.acks) < maxPendingAcks {
		s.acks = append(s.acks, id)
	}
	s.ackMu.Unlock()
	select {
	case s.ackWake <- struct{}{}:
	default:
	}
}

// ackLoop sends Page.screencastFrameAck for every frame, as soon as it came:
// acking is what keeps Chromium producing, so it never waits for the consumer.
func (s *stream) ackLoop(ctx context.Context) {
	for {
		select {
		case <-s.quit:
			return
		case <-s.ackWake:
		}
		s.ackMu.Lock()
		ids := s.acks
		s.acks = nil
		s.ackMu.Unlock()
		for _, id := range ids {
			actx, cancel := context.WithTimeout(ctx, ackTimeout)
			_, err := cdp.Call(actx, s.t, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: id})
			cancel()
			if err != nil {
				// A dead session shows up in run's select; nothing to do here.
				s.log.Debug("screencast ack", "err", err)
			}
		}
	}
}

// screencastFrame turns a screencast event into a Frame.
func screencastFrame(e *page.EventScreencastFrame) capture.Frame {
	f := capture.Frame{Format: capture.FormatJPEG, Data: e.Data, CaptureTime: time.Now(), Keyframe: true}
	if m := e.Metadata; m != nil && m.Timestamp > 0 {
		sec := float64(m.Timestamp)
		f.CaptureTime = time.Unix(0, int64(sec*1e9))
	}
	// The JPEG header is the truth (maxWidth/maxHeight scale the picture);
	// DecodeConfig reads only up to the SOF marker.
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(e.Data)); err == nil {
		f.Width, f.Height = cfg.Width, cfg.Height
	} else if m := e.Metadata; m != nil {
		f.Width, f.Height = int(m.DeviceWidth*m.PageScaleFactor), int(m.DeviceHeight*m.PageScaleFactor)
	}
	return f
}

// offer puts the frame in the slot of one, replacing (and counting) an
// unsent older frame.
func (s *stream) offer(f capture.Frame) { s.slot.Offer(f, nil) }

// settleLoop takes one screenshot when the screencast has gone quiet after
// a frame. Even with sendLastFrame, Chromium loses the last change before
// a page goes still when the machine is busy (3 runs in 8 with both cores
// loaded), and the viewer would show a stale picture until something moves
// again. The screenshot makes Chromium repeat its screencast frame, which
// onEvent drops as a repeat, so a still page costs one or two screenshots,
// not a loop.
//
// It also stands in for a first frame that does not come. A still page
// sends no screencast frame, and startScreencast's own redraw is lost when
// the renderer is not there yet: the core restarts the capture right after
// it reloads a crashed tab, and the new renderer may paint its page before
// the screencast is bound to it (TestCrashRendererFramesAgain/cdp waited 8 s
// for a frame in 1 run of 2). Until the first screencast frame, a
// screenshot every firstFrameWait is sent instead; it also makes Chromium
// send its screencast frame, which ends the tries.
func (s *stream) settleLoop(ctx context.Context) {
	quiet := time.NewTimer(firstFrameWait)
	defer quiet.Stop()
	burst := 0      // frames since the page last went quiet
	seen := false   // a screencast frame came
	firstTries := 0 // screenshots standing in for the first frame
	for {
		select {
		case <-s.quit:
			return
		case <-s.moved:
			seen = true
			burst++
			quiet.Reset(settleAfter)
		case <-quiet.C:
			if !seen {
				firstTries++
				s.offerScreenshot(ctx, "first-frame screenshot")
				if firstTries < firstFrameTries {
					quiet.Reset(firstFrameWait)
				}
				continue
			}
			// One or two frames (a click, a keystroke) are delivered whole;
			// the loss happens at the end of a run of frames (an animation,
			// a scroll). A screenshot costs the next input ~15 ms of
			// picture latency, so only a run pays for one.
			n := burst
			burst = 0
			if n < settleBurst {
				continue
			}
			s.offerScreenshot(ctx, "settle screenshot")
		}
	}
}

// offerScreenshot takes a screenshot and offers it, unless a screencast
// picture arrived meanwhile: the screenshot may show an older state than
// that picture, and sent after it, it would leave the viewer on the older
// one (TestLastChangeIsDelivered saw it when the first-frame screenshot
// came back after the page's last change). A dead session shows up in
// run's select, so an error is only logged.
func (s *stream) offerScreenshot(ctx context.Context, what string) {
	before := s.pictures.Load()
	f, err := s.screenshot(ctx)
	if err != nil {
		s.log.Debug(what, "err", err)
		return
	}
	if s.pictures.Load() != before {
		return
	}
	s.offer(f)
}

func (s *stream) screenshot(ctx context.Context) (capture.Frame, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	q := int64(s.cfg.Quality)
	taken := time.Now()
	fast := true
	res, err := cdp.Call(ctx, s.t, page.CaptureScreenshot, page.CaptureScreenshotParams{
		Format: page.CaptureScreenshotFormatJpeg, Quality: &q, OptimizeForSpeed: &fast,
	})
	if err != nil {
		return capture.Frame{}, err
	}
	cfg, err := jpeg.DecodeConfig(bytes.NewReader(res.Data))
	if err != nil {
		return capture.Frame{}, fmt.Errorf("screenshot is not a JPEG: %w", err)
	}
	return capture.Frame{Format: capture.FormatJPEG, Data: res.Data, CaptureTime: taken, Keyframe: true,
		Width: cfg.Width, Height: cfg.Height}, nil
}
