package supervisor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
)

var (
	pluginBin    string // normal test plugin
	failStartBin string // symlink whose name makes the plugin exit 1 at start
	coreBin      string // stand-in core for the SIGKILL test
)

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "supervisor-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goBin); err != nil {
		goBin = "go"
	}
	build := exec.Command(goBin, "build", "-o", dir+string(os.PathSeparator), "./internal/testplugin", "./internal/testcore")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building test binaries:", err)
		return 1
	}
	pluginBin = filepath.Join(dir, "testplugin")
	coreBin = filepath.Join(dir, "testcore")
	failStartBin = filepath.Join(dir, "capture-failstart")
	if err := os.Symlink(pluginBin, failStartBin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// syncBuffer is the core's log output in tests.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// entries decodes every JSON log line so far.
func (b *syncBuffer) entries(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
	b.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(data, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("core log line is not JSON: %q: %v", line, err)
		}
		m["_raw"] = string(line)
		out = append(out, m)
	}
	return out
}

// waitEntry waits for a log entry with msg (and plugin name).
func (b *syncBuffer) waitEntry(t *testing.T, plugin, msg string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, e := range b.entries(t) {
			if e["msg"] == msg && e["plugin"] == plugin {
				return e
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no log entry %q for plugin %q in:\n%s", msg, plugin, b.String())
	return nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testOptions(log *syncBuffer) Options {
	return Options{
		Logger:       slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
		StartTimeout: 10 * time.Second,
		// Pings lenient enough that a loaded CI box never looks hung; the
		// hang test sets its own.
		PingInterval:  300 * time.Millisecond,
		PingTimeout:   time.Second,
		BackoffMin:    50 * time.Millisecond,
		BackoffMax:    500 * time.Millisecond,
		CrashBudget:   50,
		CrashWindow:   time.Minute,
		ShutdownGrace: time.Second,
	}
}

func captureSpec(name, path, config string) Spec {
	return Spec{Name: name, Kind: plugins.KindCapture, Path: path, Config: json.RawMessage(config)}
}

// supervise returns a supervisor whose Shutdown, child-process check and
// goroutine-leak check run at the end of the test.
func supervise(t *testing.T, o Options) *Supervisor {
	t.Helper()
	ignore := goleak.IgnoreCurrent()
	s := New(o)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if kids := children(t); len(kids) != 0 {
			t.Errorf("child processes left after Shutdown: %v", kids)
		}
		goleak.VerifyNone(t, ignore)
	})
	return s
}

// procStat is the part of /proc/PID/stat the tests need.
type procStat struct {
	pid, ppid, pgrp int
	state           byte
}

func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, false
	}
	// "pid (comm) state ppid pgrp ..."; comm may hold spaces and parens.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 3 {
		return procStat{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	pgrp, _ := strconv.Atoi(f[2])
	return procStat{pid: pid, ppid: ppid, pgrp: pgrp, state: f[0][0]}, true
}

func allProcs() []procStat {
	ents, _ := os.ReadDir("/proc")
	var out []procStat
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st, ok := readStat(pid); ok {
			out = append(out, st)
		}
	}
	return out
}

// children lists processes whose parent is the test process.
func children(t *testing.T) []procStat {
	t.Helper()
	var out []procStat
	for _, p := range allProcs() {
		if p.ppid == os.Getpid() {
			out = append(out, p)
		}
	}
	return out
}

// inGroup lists live processes in process group pgid.
func inGroup(pgid int) []procStat {
	var out []procStat
	for _, p := range allProcs() {
		if p.pgrp == pgid && p.state != 'Z' && p.state != 'X' {
			out = append(out, p)
		}
	}
	return out
}

// alive is true when pid exists and is not a zombie; a zombie is dead (and
// the tests check it is not ours).
func alive(t *testing.T, pid int) bool {
	t.Helper()
	st, ok := readStat(pid)
	if !ok {
		return false
	}
	if st.state == 'Z' || st.state == 'X' {
		if st.ppid == os.Getpid() {
			t.Errorf("pid %d is a zombie owned by the test process", pid)
		}
		return false
	}
	return true
}

