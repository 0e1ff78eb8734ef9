// Package cdpws is the live view Tabcast is measured against: the design
// Skyvern (vendor-held sessions), Steel and browserless use. A headless
// Chromium runs Page.startScreencast, every JPEG frame is acked at once and
// pushed as one binary WebSocket message to a viewer page, which decodes it
// and draws it into a <canvas>; the viewer's mouse input comes back over the
// same WebSocket as JSON and is replayed with Input.dispatchMouseEvent.
package cdpws

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

const (
	// eventQueue bounds the frames between the CDP event loop and the pump.
	// Chromium keeps at most a couple of unacked frames in flight, so the
	// queue never fills.
	eventQueue = 16
	// clientQueue is how many frames wait for one slow viewer; the oldest
	// goes first (a live view wants the newest picture).
	clientQueue = 2
	// maxInputMessage bounds one viewer message.
	maxInputMessage = 4 << 10
	writeTimeout    = 5 * time.Second
	startTimeout    = 30 * time.Second
)

// Options configure Start. Zero values take the defaults shown.
type Options struct {
	PageURL      string // page the browser shows (required)
	Width        int    // viewport and largest frame width, 1280
	Height       int    // viewport and largest frame height, 720
	Quality      int    // screencast JPEG quality, 80
	ChromiumPath string // /usr/lib/chromium/chromium
	Log          *slog.Logger
}

// Stats count frames since Start.
type Stats struct {
	Captured uint64 // screencast frames from Chromium
	Sent     uint64 // frames written to viewers (summed over viewers)
	Dropped  uint64 // frames a viewer was too slow for, or the pump queue was full
	Inputs   uint64 // mouse events replayed
}

// Server is one running baseline: its Chromium, the screencast pump and the
// HTTP server of the viewer page and WebSocket.
type Server struct {
	// URL is the viewer page, http://127.0.0.1:PORT/.
	URL string

	log     *slog.Logger
	opts    Options
	tab     context.Context // chromedp context of the page
	cancel  context.CancelFunc
	stopAll func() // cancels the chromedp contexts: ends Chromium
	tmp     string
	http    *http.Server
	wg      sync.WaitGroup // pump, HTTP server, viewer handlers

	mu      sync.Mutex
	clients map[*client]struct{}
	last    []byte // newest frame, sent to a viewer that joins

	captured, sent, dropped, inputs atomic.Uint64
	closeOnce                       sync.Once
	closeErr                        error
}

type client struct {
	frames chan []byte // bounded by clientQueue
}

type frameEvent struct {
	id   int64
	data []byte
}

// Start launches Chromium on o.PageURL, starts the screencast and serves the
// viewer on 127.0.0.1. Close ends everything.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.PageURL == "" {
		return nil, errors.New("cdpws: PageURL is required")
	}
	if o.Width <= 0 {
		o.Width = 1280
	}
	if o.Height <= 0 {
		o.Height = 720
	}
	if o.Quality <= 0 || o.Quality > 100 {
		o.Quality = 80
	}
	if o.ChromiumPath == "" {
		o.ChromiumPath = "/usr/lib/chromium/chromium"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	tmp, err := os.MkdirTemp("", "tabcast-cdpws-")
	if err != nil {
		return nil, fmt.Errorf("cdpws: profile dir: %w", err)
	}
	s := &Server{log: o.Log, opts: o, tmp: tmp, clients: map[*client]struct{}{}}
	life, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	if err := s.startBrowser(ctx, life); err != nil {
		s.Close()
		return nil, err
	}
	if err := s.serve(life); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startBrowser runs Chromium with the flags the appliance uses, opens the
// page at the viewport size and starts the screencast pump.
func (s *Server) startBrowser(ctx, life context.Context) error {
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(s.opts.ChromiumPath), chromedp.Flag("headless", "new"),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true), chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("hide-scrollbars", true), chromedp.Flag("mute-audio", true),
		chromedp.UserDataDir(s.tmp), chromedp.WindowSize(s.opts.Width, s.opts.Height),
	}
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox)
	}
	actx, cancelA := chromedp.NewExecAllocator(life, opts...)
	tab, cancelT := chromedp.NewContext(actx)
	s.tab = tab
	s.stopAll = func() { cancelT(); cancelA() }

	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	// Commands are bounded by sctx, the tab lives on in life.
	run := func(what string, f func() error) error {
		done := make(chan error, 1)
		go func() { done <- f() }()
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("cdpws: %s: %w", what, err)
			}
			return nil
		case <-sctx.Done():
			s.stopAll() // unblocks f
			<-done
			return fmt.Errorf("cdpws: %s: %w", what, sctx.Err())
		}
	}
	if err := run("start chromium", func() error { return chromedp.Do(tab) }); err != nil {
		return err
	}
	if err := run("viewport", func() error {
		_, err := chromedp.Call(tab, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: int64(s.opts.Width), Height: int64(s.opts.Height), DeviceScaleFactor: 1,
		})
		return err
	}); err != nil {
		return err
	}
	if err := run("navigate", func() error { return chromedp.Do(tab, chromedp.Navigate(s.opts.PageURL)) }); err != nil {
		return err
	}
	events := make(chan frameEvent, eventQueue)
	if err := chromedp.Listen(tab, func(ev any) {
		// The CDP read loop: hand over, never block or call CDP here.
		if f, ok := ev.(*page.EventScreencastFrame); ok {
			select {
			case events <- frameEvent{f.SessionID, f.Data}:
			default:
				// Unreachable in practice: a full queue means 16 unacked
				// frames, and Chromium stops sending after a few.
				s.dropped.Add(1)
			}
		}
	}); err != nil {
		return fmt.Errorf("cdpws: listen: %w", err)
	}
	s.wg.Add(1)
	go s.pump(life, events)
	q := int64(s.opts.Quality)
	return run("start screencast", func() error {
		_, err := chromedp.Call(tab, page.StartScreencast, page.StartScreencastParams{
			Format: page.StartScreencastFormatJpeg, Quality: &q,
			MaxWidth: int64(s.opts.Width), MaxHeight: int64(s.opts.Height), EveryNthFrame: 1,
		})
		return err
	})
}

