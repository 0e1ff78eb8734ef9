package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/internal/testenv"
	"go.uber.org/goleak"
)

const helperEnv = "TABCAST_BROWSER_TEST_HELPER"

// Pin the main goroutine to the main thread: the runtime never exits the main
// thread (it wedges it), so a test goroutine that locks a thread and ends
// must not land there, or TestSurvivesLaunchingThreadExit would prove nothing.
func init() { runtime.LockOSThread() }

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		helperMain()
		return
	}
	os.Exit(m.Run())
}

// helperMain launches a browser, reports it and waits to be killed: the
// parent test checks that Chromium dies with its owner.
func helperMain() {
	b, err := Launch(context.Background(), Options{Headless: true})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Printf("PID %d %s\n", b.PID(), b.rootDir)
	select {}
}

func launch(t *testing.T) *Browser {
	t.Helper()
	testenv.NeedsChromium(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Launch(ctx, Options{Headless: true})
	if err != nil {
		t.Fatalf("Launch: %v", err)
	}
	return b
}

// alive lists live (non-zombie) processes in group pgid or naming dir on
// their command line. Written apart from the package's own scan on purpose.
func alive(t *testing.T, pgid int, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		s := string(st)
		rest := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(rest) < 3 || rest[0] == "Z" || rest[0] == "X" {
			continue
		}
		cl, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if rest[2] == strconv.Itoa(pgid) || (dir != "" && strings.Contains(string(cl), dir+"/")) {
			out = append(out, e.Name()+":"+strings.ReplaceAll(string(cl), "\x00", " "))
		}
	}
	return out
}

