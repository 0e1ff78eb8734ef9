package screencast

// A tiny Chromium launcher and page maker for the tests. It stands in for the
// core (which the plugin may not import): one browser per test binary, pages
// in their own BrowserContexts with a control session that holds the
// viewport override, like core/browser does.

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/remote"
	"github.com/tabcast/tabcast/internal/testenv"
)

const chromiumPath = "/usr/lib/chromium/chromium"

type testChromium struct {
	cmd         *exec.Cmd
	dir         string
	wsURL       string
	allocCtx    context.Context
	cancelAlloc context.CancelFunc
	rootCtx     context.Context
	cancelRoot  context.CancelFunc
	browser     *chromedp.Browser
}

func startChromium() (*testChromium, error) {
	dir, err := os.MkdirTemp("", "capture-cdp-test-")
	if err != nil {
		return nil, err
	}
	profile := filepath.Join(dir, "profile")
	args := []string{
		"--headless=new", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
		"--disable-sync", "--no-first-run", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
		"--no-default-browser-check", "--disable-extensions", "--disable-features=Translate,MediaRouter",
		"--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
		"--user-data-dir=" + profile, "--window-size=1280,720",
	}
	if os.Geteuid() == 0 {
		args = append(args, "--no-sandbox")
	}
	cmd := exec.Command(chromiumPath, append(args, "about:blank")...)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "xdg"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	c := &testChromium{cmd: cmd, dir: dir}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()

	deadline := time.Now().Add(20 * time.Second)
	for c.wsURL == "" {
		if raw, err := os.ReadFile(filepath.Join(profile, "DevToolsActivePort")); err == nil {
			if l := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(l) == 2 {
				c.wsURL = "ws://127.0.0.1:" + l[0] + l[1]
				break
			}
		}
		select {
		case <-exited:
			c.kill()
			return nil, fmt.Errorf("chromium exited: %s", stderr.String())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.kill()
			return nil, fmt.Errorf("no DevToolsActivePort")
		}
	}
	c.allocCtx, c.cancelAlloc = remote.NewAllocator(context.Background(), c.wsURL, remote.NoModifyURL)
	c.rootCtx, c.cancelRoot = chromedp.NewContext(c.allocCtx, chromedp.WithLogf(func(string, ...any) {}), chromedp.WithErrorf(func(string, ...any) {}))
	if _, err := chromedp.Targets(c.rootCtx); err != nil {
		c.close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	c.browser = chromedp.FromContext(c.rootCtx).Browser
	return c, nil
}

func (c *testChromium) kill() {
	pid := c.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	// Crashpad handlers leave the group; they carry our dir on their command line.
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cl, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(cl, []byte(c.dir+"/")) {
			_ = syscall.Kill(n, syscall.SIGKILL)
		}
	}
	time.Sleep(100 * time.Millisecond)
	os.RemoveAll(c.dir)
}

func (c *testChromium) close() {
	if c.cancelRoot != nil {
		c.cancelRoot()
		c.cancelAlloc()
		chromedp.FromContext(c.allocCtx).Allocator.Wait()
	}
	c.kill()
}

// testPage is a page with the core-like control session attached.
type testPage struct {
	id     target.ID
	bctx   cdp.BrowserContextID
	ctx    context.Context
	cancel context.CancelFunc
	t      *chromedp.Target
	c      *testChromium
}

func (c *testChromium) newPage(t *testing.T, html string, w, h int) *testPage {
	t.Helper()
	testenv.NeedsChromium(t) // under -short TestMain started none: c is nil
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	no, yes := false, true
	bc, err := cdp.Call(ctx, c.browser, target.CreateBrowserContext, target.CreateBrowserContextParams{DisposeOnDetach: &no})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cdp.Call(ctx, c.browser, target.CreateTarget, target.CreateTargetParams{
		URL: "about:blank", BrowserContextID: bc.BrowserContextID, Width: int64(w), Height: int64(h), NewWindow: &yes,
	})
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := chromedp.NewContext(c.rootCtx, chromedp.WithTargetID(tr.TargetID), chromedp.WithDetachOnCancel())
	p := &testPage{id: tr.TargetID, bctx: bc.BrowserContextID, ctx: pctx, cancel: pcancel, c: c}
	err = chromedp.Do(pctx, chromedp.Func(func(ctx context.Context, tt *chromedp.Target) error {
		p.t = tt
		_, err := cdp.Call(ctx, tt, emulation.SetDeviceMetricsOverride, emulation.SetDeviceMetricsOverrideParams{
			Width: int64(w), Height: int64(h), DeviceScaleFactor: 1,
		})
		return err
	}), chromedp.Navigate("data:text/html;base64,"+base64.StdEncoding.EncodeToString([]byte(html))))
	if err != nil {
		p.close()
		t.Fatal(err)
	}
	return p
}

func (p *testPage) close() {
	p.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = cdp.Call(ctx, p.c.browser, target.CloseTarget, target.CloseTargetParams{TargetID: p.id})
	_, _ = cdp.Call(ctx, p.c.browser, target.DisposeBrowserContext, target.DisposeBrowserContextParams{BrowserContextID: p.bctx})
}

// animatedHTML changes a colour box and a counter on every animation frame.
const animatedHTML = `<!doctype html><html><body style="margin:0;background:#fff;font:64px monospace">
<div id="box" style="width:640px;height:360px"></div><div id="n">0</div>
<script>
let i = 0;
function f() {
  i++;
  document.getElementById('box').style.background = 'hsl(' + (i * 7 % 360) + ',80%,50%)';
  document.getElementById('n').textContent = i;
  requestAnimationFrame(f);
}
requestAnimationFrame(f);
</script></body></html>`

const staticHTML = `<!doctype html><html><body style="margin:0;background:#eef"><h1>static</h1><p>nothing moves here</p></body></html>`
