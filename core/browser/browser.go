// Package browser runs one headless Chromium for the core: it launches the
// process (bound to loopback CDP, in its own process group, dying with us),
// watches it, opens isolated pages and tears everything down.
//
// It is also the only core package that connects to Chromium's DevTools
// socket (a test greps the others); everything else borrows a connection:
//
//   - The control connection (chromedp) carries each Page's attached
//     session: Page.Target for cdp.Call and cdp.Events, Page.Listen.
//   - A PageConn (Page.DialConn) is a socket of its own to one page for
//     pipelined commands: Send writes and returns, the Reply is waited for
//     later. Input sends a click's press and release back to back on it,
//     one round trip for both.
//   - The BrowserConn (Browser.Conn) is one shared socket to the browser
//     endpoint, multiplexed by flattened session id, with a bounded number
//     of commands in flight, closed with the browser. Agents use it for
//     browser-level commands (cookies of a BrowserContext) and for
//     sessions attached to out-of-process iframes (AttachTarget).
//
// A CDP proxy (a session-scoped, filtered CDP WebSocket for Playwright or
// Puppeteer) builds on the BrowserConn: it attaches a flattened session to
// the session's page (AttachTarget), forwards each client command as raw
// JSON with Send(ctx, sessionID, method, jsonv2.Value) — after its filter
// — mapping the client's id to the Reply it gets (the connection numbers
// commands itself), and forwards that session's events from
// Listen(sessionID, ...) (Target.attachedToTarget/detachedFromTarget for
// child sessions arrive on the parent session, "" for the browser's own).
// The in-flight bound keeps one client from flooding the shared socket.
package browser

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/chromedp/cdproto"
	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
)

const (
	// DefaultPath is the Chromium binary; the /usr/bin wrapper script is skipped.
	DefaultPath         = "/usr/lib/chromium/chromium"
	defaultStartTimeout = 20 * time.Second
	defaultWidth        = 1280
	defaultHeight       = 720
	// closeGrace is how long Close waits for Browser.close before SIGKILL.
	closeGrace = 3 * time.Second
)

// ErrClosed is Err after Close stopped the browser.
var ErrClosed = errors.New("browser closed")

// Options configure Launch.
type Options struct {
	// ProfileDir, if set, is a persistent profile (cookies, storage kept
	// across launches; never removed). Pages use its default context.
	ProfileDir string
	// Proxy, if set, is the default context's proxy (--proxy-server, with
	// loopback not bypassed): a persistent profile's session egress proxy.
	Proxy        string
	Path         string        // default DefaultPath
	Headless     bool          // --headless=new
	NoSandbox    string        // "auto" (only when euid==0, the default), "true", "false"
	ExtraFlags   []string      // e.g. from the capture plugin's ChromiumFlags
	StartTimeout time.Duration // default 20s
	Logger       *slog.Logger
	// Cgroup, if set, is a cgroup v2 directory Chromium is started in
	// (clone3's CLONE_INTO_CGROUP, so not one of its processes runs
	// outside it), made if missing. The image's nftables rule lets that
	// cgroup reach loopback only: the second wall behind the egress proxy,
	// holding even if Chromium ignored --proxy-server (docs/architecture.md,
	// "The egress wall").
	Cgroup string
}

// Browser is a running Chromium.
type Browser struct {
	log     *slog.Logger
	proc    *process
	rootDir string // temp dir holding the profile and the XDG dirs
	wsURL   string
	version string

	// Browser-level chromedp connection (the core's control connection).
	allocCtx    context.Context
	cancelAlloc context.CancelFunc
	rootCtx     context.Context
	cancelRoot  context.CancelFunc
	cdpBrowser  *chromedp.Browser

	done    chan struct{} // closed after exit and cleanup of the process group
	err     error         // valid after done
	closing chan struct{} // closed when Close starts
	watchWG sync.WaitGroup

	mu        sync.Mutex
	pages     map[*Page]struct{}
	pageConns map[*PageConn]struct{}    // open PageConns: Close closes them
	conn      *BrowserConn              // the shared one, once dialed
	ownConns  map[*BrowserConn]struct{} // DialConn's: Close closes them
	connMu    sync.Mutex                // serializes dialing conn
	closeOnce sync.Once
	closeErr  error
}