func waitGone(t *testing.T, pgid int, dir string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		left := alive(t, pgid, dir)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium processes survive: %q", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestLaunchPageEvaluateClose(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	pid, dir := b.PID(), b.rootDir

	if !strings.HasPrefix(b.WSURL(), "ws://127.0.0.1:") || !strings.Contains(b.WSURL(), "/devtools/browser/") {
		t.Errorf("WSURL = %q, want a loopback browser URL", b.WSURL())
	}
	if !strings.Contains(b.Version(), "Chrome/") {
		t.Errorf("Version = %q, want a Chrome product", b.Version())
	}
	t.Logf("version %s, pid %d", b.Version(), pid)
	if pg, err := syscall.Getpgid(pid); err != nil || pg != pid {
		t.Errorf("pgid of chromium = %d (%v), want its own group %d", pg, err, pid)
	}
	if _, err := os.Stat(filepath.Join(dir, "profile", "DevToolsActivePort")); err != nil {
		t.Errorf("profile: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{URL: "data:text/html,<title>hello tabcast</title><p>x</p>"})
	if err != nil {
		t.Fatalf("NewPage: %v", err)
	}
	if p.TargetID() == "" || p.BrowserContextID() == "" {
		t.Errorf("ids: target %q context %q", p.TargetID(), p.BrowserContextID())
	}
	var title string
	if err := p.Evaluate(ctx, "document.title", &title); err != nil || title != "hello tabcast" {
		t.Errorf("title = %q, %v", title, err)
	}
	var size [2]int
	if err := p.Evaluate(ctx, "[innerWidth, innerHeight]", &size); err != nil || size != [2]int{1280, 720} {
		t.Errorf("viewport = %v, %v; want 1280x720", size, err)
	}
	if err := p.SetViewport(ctx, 800, 600); err != nil {
		t.Fatal(err)
	}
	if err := p.Evaluate(ctx, "[innerWidth, innerHeight]", &size); err != nil || size != [2]int{800, 600} {
		t.Errorf("viewport after SetViewport = %v, %v; want 800x600", size, err)
	}
	if err := p.Evaluate(ctx, "(() => { throw new Error('nope') })()", nil); err == nil {
		t.Error("Evaluate of a throwing expression: no error")
	}
	if err := p.SetViewport(ctx, 0, 600); err == nil {
		t.Error("SetViewport(0, 600): no error")
	}

	if err := p.Close(ctx); err != nil {
		t.Errorf("page Close: %v", err)
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("second page Close: %v", err)
	}

	before := alive(t, pid, dir)
	outside := 0
	for _, l := range before {
		if strings.Contains(l, "chrome_crashpad_handler ") {
			outside++
		}
	}
	t.Logf("%d chromium processes before Close, %d of them crashpad handlers (own process group, found by profile path)", len(before), outside)

	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	select {
	case <-b.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
	if !errors.Is(b.Err(), ErrClosed) {
		t.Errorf("Err = %v, want ErrClosed", b.Err())
	}
	if left := alive(t, pid, dir); len(left) > 0 {
		t.Errorf("processes left after Close: %q", left)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("user-data-dir %s still there: %v", dir, err)
	}
	if _, err := b.NewPage(ctx, PageOptions{}); err == nil {
		t.Error("NewPage after Close: no error")
	}
}

func TestPagesAreIsolated(t *testing.T) {
	defer goleak.VerifyNone(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<title>iso</title>")
	}))
	defer srv.Close()
	b := launch(t)
	defer b.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := b.NewPage(ctx, PageOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	c, err := b.NewPage(ctx, PageOptions{URL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	if a.BrowserContextID() == c.BrowserContextID() {
		t.Fatalf("pages share BrowserContext %s", a.BrowserContextID())
	}
	if err := a.Evaluate(ctx, `document.cookie = "k=v; max-age=3600"; localStorage.setItem("k", "v"); 1`, nil); err != nil {
		t.Fatal(err)
	}
	// Reload page a: its own context keeps what it stored.
	if err := a.Navigate(ctx, srv.URL+"/again"); err != nil {
		t.Fatal(err)
	}
	var got [2]string
	if err := a.Evaluate(ctx, `[document.cookie, String(localStorage.getItem("k"))]`, &got); err != nil {
		t.Fatal(err)
	}
	if got != [2]string{"k=v", "v"} {
		t.Fatalf("page a after reload: cookie/storage = %q, want k=v / v", got)
	}
	if err := c.Navigate(ctx, srv.URL+"/again"); err != nil {
		t.Fatal(err)
	}
	if err := c.Evaluate(ctx, `[document.cookie, String(localStorage.getItem("k"))]`, &got); err != nil {
		t.Fatal(err)
	}
	if got != [2]string{"", "null"} {
		t.Fatalf("page c sees page a's cookie/storage: %q", got)
	}
	if err := a.Close(ctx); err != nil {
		t.Error(err)
	}
	// c stays open: Browser.Close must release it.
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCrashDetection(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	pid, dir := b.PID(), b.rootDir
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{URL: "data:text/html,<p>crash me</p>"})
	if err != nil {
		t.Fatal(err)
	}

	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-b.Done():
	case <-time.After(time.Second):
		t.Fatal("Done not closed within 1 s of SIGKILL")
	}
	if err := b.Err(); err == nil || errors.Is(err, ErrClosed) {
		t.Fatalf("Err = %v, want a crash error", err)
	} else {
		t.Logf("Err: %.200s", err)
	}
	// The renderers and zygotes go with it, and the profile with them,
	// without waiting for Close.
	waitGone(t, pid, dir, 3*time.Second)
	for start := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			break
		} else if time.Since(start) > 2*time.Second {
			t.Errorf("user-data-dir %s still there 2 s after the crash (before Close): %v", dir, err)
			break
		}
	}
	if err := p.Evaluate(ctx, "1", nil); err == nil {
		t.Error("Evaluate on a dead browser: no error")
	}
	if err := p.Close(ctx); err != nil {
		t.Errorf("page Close after crash: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close after crash: %v", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("user-data-dir %s still there after Close: %v", dir, err)
	}
}

// The launching goroutine's thread may exit (a locked goroutine ending):
// Pdeathsig must not fire then.
func TestSurvivesLaunchingThreadExit(t *testing.T) {
	testenv.NeedsChromium(t)
	defer goleak.VerifyNone(t)
	type res struct {
		b   *Browser
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread exits with the goroutine
		b, err := Launch(context.Background(), Options{Headless: true})
		ch <- res{b, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.b.Close()
	time.Sleep(500 * time.Millisecond)
	select {
	case <-r.b.Done():
		t.Fatalf("chromium died when the launching thread exited: %v", r.b.Err())
	default:
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p, err := r.b.NewPage(ctx, PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
	if err := r.b.Close(); err != nil {
		t.Fatal(err)
	}
}

// Chromium must not outlive its owner, even one that is SIGKILLed.
func TestDiesWithOwner(t *testing.T) {
	testenv.NeedsChromium(t) // its helper process launches one
	defer goleak.VerifyNone(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %v", err)
	}
	var pid int
	var dir string
	if _, err := fmt.Sscanf(line, "PID %d %s", &pid, &dir); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", line)
	}
	// The owner cannot clean up after itself; we do.
	defer os.RemoveAll(dir)
	defer syscall.Kill(-pid, syscall.SIGKILL)

	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	deadline := time.Now().Add(3 * time.Second)
	for {
		st, ok := procState(pid)
		if !ok || st == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium %d still running (state %c) after its owner was killed", pid, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// With the main process gone the rest of the tree follows.
	waitGone(t, pid, dir, 5*time.Second)
}

func procState(pid int) (byte, bool) {
	st, _, ok := procStat(pid)
	return st, ok
}

func TestLaunchFailureReportsStderr(t *testing.T) {
	defer goleak.VerifyNone(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	script := filepath.Join(t.TempDir(), "fake-chromium")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho 'early words'\necho 'boom: cannot open display' >&2\nexit 3\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err := Launch(context.Background(), Options{Path: script, Headless: true, StartTimeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "boom: cannot open display") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("Launch error = %v, want exit status and stderr tail", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("early exit noticed after %v", d)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temp dir left behind: %v", ents)
	}

	// A binary that never writes DevToolsActivePort: bounded by StartTimeout.
	hang := filepath.Join(t.TempDir(), "hang-chromium")
	if err := os.WriteFile(hang, []byte("#!/bin/sh\nexec sleep 30\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	_, err = Launch(context.Background(), Options{Path: hang, Headless: true, StartTimeout: 500 * time.Millisecond})
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Launch of a hanging binary = %v, want deadline exceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("StartTimeout 500ms took %v", d)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("temp dir left behind: %v", ents)
	}

	if _, err := Launch(context.Background(), Options{Path: filepath.Join(tmp, "missing")}); err == nil {
		t.Error("Launch of a missing binary: no error")
	}
}

func TestExtraFlags(t *testing.T) {
	for _, bad := range []string{"--remote-debugging-port=9222", "--remote-debugging-address=0.0.0.0", "--user-data-dir=/tmp/x", "nodash"} {
		if _, err := Launch(context.Background(), Options{Headless: true, ExtraFlags: []string{bad}}); err == nil {
			t.Errorf("ExtraFlags %q accepted", bad)
		}
	}
	if _, err := Launch(context.Background(), Options{Headless: true, NoSandbox: "maybe"}); err == nil {
		t.Error("NoSandbox maybe accepted")
	}

	args, err := buildArgs(Options{Headless: true, NoSandbox: "false", ExtraFlags: []string{"--disable-features=Foo,Translate", "--auto-open-devtools-for-tabs"}}, "/p")
	if err != nil {
		t.Fatal(err)
	}
	joined := " " + strings.Join(args, " ") + " "
	for _, want := range []string{" --headless=new ", " --disable-extensions ", " --window-size=1280,720 ",
		" --remote-debugging-port=0 ", " --remote-debugging-address=127.0.0.1 ", " --user-data-dir=/p ",
		" --disable-features=Translate,MediaRouter,Foo ", " --auto-open-devtools-for-tabs ", " --hide-scrollbars ", " --mute-audio "} {
		if !strings.Contains(joined, want) {
			t.Errorf("args lack %q: %s", want, joined)
		}
	}
	if strings.Contains(joined, "--no-sandbox") {
		t.Errorf("NoSandbox false gave --no-sandbox: %s", joined)
	}
	if strings.Count(joined, "--disable-features") != 1 {
		t.Errorf("disable-features not merged: %s", joined)
	}

	args, err = buildArgs(Options{NoSandbox: "true", ExtraFlags: []string{"--load-extension=/ext", "--disable-extensions", "--window-size=640,480"}}, "/p")
	if err != nil {
		t.Fatal(err)
	}
	joined = " " + strings.Join(args, " ") + " "
	if strings.Contains(joined, " --disable-extensions ") || strings.Contains(joined, "--headless") ||
		!strings.Contains(joined, " --no-sandbox ") || strings.Count(joined, "--window-size") != 1 {
		t.Errorf("extension flags: %s", joined)
	}

	auto, _ := buildArgs(Options{}, "/p")
	if got, want := strings.Contains(strings.Join(auto, " "), "--no-sandbox"), os.Geteuid() == 0; got != want {
		t.Errorf("NoSandbox auto: --no-sandbox=%v, euid %d", got, os.Geteuid())
	}
}

func TestProbe(t *testing.T) {
	testenv.NeedsChromium(t) // runs chromium --version
	defer goleak.VerifyNone(t)
	v, err := Probe(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(v, "Chromium") {
		t.Errorf("Probe = %q", v)
	}
	t.Logf("probe: %s", v)
	if _, err := Probe(context.Background(), "/nonexistent/chromium"); err == nil {
		t.Error("Probe of a missing binary: no error")
	}
}

func TestParseActivePort(t *testing.T) {
	for in, want := range map[string]string{
		"40199\n/devtools/browser/abc\n": "ws://127.0.0.1:40199/devtools/browser/abc",
		"40199\n":                        "",
		"x\n/devtools/browser/abc":       "",
		"70000\n/devtools/browser/abc":   "",
		"1\n/json/version":               "",
	} {
		got, ok := parseActivePort([]byte(in))
		if got != want || ok != (want != "") {
			t.Errorf("parseActivePort(%q) = %q, %v", in, got, ok)
		}
	}
}

// crashWatch records the targets WatchPages reports crashed.
type crashWatch struct {
	ch chan TargetEvent
}

func watchCrashes(t *testing.T, b *Browser) *crashWatch {
	t.Helper()
	w := &crashWatch{ch: make(chan TargetEvent, 16)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stop, err := b.WatchPages(ctx, func(ev TargetEvent) {
		if ev.Crashed {
			select {
			case w.ch <- ev:
			default:
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return w
}

func (w *crashWatch) wait(t *testing.T, id string, d time.Duration) TargetEvent {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case ev := <-w.ch:
			if ev.TargetID == id {
				return ev
			}
		case <-deadline:
			t.Fatalf("no Target.targetCrashed for %s within %v", id, d)
		}
	}
}

// A crashed renderer is reported by WatchPages, its page stops answering,
// and Reload brings the same target back with a new renderer.
func TestRendererCrashAndReload(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	defer b.Close()
	w := watchCrashes(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{URL: "data:text/html,<title>before</title>"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Evaluate(ctx, "document.title = 'changed'", nil); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := p.CrashRenderer(ctx); err != nil {
		t.Fatal(err)
	}
	ev := w.wait(t, p.TargetID(), 3*time.Second)
	t.Logf("Target.targetCrashed after %v, status %q", time.Since(start).Round(time.Millisecond), ev.Status)
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	err = p.Ping(pctx)
	pcancel()
	if err == nil {
		t.Fatal("Ping of a crashed page answered")
	}
	t.Logf("Ping of the crashed page: %.120v", err)

	start = time.Now()
	if err := p.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	var title string
	for {
		err := p.Evaluate(ctx, "document.title", &title)
		if err == nil && title == "before" {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("after Reload: title %q, %v", title, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("page back %v after Reload", time.Since(start).Round(time.Millisecond))
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
}

// A script that never yields leaves Ping unanswered; CrashRenderer ends
// that renderer although its main thread never runs again, and the page
// comes back with Reload.
func TestHungRendererCrashed(t *testing.T) {
	defer goleak.VerifyNone(t)
	b := launch(t)
	defer b.Close()
	w := watchCrashes(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := b.NewPage(ctx, PageOptions{URL: "data:text/html,<title>hang</title>"})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping of a live page: %v", err)
	}
	if err := p.Evaluate(ctx, "setTimeout(() => { for (;;) {} }, 0), 1", nil); err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	err = p.Ping(pctx)
	pcancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ping of a hung page: %v, want a deadline", err)
	}
	start := time.Now()
	if err := p.CrashRenderer(ctx); err != nil {
		t.Fatal(err)
	}
	w.wait(t, p.TargetID(), 3*time.Second)
	t.Logf("hung renderer crashed %v after Page.crash", time.Since(start).Round(time.Millisecond))
	if err := p.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, time.Second)
		err := p.Ping(pctx)
		pcancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Ping after Reload: %v", err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Error(err)
	}
}