func (s *Server) ack(id int64) {
	_, _ = chromedp.Call(s.tab, page.ScreencastFrameAck, page.ScreencastFrameAckParams{SessionID: id})
}

// pump acks each frame at once, as the live views do, and fans it out.
func (s *Server) pump(life context.Context, events <-chan frameEvent) {
	defer s.wg.Done()
	for {
		select {
		case <-life.Done():
			return
		case f := <-events:
			s.captured.Add(1)
			s.publish(f.data)
			s.ack(f.id)
		}
	}
}

func (s *Server) publish(jpeg []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = jpeg
	for c := range s.clients {
		s.offer(c, jpeg)
	}
}

// offer queues a frame for c, dropping c's oldest when it is full. Called
// with s.mu held, so only one producer touches c.frames at a time.
func (s *Server) offer(c *client, jpeg []byte) {
	for {
		select {
		case c.frames <- jpeg:
			return
		default:
		}
		select {
		case <-c.frames:
			s.dropped.Add(1)
		default:
		}
	}
}

func (s *Server) serve(life context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("cdpws: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintf(w, viewerPage, s.opts.Width, s.opts.Height)
	})
	mux.HandleFunc("GET /ws", func(w http.ResponseWriter, r *http.Request) { s.viewer(life, w, r) })
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, BaseContext: func(net.Listener) context.Context { return life }}
	s.URL = "http://" + ln.Addr().String() + "/"
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("cdpws: http", "err", err)
		}
	}()
	return nil
}

// viewer runs one WebSocket: a writer goroutine sends frames, this one
// reads input and replays it in order.
func (s *Server) viewer(life context.Context, w http.ResponseWriter, r *http.Request) {
	// Counted before the hijack: Shutdown waits for a handler until then,
	// so Close's Wait never races this Add.
	s.wg.Add(1)
	defer s.wg.Done()
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	conn.SetReadLimit(maxInputMessage)
	ctx, cancel := context.WithCancel(life)
	defer cancel()
	c := &client{frames: make(chan []byte, clientQueue)}
	s.mu.Lock()
	s.clients[c] = struct{}{}
	if s.last != nil {
		s.offer(c, s.last)
	}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.clients, c)
		s.mu.Unlock()
	}()

	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		defer cancel() // a failed write ends the reader too
		for {
			select {
			case <-ctx.Done():
				return
			case jpeg := <-c.frames:
				wctx, wcancel := context.WithTimeout(ctx, writeTimeout)
				err := conn.Write(wctx, websocket.MessageBinary, jpeg)
				wcancel()
				if err != nil {
					return
				}
				s.sent.Add(1)
			}
		}
	}()
	defer func() {
		cancel()
		<-writerDone
		conn.CloseNow()
	}()

	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		var m struct {
			Type string  `json:"type"`
			X    float64 `json:"x"`
			Y    float64 `json:"y"`
		}
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if err := s.mouse(m.Type, m.X, m.Y); err != nil {
			s.log.Warn("cdpws: input", "type", m.Type, "err", err)
		}
	}
}