// Launch starts Chromium and connects to it. ctx bounds the start only; the
// browser then lives until Close (or until it dies: see Done).
func Launch(ctx context.Context, o Options) (*Browser, error) {
	if o.Path == "" {
		o.Path = DefaultPath
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = defaultStartTimeout
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()

	rootDir, err := os.MkdirTemp("", "tabcast-chromium-")
	if err != nil {
		return nil, fmt.Errorf("browser: temp dir: %w", err)
	}
	profile := filepath.Join(rootDir, "profile")
	if o.ProfileDir != "" {
		profile = o.ProfileDir
		// A port file left by an earlier run would point at a dead
		// endpoint: the new one is read only after Chromium writes it.
		_ = os.Remove(filepath.Join(profile, "DevToolsActivePort"))
	}
	if err := os.MkdirAll(profile, 0o700); err != nil {
		os.RemoveAll(rootDir)
		return nil, fmt.Errorf("browser: profile dir: %w", err)
	}
	if err := writePrefs(profile); err != nil {
		os.RemoveAll(rootDir)
		return nil, fmt.Errorf("browser: %w", err)
	}
	args, err := buildArgs(o, profile)
	if err != nil {
		os.RemoveAll(rootDir)
		return nil, fmt.Errorf("browser: %w", err)
	}
	cmd := exec.Command(o.Path, args...)
	// Crashpad writes its database under XDG_CONFIG_HOME; keep it in our temp
	// dir (and out of $HOME), which also lets Close find the handlers.
	cmd.Env = append(os.Environ(),
		"XDG_CONFIG_HOME="+filepath.Join(rootDir, "xdg-config"),
		"XDG_CACHE_HOME="+filepath.Join(rootDir, "xdg-cache"),
	)
	cgroup, err := openCgroup(o.Cgroup)
	if err != nil {
		os.RemoveAll(rootDir)
		return nil, fmt.Errorf("browser: %w", err)
	}
	proc, err := startProcess(cmd, log, cgroup)
	if cgroup != nil {
		cgroup.Close() // the child is in it (or was never started)
	}
	if err != nil {
		os.RemoveAll(rootDir)
		return nil, fmt.Errorf("browser: start %s: %w", o.Path, err)
	}
	b := &Browser{
		log:       log.With("chromium_pid", proc.pid),
		proc:      proc,
		rootDir:   rootDir,
		done:      make(chan struct{}),
		closing:   make(chan struct{}),
		pages:     map[*Page]struct{}{},
		pageConns: map[*PageConn]struct{}{},
		ownConns:  map[*BrowserConn]struct{}{},
	}
	b.watchWG.Add(1)
	go b.watch()

	if err := b.connect(ctx, profile); err != nil {
		b.Close()
		return nil, err
	}
	b.log.Info("chromium started", "version", b.version)
	return b, nil
}

// watch turns the process exit into Done/Err and kills what is left of the
// process group, so a crash leaves no renderer or zygote behind.
func (b *Browser) watch() {
	defer b.watchWG.Done()
	<-b.proc.exited
	killAll(b.proc.pid, b.rootDir, 2*time.Second)
	select {
	case <-b.closing:
		b.err = ErrClosed
	default:
		b.err = fmt.Errorf("chromium exited unexpectedly: %w%s", exitReason(b.proc.waitErr), tailSuffix(b.proc))
		b.log.Error("chromium exited unexpectedly", "err", b.proc.waitErr)
	}
	close(b.done)
	if !errors.Is(b.err, ErrClosed) {
		// Nothing of the crashed browser uses its temp profile any more:
		// remove it now rather than at Close, which an owner may call
		// late or, for a browser it only watched, never. After Done, not
		// before: that waits for nobody. (A persistent profile lives
		// outside rootDir and is kept.)
		if err := removeAll(b.rootDir); err != nil {
			b.log.Warn("remove the crashed browser's profile", "err", err)
		}
	}
}

func exitReason(err error) error {
	if err == nil {
		return errors.New("exit status 0")
	}
	return err
}

func tailSuffix(p *process) string {
	// Give the reader a moment to collect the last words.
	select {
	case <-p.readerDone:
	case <-time.After(300 * time.Millisecond):
	}
	if t := p.tail.Tail(1024); t != "" {
		return "; stderr: " + t
	}
	return ""
}

// connect waits for DevToolsActivePort, then opens the control connection.
func (b *Browser) connect(ctx context.Context, profile string) error {
	portFile := filepath.Join(profile, "DevToolsActivePort")
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	for {
		raw, err := os.ReadFile(portFile)
		if err == nil {
			if u, ok := parseActivePort(raw); ok {
				b.wsURL = u
				break
			}
		}
		select {
		case <-b.proc.exited:
			return fmt.Errorf("browser: chromium exited during start: %w%s", exitReason(b.proc.waitErr), tailSuffix(b.proc))
		case <-ctx.Done():
			return fmt.Errorf("browser: waiting for DevToolsActivePort: %w%s", ctx.Err(), tailSuffix(b.proc))
		case <-tick.C:
		}
	}

	b.allocCtx, b.cancelAlloc = remote.NewAllocator(context.Background(), b.wsURL, remote.NoModifyURL)
	b.rootCtx, b.cancelRoot = chromedp.NewContext(b.allocCtx, chromedpLogs(b.log))
	// The first call binds the connection's life to rootCtx, so it must not
	// carry the start deadline; enforce that deadline from the side.
	stop := context.AfterFunc(ctx, b.cancelRoot)
	v, err := chromedp.CallBrowser(b.rootCtx, cdpbrowser.GetVersion, cdp.Empty{})
	if !stop() {
		// The deadline fired and already tore the connection down.
		err = fmt.Errorf("%w (result: %v)", ctx.Err(), err)
	}
	if err != nil {
		return fmt.Errorf("browser: CDP connect: %w", err)
	}
	b.cdpBrowser = chromedp.FromContext(b.rootCtx).Browser
	b.version = strings.TrimSpace(v.Product + " " + v.Revision)
	return nil
}

// chromedpLogs routes chromedp's printf logs to slog at debug level.
func chromedpLogs(log *slog.Logger) chromedp.ContextOption {
	f := func(format string, args ...any) { log.Debug("chromedp: " + fmt.Sprintf(format, args...)) }
	return chromedp.WithBrowserOption(chromedp.WithBrowserLogf(f), chromedp.WithBrowserErrorf(f))
}

// parseActivePort reads "PORT\n/devtools/browser/ID" into a loopback ws URL.
func parseActivePort(raw []byte) (string, bool) {
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) < 2 {
		return "", false
	}
	port, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil || port <= 0 || port > 65535 {
		return "", false
	}
	path := strings.TrimSpace(lines[1])
	if !strings.HasPrefix(path, "/devtools/browser/") {
		return "", false
	}
	return "ws://127.0.0.1:" + strconv.Itoa(port) + path, true
}