// waitGen waits until the handle runs generation ≥ gen and returns its
// client, checked with a Ping.
func waitGen(t *testing.T, h *Handle, gen uint64, within time.Duration) (*capture.Client, uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	for {
		ch := h.Changes()
		cc, g, err := Dispense[*capture.Client](h).Get(ctx)
		if err != nil {
			t.Fatalf("Client waiting for generation %d: %v (status %+v)", gen, err, h.Status())
		}
		if g >= gen {
			if err := cc.Ping(ctx); err != nil {
				t.Fatalf("Ping generation %d: %v", g, err)
			}
			return cc, g
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("generation %d not reached within %v (status %+v)", gen, within, h.Status())
		}
	}
}

func waitState(t *testing.T, h *Handle, state State, within time.Duration) Status {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		ch := h.Changes()
		st := h.Status()
		if st.State == state {
			return st
		}
		select {
		case <-ch:
		case <-deadline.C:
			t.Fatalf("state %q not reached within %v (status %+v)", state, within, h.Status())
		}
	}
}

func TestStartServesAndRelogsStderr(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	ctx := context.Background()
	h, err := s.Start(ctx, captureSpec("capture-test", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	st := h.Status()
	if st.State != StateRunning || st.Generation != 1 || st.PID <= 0 || st.APIVersion != 1 ||
		st.Info.Version != "test-1" || st.Info.Kind != plugins.KindCapture || st.Kind != plugins.KindCapture {
		t.Fatalf("status after Start: %+v", st)
	}
	if ps, ok := readStat(st.PID); !ok || ps.pgrp != st.PID || ps.ppid != os.Getpid() {
		t.Fatalf("plugin process %d: stat %+v, want its own process group and parent = test", st.PID, ps)
	}
	if got := s.Handles(); len(got) != 1 || got[0] != h || h.Name() != "capture-test" {
		t.Fatalf("Handles: %v", got)
	}

	cc, gen, err := Dispense[*capture.Client](h).Get(ctx)
	if err != nil || gen != 1 {
		t.Fatalf("Client: gen %d err %v", gen, err)
	}
	flags, err := cc.ChromiumFlags(ctx)
	if err != nil || len(flags) != 1 || flags[0] != "--test-flag" {
		t.Fatalf("ChromiumFlags: %v %v", flags, err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n := 0
	err = cc.Stream(sctx, capture.Target{Width: 64, Height: 48}, func(f capture.Frame) error {
		if f.Format != capture.FormatJPEG || len(f.Data) < 4 || f.Data[0] != 0xFF || f.Data[1] != 0xD8 || f.Width != 64 {
			return fmt.Errorf("bad frame %+v", f)
		}
		if n++; n == 3 {
			cancel()
		}
		return nil
	})
	cancel()
	if n < 3 {
		t.Fatalf("Stream: %d frames, err %v", n, err)
	}

	// The plugin's stderr, re-logged once, at its level, tagged plugin=<name>.
	e := logs.waitEntry(t, "capture-test", "testplugin starting")
	if e["level"] != "INFO" || e["pid"] != float64(st.PID) {
		t.Errorf("starting entry: %v", e["_raw"])
	}
	w := logs.waitEntry(t, "capture-test", "testplugin warn line")
	if w["level"] != "WARN" || w["n"] != float64(7) {
		t.Errorf("warn entry: %v", w["_raw"])
	}
	p := logs.waitEntry(t, "capture-test", "plain stderr line")
	if p["level"] != "INFO" || p["stream"] != "stderr" {
		t.Errorf("plain entry: %v", p["_raw"])
	}
	counts := map[string]int{}
	for _, e := range logs.entries(t) {
		msg, _ := e["msg"].(string)
		counts[msg]++
		if strings.Count(e["_raw"].(string), `"plugin":`) > 1 {
			t.Errorf("duplicate plugin key: %s", e["_raw"])
		}
	}
	for _, m := range []string{"testplugin starting", "testplugin warn line", "plain stderr line"} {
		if counts[m] != 1 {
			t.Errorf("%q logged %d times, want 1", m, counts[m])
		}
	}
}

func TestRestartAfterSIGKILL(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs)) // BackoffMin 50ms (default 250ms)
	h, err := s.Start(context.Background(), captureSpec("capture-kill", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	old := h.Status().PID
	t0 := time.Now()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_, gen := waitGen(t, h, 2, 2*time.Second)
	took := time.Since(t0)
	st := h.Status()
	t.Logf("SIGKILL → generation %d serving (Ping OK) in %v", gen, took)
	if gen != 2 || st.Restarts != 1 || st.PID == old || st.State != StateRunning {
		t.Fatalf("status after restart: %+v", st)
	}
	if !strings.Contains(st.LastError, "signal: killed") {
		t.Errorf("LastError %q does not say the process was killed", st.LastError)
	}
	if alive(t, old) {
		t.Errorf("old plugin process %d still alive", old)
	}
}

// TestCrashDetectedWhileGrandchildHoldsPipes: the plugin dies but a child
// it spawned keeps its stderr pipe open; the exit must still be seen at
// once (not at pipe EOF) and the child killed with the group.
func TestCrashDetectedWhileGrandchildHoldsPipes(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.PingInterval = time.Minute // only the exit watch can notice
	s := supervise(t, o)
	h, err := s.Start(context.Background(), captureSpec("capture-gc", pluginBin, `{"spawn_child": true, "child_keeps_stderr": true}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	grandchild := int(logs.waitEntry(t, "capture-gc", "child spawned")["child_pid"].(float64))
	old := h.Status().PID
	t0 := time.Now()
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil { // the plugin only
		t.Fatal(err)
	}
	// Without the exit watch this would never happen: the pipe stays open
	// and pings are a minute apart.
	_, gen := waitGen(t, h, 2, 10*time.Second)
	t.Logf("plugin SIGKILLed (grandchild holding stderr) → generation %d serving in %v", gen, time.Since(t0))
	if alive(t, grandchild) {
		t.Errorf("grandchild %d of the crashed plugin survived", grandchild)
	}
}

func TestHungPluginKilledAndRestarted(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.PingInterval = 100 * time.Millisecond
	o.PingTimeout = 100 * time.Millisecond
	s := supervise(t, o)
	h, err := s.Start(context.Background(), captureSpec("capture-hang", pluginBin, `{"hang_after_ms": 300}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	old := h.Status().PID
	t0 := time.Now()
	_, gen := waitGen(t, h, 2, 5*time.Second)
	t.Logf("hang after 300ms → generation %d serving in %v after start", gen, time.Since(t0))
	st := h.Status()
	if !strings.Contains(st.LastError, "hung") {
		t.Errorf("LastError %q does not say hung", st.LastError)
	}
	if st.PID == old || alive(t, old) {
		t.Errorf("hung process %d not killed (status %+v)", old, st)
	}
}

func TestFailAtStartDegradesAfterBudget(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.CrashBudget, o.CrashWindow = 2, 10*time.Second
	o.BackoffMin, o.BackoffMax = 20*time.Millisecond, 50*time.Millisecond
	s := supervise(t, o)
	h, err := s.Start(context.Background(), captureSpec("capture-failstart", failStartBin, `{}`))
	if err == nil || h == nil {
		t.Fatalf("Start: handle %v err %v, want a handle and an error", h, err)
	}
	t.Logf("Start error: %v", err)
	if !strings.Contains(err.Error(), "capture-failstart") {
		t.Errorf("Start error does not name the plugin: %v", err)
	}
	st := waitState(t, h, StateDegraded, 10*time.Second)
	if st.Restarts != 2 || !strings.Contains(st.LastError, "exit status 1") || st.PID != 0 {
		t.Errorf("degraded status: %+v", st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, _, err := Dispense[capture.Capturer](h).Get(ctx); !errors.Is(err, ErrDegraded) || !strings.Contains(err.Error(), "capture-failstart") {
		t.Errorf("Client on degraded: %v", err)
	}
	if e := logs.waitEntry(t, "capture-failstart", "failing at start on purpose"); e["level"] != "ERROR" {
		t.Errorf("plugin error line: %v", e["_raw"])
	}
	if kids := children(t); len(kids) != 0 {
		t.Errorf("processes left: %v", kids)
	}
	// The "core" is fine: another plugin starts next to the degraded one.
	if _, err := s.Start(context.Background(), captureSpec("capture-ok", pluginBin, `{}`)); err != nil {
		t.Fatalf("Start next to a degraded plugin: %v", err)
	}
}

func TestManyFailureReportsOneRestart(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	h, err := s.Start(context.Background(), captureSpec("capture-report", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	c1, gen1 := waitGen(t, h, 1, time.Second)
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for range 20 {
		wg.Go(func() {
			<-gate
			h.ReportFailure(gen1, status.Error(codes.Unavailable, "connection refused"))
		})
	}
	close(gate)
	wg.Wait()
	_, gen2 := waitGen(t, h, 2, 5*time.Second)
	// Late reports about the old generation change nothing.
	h.ReportFailure(gen1, errors.New("late"))
	h.ReportFailure(gen2+5, errors.New("future"))
	time.Sleep(10 * testOptions(logs).BackoffMin)
	st := h.Status()
	if gen2 != 2 || st.Generation != 2 || st.Restarts != 1 || st.State != StateRunning {
		t.Fatalf("after 20 reports: gen %d status %+v, want exactly one restart", gen2, st)
	}
	if err := c1.Ping(context.Background()); err == nil {
		t.Errorf("the generation-1 client still answers after its process was replaced")
	}
}

func TestConfigErrorNamesKeyAndLeavesNoProcess(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	h, err := s.Start(context.Background(), captureSpec("capture-badcfg", pluginBin, `{"foo": {"bar": 1}}`))
	if err == nil {
		t.Fatal("Start accepted a config the plugin refuses")
	}
	t.Logf("Start error: %v", err)
	ce, ok := base.AsConfigError(err)
	if !ok || ce.Key != "foo.bar" || !strings.Contains(err.Error(), "foo.bar") {
		t.Fatalf("Start error %v does not carry the ConfigError for foo.bar", err)
	}
	if kids := children(t); len(kids) != 0 {
		t.Fatalf("processes left after a config error: %v", kids)
	}
	st := h.Status()
	if st.State != StateDegraded || st.Restarts != 0 || !strings.Contains(st.LastError, "foo.bar") {
		t.Fatalf("status: %+v", st)
	}
	// Not restarted.
	time.Sleep(5 * testOptions(logs).BackoffMin)
	if st := h.Status(); st.Restarts != 0 || st.State != StateDegraded {
		t.Fatalf("restarted after a config error: %+v", st)
	}
	// A plugin that rejects an unknown key names it too (base.DecodeStrict).
	_, err = s.Start(context.Background(), captureSpec("capture-badcfg2", pluginBin, `{"nope": 1}`))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "nope" {
		t.Fatalf("unknown key: %v", err)
	}
}

func TestSHA256(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	bin, err := os.ReadFile(pluginBin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(bin)
	wrong := sha256.Sum256([]byte("not the plugin"))

	spec := captureSpec("capture-sha-bad", pluginBin, `{}`)
	spec.SHA256 = hex.EncodeToString(wrong[:])
	h, err := s.Start(context.Background(), spec)
	if err == nil || !strings.Contains(err.Error(), "sha256 mismatch") || !strings.Contains(err.Error(), "capture-sha-bad") {
		t.Fatalf("Start with a wrong digest: %v", err)
	}
	if st := h.Status(); st.State != StateDegraded || st.Restarts != 0 || st.Generation != 0 {
		t.Fatalf("status: %+v", st)
	}
	for _, e := range logs.entries(t) {
		if e["plugin"] == "capture-sha-bad" && e["msg"] == "testplugin starting" {
			t.Fatal("a binary with a wrong digest was executed")
		}
	}

	spec = captureSpec("capture-sha-good", pluginBin, `{}`)
	spec.SHA256 = strings.ToUpper(hex.EncodeToString(sum[:]))
	if _, err := s.Start(context.Background(), spec); err != nil {
		t.Fatalf("Start with the right digest: %v", err)
	}
	spec.Name, spec.SHA256 = "capture-sha-junk", "xyz"
	if _, err := s.Start(context.Background(), spec); err == nil {
		t.Fatal("Start accepted a malformed digest")
	}
}

func TestShutdownLeavesNoProcess(t *testing.T) {
	logs := &syncBuffer{}
	s := New(testOptions(logs))
	ignore := goleak.IgnoreCurrent()
	ctx := context.Background()
	h1, err := s.Start(ctx, captureSpec("capture-a", pluginBin, `{"spawn_child": true}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	h2, err := s.Start(ctx, captureSpec("capture-b", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	if _, err := s.Start(ctx, captureSpec("capture-b", pluginBin, `{}`)); err == nil {
		t.Fatal("a second plugin with the same name was accepted")
	}
	e := logs.waitEntry(t, "capture-a", "child spawned")
	grandchild := int(e["child_pid"].(float64))
	pids := []int{h1.Status().PID, h2.Status().PID}
	if gs, ok := readStat(grandchild); !ok || gs.pgrp != pids[0] {
		t.Fatalf("grandchild %d: %+v, want it in group %d", grandchild, gs, pids[0])
	}

	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("Shutdown of 2 plugins (one with a grandchild) took %v", time.Since(t0))
	if kids := children(t); len(kids) != 0 {
		t.Errorf("children left: %v", kids)
	}
	for _, pid := range pids {
		if g := inGroup(pid); len(g) != 0 {
			t.Errorf("processes left in group %d: %v", pid, g)
		}
	}
	if alive(t, grandchild) {
		t.Errorf("grandchild %d survived Shutdown", grandchild)
	}
	for _, h := range []*Handle{h1, h2} {
		if st := h.Status(); st.State != StateStopped || st.PID != 0 {
			t.Errorf("status after Shutdown: %+v", st)
		}
		if _, _, err := Dispense[capture.Capturer](h).Get(ctx); !errors.Is(err, ErrStopped) {
			t.Errorf("Client after Shutdown: %v", err)
		}
	}
	if _, err := s.Start(ctx, captureSpec("capture-c", pluginBin, `{}`)); !errors.Is(err, ErrStopped) {
		t.Errorf("Start after Shutdown: %v", err)
	}
	if err := s.Shutdown(sctx); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	goleak.VerifyNone(t, ignore)
}

func TestShutdownExpiredContextKills(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.ShutdownGrace = 30 * time.Second // never waited for: ctx is already done
	s := New(o)
	ignore := goleak.IgnoreCurrent()
	h, err := s.Start(context.Background(), captureSpec("capture-x", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid := h.Status().PID
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	t0 := time.Now()
	err = s.Shutdown(ctx)
	if err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown with a done ctx: %v", err)
	}
	if took := time.Since(t0); took > 5*time.Second {
		t.Errorf("forced Shutdown took %v", took)
	}
	if alive(t, pid) || len(children(t)) != 0 {
		t.Errorf("plugin %d left after forced Shutdown", pid)
	}
	goleak.VerifyNone(t, ignore)
}

// TestPluginSurvivesThreadChurn: Pdeathsig is tied to the forking thread;
// threads that other goroutines lock and drop must not take the plugin.
func TestPluginSurvivesThreadChurn(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	h, err := s.Start(context.Background(), captureSpec("capture-churn", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	// Rounds of goroutines that lock whatever thread they get and exit
	// locked, which makes the runtime end that thread.
	for range 4 {
		var wg sync.WaitGroup
		for range 64 {
			wg.Go(func() {
				runtime.LockOSThread() // never unlocked: the thread exits with us
				time.Sleep(time.Millisecond)
			})
		}
		wg.Wait()
	}
	time.Sleep(200 * time.Millisecond)
	if st := h.Status(); st.Generation != 1 || !alive(t, st.PID) {
		t.Fatalf("plugin did not survive thread churn: %+v", st)
	}
	waitGen(t, h, 1, time.Second)
}

// TestNoPluginOutlivesSIGKILLedCore runs a stand-in core that starts two
// plugins, SIGKILLs it, and checks both plugins die with it.
func TestNoPluginOutlivesSIGKILLedCore(t *testing.T) {
	core := exec.Command(coreBin, pluginBin, pluginBin)
	out, err := core.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var coreErr syncBuffer
	core.Stderr = &coreErr
	if err := core.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "PIDS ") {
				lines <- sc.Text()
				break
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(20 * time.Second):
		_ = core.Process.Kill()
		_ = core.Wait()
		t.Fatalf("the core did not report its plugins; stderr:\n%s", coreErr.String())
	}
	var pids []int
	for _, f := range strings.Fields(strings.TrimPrefix(line, "PIDS ")) {
		pid, err := strconv.Atoi(f)
		if err != nil || pid <= 0 {
			t.Fatalf("bad PIDS line %q", line)
		}
		pids = append(pids, pid)
	}
	if len(pids) != 2 {
		t.Fatalf("PIDS line %q", line)
	}
	for _, pid := range pids {
		if st, ok := readStat(pid); !ok || st.ppid != core.Process.Pid || !alive(t, pid) {
			t.Fatalf("plugin %d is not a live child of the core: %+v", pid, st)
		}
	}
	t.Cleanup(func() { // do not leak plugins when the test fails
		for _, pid := range pids {
			if alive(t, pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	t0 := time.Now()
	if err := core.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = core.Wait()
	for <-lines != "" {
	}
	deadline := t0.Add(2 * time.Second)
	for {
		var left []int
		for _, pid := range pids {
			if alive(t, pid) {
				left = append(left, pid)
			}
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugins %v survived the SIGKILLed core by 2s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("core SIGKILLed → both plugins gone in %v", time.Since(t0))
}

func TestBackoff(t *testing.T) {
	min, max := 250*time.Millisecond, 15*time.Second
	want := []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second,
		4 * time.Second, 8 * time.Second, 15 * time.Second, 15 * time.Second}
	for i, w := range want {
		if got := backoff(min, max, i+1); got != w {
			t.Errorf("backoff(attempt %d) = %v, want %v", i+1, got, w)
		}
	}
	if got := backoff(min, max, 1000); got != max {
		t.Errorf("backoff(1000) = %v", got)
	}
}

func TestStartRejectsBadSpec(t *testing.T) {
	s := supervise(t, testOptions(&syncBuffer{}))
	for _, spec := range []Spec{
		{Kind: plugins.KindCapture, Path: pluginBin},
		{Name: "x", Kind: "video", Path: pluginBin},
		{Name: "x", Kind: plugins.KindCapture, Path: "relative/bin"},
		{Name: "x", Kind: plugins.KindCapture, Path: pluginBin, Config: json.RawMessage(`[1]`)},
		{Name: "x", Kind: plugins.KindCapture, Path: pluginBin, Config: json.RawMessage(`{bad`)},
	} {
		if h, err := s.Start(context.Background(), spec); err == nil || h != nil {
			t.Errorf("Start(%+v) = %v, %v; want an error", spec, h, err)
		}
	}
	if len(s.Handles()) != 0 {
		t.Errorf("bad specs left handles: %v", s.Handles())
	}
}

// silentPlugin writes a "plugin" that never answers the handshake; the
// shell forks a sleep, so the process group has two members.
func silentPlugin(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "capture-silent")
	if err := os.WriteFile(p, []byte("#!/bin/sh\nsleep 60\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHandshakeTimeoutKillsProcess(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.StartTimeout = 500 * time.Millisecond
	o.CrashBudget, o.BackoffMin = 1, 20*time.Millisecond
	s := supervise(t, o)
	h, err := s.Start(context.Background(), captureSpec("capture-silent", silentPlugin(t), `{}`))
	if err == nil || !strings.Contains(err.Error(), "start timed out") {
		t.Fatalf("Start of a silent plugin: %v", err)
	}
	if kids := children(t); len(kids) != 0 {
		t.Errorf("processes left after a start timeout: %v", kids)
	}
	st := waitState(t, h, StateDegraded, 5*time.Second)
	if st.Restarts != 1 {
		t.Errorf("status: %+v", st)
	}
}

func TestShutdownDuringHandshake(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.StartTimeout = time.Minute
	s := New(o)
	ignore := goleak.IgnoreCurrent()
	startErr := make(chan error, 1)
	path := silentPlugin(t)
	go func() {
		_, err := s.Start(context.Background(), captureSpec("capture-silent", path, `{}`))
		startErr <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for len(children(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the silent plugin never started")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	t.Logf("Shutdown during a hung handshake took %v", time.Since(t0))
	if err := <-startErr; !errors.Is(err, ErrStopped) {
		t.Errorf("Start interrupted by Shutdown: %v", err)
	}
	if kids := children(t); len(kids) != 0 {
		t.Errorf("processes left: %v", kids)
	}
	goleak.VerifyNone(t, ignore)
}

// TestBackoffGrowsAndResetsAfterHealthyRun reads the attempt numbers the
// supervisor logs with each scheduled restart.
func TestBackoffGrowsAndResetsAfterHealthyRun(t *testing.T) {
	logs := &syncBuffer{}
	o := testOptions(logs)
	o.HealthyReset = time.Second
	s := supervise(t, o)
	h, err := s.Start(context.Background(), captureSpec("capture-backoff", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	kill := func(gen uint64) {
		t.Helper()
		waitGen(t, h, gen, 5*time.Second)
		if err := syscall.Kill(h.Status().PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
	}
	kill(1) // quick crashes: attempt 1, then 2
	kill(2)
	waitGen(t, h, 3, 5*time.Second)
	time.Sleep(o.HealthyReset + 200*time.Millisecond)
	kill(3) // after a healthy run: attempt 1 again
	waitGen(t, h, 4, 5*time.Second)
	var attempts []float64
	var delays []string
	for _, e := range logs.entries(t) {
		if e["msg"] == "plugin restart scheduled" {
			attempts = append(attempts, e["attempt"].(float64))
			delays = append(delays, e["in"].(string))
		}
	}
	if fmt.Sprint(attempts) != "[1 2 1]" || fmt.Sprint(delays) != "[50ms 100ms 50ms]" {
		t.Fatalf("restart attempts %v delays %v, want [1 2 1] [50ms 100ms 50ms]", attempts, delays)
	}
}

// TestReconfigure: a new config goes to the live plugin (no restart) and is
// what later restarts use; a refused one changes nothing and names its key.
func TestReconfigure(t *testing.T) {
	logs := &syncBuffer{}
	s := supervise(t, testOptions(logs))
	h, err := s.Start(context.Background(), captureSpec("capture-reconf", pluginBin, `{}`))
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	pid := h.Status().PID
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = h.Reconfigure(ctx, json.RawMessage(`{"foo":{"bar":1}}`))
	if ce, ok := base.AsConfigError(err); !ok || ce.Key != "foo.bar" {
		t.Fatalf("refused config: err %v, want a ConfigError on foo.bar", err)
	}
	if err := h.Reconfigure(ctx, json.RawMessage(`[1]`)); err == nil {
		t.Fatal("a config that is not an object was taken")
	}
	spawned := func() int {
		n := 0
		for _, e := range logs.entries(t) {
			if e["msg"] == "child spawned" {
				n++
			}
		}
		return n
	}
	if err := h.Reconfigure(ctx, json.RawMessage(`{"spawn_child": true}`)); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if st := h.Status(); st.PID != pid || st.Restarts != 0 {
		t.Fatalf("reconfigured by a restart: %+v (pid was %d)", st, pid)
	}
	waitFor(t, 2*time.Second, "the live plugin applied the config", func() bool { return spawned() == 1 })
	// A restart reuses the new config: the new process spawns its child too.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitGen(t, h, 2, 5*time.Second)
	waitFor(t, 3*time.Second, "the restarted plugin got the new config", func() bool { return spawned() == 2 })
}

// waitFor polls cond until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