// mouse replays one viewer event; x, y are page CSS pixels.
func (s *Server) mouse(kind string, x, y float64) error {
	if x < 0 || y < 0 || x > float64(s.opts.Width) || y > float64(s.opts.Height) {
		return fmt.Errorf("point %.0f,%.0f outside the viewport", x, y)
	}
	var evs []input.DispatchMouseEventParams
	switch kind {
	case "mousedown": // a click: press and release, as the live views send it
		evs = []input.DispatchMouseEventParams{
			{Type: input.DispatchMouseEventTypeMousePressed, X: x, Y: y, Button: input.MouseButtonLeft, Buttons: 1, ClickCount: 1},
			{Type: input.DispatchMouseEventTypeMouseReleased, X: x, Y: y, Button: input.MouseButtonLeft, ClickCount: 1},
		}
	case "mousemove":
		evs = []input.DispatchMouseEventParams{{Type: input.DispatchMouseEventTypeMouseMoved, X: x, Y: y}}
	default:
		return fmt.Errorf("unknown event type %q", kind)
	}
	for _, ev := range evs {
		if _, err := chromedp.Call(s.tab, input.DispatchMouseEvent, ev); err != nil {
			return fmt.Errorf("dispatch %s: %w", ev.Type, err)
		}
	}
	s.inputs.Add(1)
	return nil
}

// Stats returns the counters so far.
func (s *Server) Stats() Stats {
	return Stats{Captured: s.captured.Load(), Sent: s.sent.Load(), Dropped: s.dropped.Load(), Inputs: s.inputs.Load()}
}

// BrowserPID is Chromium's browser process, or 0.
func (s *Server) BrowserPID() int {
	if c := chromedp.FromContext(s.tab); c != nil && c.Browser != nil {
		if p := c.Browser.Process(); p != nil {
			return p.Pid
		}
	}
	return 0
}

// Close stops the HTTP server, the viewers, the pump and Chromium, and
// removes the profile. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.cancel() // viewers, pump
		if s.http != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			s.closeErr = s.http.Shutdown(sctx)
			cancel()
		}
		s.wg.Wait()
		if s.stopAll != nil {
			s.stopAll() // waits for Chromium to exit
		}
		if err := os.RemoveAll(s.tmp); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
	})
	return s.closeErr
}

// viewerPage draws each JPEG into the canvas as soon as it is decoded, in
// arrival order, and sends mouse presses back. window.cdpws is the hook the
// benchmark uses: send(msg), and onDraw(drawnAt, arrivedAt) called right after
// each draw (performance.now() times).
const viewerPage = `<!doctype html><meta charset=utf-8><title>CDP screencast over WebSocket</title>
<style>html,body{margin:0;background:#222}canvas{display:block}</style>
<canvas id=c width=%d height=%d></canvas>
<script>
const c = document.getElementById('c');
const g = c.getContext('2d', {willReadFrequently: true});
const v = window.cdpws = {state: 'connecting', frames: 0, ctx: g, canvas: c, onDraw: null};
const ws = new WebSocket((location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/ws');
ws.binaryType = 'blob';
let chain = Promise.resolve();
ws.onopen = () => { v.state = 'connected' };
ws.onclose = () => { v.state = 'closed' };
ws.onmessage = (ev) => {
  const blob = ev.data, arrived = performance.now();
  chain = chain.then(() => createImageBitmap(blob)).then((bmp) => {
    g.drawImage(bmp, 0, 0, c.width, c.height);
    bmp.close();
    const t = performance.now();
    v.frames++;
    if (v.onDraw) v.onDraw(t, arrived);
  }).catch(() => {});
};
v.send = (m) => { if (ws.readyState === 1) ws.send(JSON.stringify(m)) };
const at = (ev) => { const r = c.getBoundingClientRect();
  return {x: (ev.clientX - r.left) * c.width / r.width, y: (ev.clientY - r.top) * c.height / r.height} };
c.addEventListener('mousedown', (ev) => v.send({type: 'mousedown', ...at(ev)}));
c.addEventListener('mousemove', (ev) => v.send({type: 'mousemove', ...at(ev)}));
</script>`