// WSURL is the browser-level DevTools WebSocket URL (loopback).
func (b *Browser) WSURL() string { return b.wsURL }

// Version is the product and revision from Browser.getVersion.
func (b *Browser) Version() string { return b.version }

// PID is the Chromium main process id (also its process group id).
func (b *Browser) PID() int { return b.proc.pid }

// Done is closed when Chromium exited (crash or Close).
func (b *Browser) Done() <-chan struct{} { return b.done }

// Err says why Chromium exited; ErrClosed after Close. Nil before Done.
func (b *Browser) Err() error {
	select {
	case <-b.done:
		return b.err
	default:
		return nil
	}
}

// Close stops Chromium: Browser.close, SIGKILL to the process group after 3 s,
// then removes the profile. It is idempotent and safe after a crash.
func (b *Browser) Close() error {
	b.closeOnce.Do(func() { b.closeErr = b.close() })
	return b.closeErr
}

func (b *Browser) close() error {
	close(b.closing)
	select {
	case <-b.proc.exited:
	default:
		b.requestClose()
		select {
		case <-b.proc.exited:
		case <-time.After(closeGrace):
			b.log.Warn("chromium ignored Browser.close; killing")
		}
	}
	var errs []error
	if left := killAll(b.proc.pid, b.rootDir, 3*time.Second); len(left) > 0 {
		errs = append(errs, fmt.Errorf("browser: processes survived SIGKILL: %v", left))
	}
	<-b.proc.exited
	b.watchWG.Wait()
	b.proc.stopReader(time.Second)

	// The connections are gone with the process; release our side.
	b.mu.Lock()
	pages := b.pages
	b.pages = map[*Page]struct{}{}
	conns := b.pageConns
	b.pageConns = map[*PageConn]struct{}{}
	conn := b.conn
	own := b.ownConns
	b.ownConns = map[*BrowserConn]struct{}{}
	b.mu.Unlock()
	for c := range own {
		c.w.close()
	}
	for p := range pages {
		p.release()
	}
	for c := range conns {
		c.w.close()
	}
	if conn != nil {
		conn.w.close()
	}
	if b.cancelRoot != nil {
		b.cancelRoot()
		b.cancelAlloc()
		if c := chromedp.FromContext(b.allocCtx); c != nil && c.Allocator != nil {
			c.Allocator.Wait()
		}
	}
	if err := removeAll(b.rootDir); err != nil {
		errs = append(errs, fmt.Errorf("browser: remove profile: %w", err))
	}
	return errors.Join(errs...)
}

// requestClose sends Browser.close on a connection of its own: chromedp
// refuses to send it, and the control connection may be wedged anyway.
// Falls back to SIGTERM, which Chromium also handles as a clean shutdown.
func (b *Browser) requestClose() {
	if b.wsURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := remote.DialContext(ctx, b.wsURL)
		if err == nil {
			err = conn.Write(ctx, &cdproto.Message{ID: 1, Method: cdpbrowser.CommandClose})
			// Chromium closes the socket as it exits; the reply does not matter.
			defer conn.Close()
			if err == nil {
				return
			}
		}
		b.log.Debug("Browser.close failed; sending SIGTERM", "err", err)
	}
	_ = syscall.Kill(b.proc.pid, syscall.SIGTERM)
}

func removeAll(dir string) error {
	var err error
	for range 5 {
		if err = os.RemoveAll(dir); err == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return err
}

// Probe runs `chromium --version` and returns its output. It starts no
// browser that outlives the call.
func Probe(ctx context.Context, path string) (string, error) {
	if path == "" {
		path = DefaultPath
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			return "", fmt.Errorf("browser: probe %s: %w: %s", path, err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("browser: probe %s: %w", path, err)
	}
	v := strings.TrimSpace(string(out))
	if v == "" {
		return "", fmt.Errorf("browser: probe %s: empty --version output", path)
	}
	return v, nil
}
