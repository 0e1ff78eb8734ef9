package supervisor

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"github.com/hashicorp/go-plugin/runner"
	"github.com/tabcast/tabcast/plugins"
	"github.com/tabcast/tabcast/plugins/auth"
	"github.com/tabcast/tabcast/plugins/base"
	"github.com/tabcast/tabcast/plugins/capture"
	"github.com/tabcast/tabcast/plugins/encoder"
	"github.com/tabcast/tabcast/plugins/turn"
)

// instance is one process of a handle, from fork to reaping.
type instance struct {
	gen        uint64
	gpc        *plugin.Client
	run        *procRunner
	client     any
	base       base.Plugin
	info       base.Info
	apiVersion int
	logs       []*lineLogger

	startErr   chan error    // cap 1: outcome of gpc.Start from the holder
	release    chan struct{} // closed once the process is reaped
	holderDone chan struct{}

	pingStop context.CancelFunc
	pingWG   sync.WaitGroup
	hung     chan struct{} // closed by the pinger; hungErr is set before
	hungErr  error
}

// pluginSets are the SDK's versioned plugin sets of a kind; the adapters'
// Impl is unused on the host side, so versions come from the SDK.
func pluginSets(kind string) map[int]plugin.PluginSet {
	switch kind {
	case plugins.KindCapture:
		return capture.PluginSets(nil)
	case plugins.KindEncoder:
		return encoder.PluginSets(nil)
	case plugins.KindAuth:
		return auth.PluginSets(nil)
	case plugins.KindTurn:
		return turn.PluginSets(nil)
	}
	return nil
}

// quietHCLog silences go-plugin's own logger. With it Off, go-plugin also
// skips re-logging plugin stderr, which we do ourselves (lineLogger), so no
// line is logged twice; process exits are logged by the run loop.
var quietHCLog = hclog.New(&hclog.LoggerOptions{Output: io.Discard, Level: hclog.Off})

// launch starts one process and brings it to serving: handshake, Info,
// SetConfig. On error nothing of it is left running.
func (h *Handle) launch() (*instance, error) {
	o := h.s.opts
	if h.spec.SHA256 != "" {
		if err := verifySHA256(h.spec.Path, h.spec.SHA256); err != nil {
			return nil, &permanentError{err}
		}
	}
	r := &procRunner{path: h.spec.Path, pidfd: -1, exited: make(chan struct{})}
	inst := &instance{
		run:        r,
		startErr:   make(chan error, 1),
		release:    make(chan struct{}),
		holderDone: make(chan struct{}),
		hung:       make(chan struct{}),
		logs: []*lineLogger{
			newLineLogger(h.log, "stderr"),
			newLineLogger(h.log, "stdout"),
			newLineLogger(h.log, "stderr"),
		},
	}
	inst.gpc = plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  plugins.Handshake,
		VersionedPlugins: pluginSets(h.spec.Kind),
		// RunnerFunc rather than Cmd: our runner kills the whole process
		// group and exposes the pid while go-plugin's Start still holds its
		// lock, so a hung handshake can be aborted at Shutdown.
		RunnerFunc:       r.prepare,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
		StartTimeout:     o.StartTimeout,
		Managed:          false,
		Logger:           quietHCLog,
		Stderr:           inst.logs[0],
		// What the plugin writes to os.Stdout/os.Stderr after Serve began
		// arrives over go-plugin's stdio stream.
		SyncStdout: inst.logs[1],
		SyncStderr: inst.logs[2],
	})
	// The whole launch (fork, handshake, Info, SetConfig) is bounded by
	// StartTimeout and by Shutdown: killing the process unblocks whatever
	// step is waiting, go-plugin's included.
	lctx, lcancel := context.WithTimeout(h.s.stopCtx, o.StartTimeout)
	defer lcancel()
	stopAbort := context.AfterFunc(lctx, r.abort)
	go inst.hold()

	err := <-inst.startErr
	if err == nil {
		err = h.handshake(lctx, inst)
	}
	if !stopAbort() && err == nil {
		err = errors.New("aborted") // lctx ended as the launch finished
	}
	if err != nil {
		switch {
		case h.s.stopCtx.Err() != nil:
			err = fmt.Errorf("%w: %w", ErrStopped, err)
		case lctx.Err() != nil:
			err = fmt.Errorf("start timed out after %v: %w", o.StartTimeout, err)
		}
		selfExited := r.Started() && isClosed(r.exited) // before we kill it
		h.teardown(inst, false)
		// The exit state tells why the plugin died, unless we killed it.
		if st := r.ExitState(); st != "" && (selfExited || st != "signal: killed") {
			err = fmt.Errorf("%w (process %s)", err, st)
		}
		return nil, err
	}

	pctx, stop := context.WithCancel(h.s.stopCtx)
	inst.pingStop = stop
	inst.pingWG.Add(1)
	go h.ping(pctx, inst)
	return inst, nil
}

// hold forks the plugin and keeps the forking OS thread alive while the
// process lives: Pdeathsig fires when the thread that forked exits, not the
// process. The thread is never unlocked, so it exits with this goroutine,
// which happens only after the child has been reaped. If the core dies,
// all its threads die and the kernel SIGKILLs the plugin.
func (inst *instance) hold() {
	defer close(inst.holderDone)
	runtime.LockOSThread()
	_, err := inst.gpc.Start()
	inst.startErr <- err
	<-inst.release
}

// handshake dispenses the client, reads Info and applies the config.
func (h *Handle) handshake(ctx context.Context, inst *instance) error {
	rpc, err := inst.gpc.Client()
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	raw, err := rpc.Dispense(h.spec.Kind)
	if err != nil {
		return fmt.Errorf("dispense %s: %w", h.spec.Kind, err)
	}
	bp, ok := raw.(base.Plugin)
	if !ok {
		return &permanentError{fmt.Errorf("dispensed %T is not a plugin client", raw)}
	}
	inst.client, inst.base = raw, bp
	inst.apiVersion = inst.gpc.NegotiatedVersion()

	info, err := bp.Info(ctx)
	if err != nil {
		return fmt.Errorf("info: %w", err)
	}
	if info.Kind != "" && info.Kind != h.spec.Kind {
		return &permanentError{fmt.Errorf("plugin reports kind %q, spec says %q", info.Kind, h.spec.Kind)}
	}
	inst.info = info
	if info.APIVersion != 0 && info.APIVersion != inst.apiVersion {
		h.log.Warn("plugin reports another API version than negotiated",
			"reported", info.APIVersion, "negotiated", inst.apiVersion)
	}
	h.mu.Lock()
	conf := h.spec.Config // Reconfigure may replace it
	h.mu.Unlock()
	if err := bp.SetConfig(ctx, conf); err != nil {
		if _, ok := base.AsConfigError(err); ok {
			return &permanentError{fmt.Errorf("set config: %w", err)}
		}
		return fmt.Errorf("set config: %w", err)
	}
	return nil
}

// ping calls the plugin's Ping every PingInterval; two failures in a row
// mean it is hung.
func (h *Handle) ping(ctx context.Context, inst *instance) {
	defer inst.pingWG.Done()
	o := h.s.opts
	t := time.NewTicker(o.PingInterval)
	defer t.Stop()
	misses := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, o.PingTimeout)
		err := inst.base.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			misses = 0
			continue
		}
		misses++
		h.log.Debug("plugin ping failed", "misses", misses, "error", bound(err.Error()))
		if misses >= 2 {
			inst.hungErr = fmt.Errorf("%d pings in a row failed: %w", misses, err)
			close(inst.hung)
			return
		}
	}
}

// teardown ends an instance: graceful (Shutdown RPC, then go-plugin's
// close, ShutdownGrace in all) or not, then SIGKILL of the process group,
// and waits until the process is reaped and every goroutine of the
// instance has returned.
func (h *Handle) teardown(inst *instance, graceful bool) {
	if inst.pingStop != nil {
		inst.pingStop()
		inst.pingWG.Wait()
	}
	r := inst.run
	if graceful && inst.base != nil && h.s.forceCtx.Err() == nil {
		ctx, cancel := context.WithTimeout(h.s.forceCtx, h.s.opts.ShutdownGrace)
		if err := inst.base.Shutdown(ctx); err != nil {
			h.log.Debug("plugin Shutdown RPC failed", "error", bound(err.Error()))
		}
		killed := make(chan struct{})
		// Owned here: gpc.Kill closes the connection (the plugin's server
		// stops and its main returns) and returns once the process is
		// reaped, which the group kill below guarantees.
		go func() {
			defer close(killed)
			inst.gpc.Kill()
		}()
		select {
		case <-r.exited:
		case <-ctx.Done():
			h.log.Warn("plugin did not exit within the grace period; killing")
		}
		cancel()
		r.killGroup()
		<-killed
	} else {
		r.killGroup()
		inst.gpc.Kill()
	}
	close(inst.release)
	<-inst.holderDone
	if r.Started() {
		<-r.exited
	}
	for _, l := range inst.logs {
		l.Flush()
	}
	if r.tmpDir != "" {
		_ = os.RemoveAll(r.tmpDir)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// verifySHA256 checks the binary against the expected hex digest.
func verifySHA256(path, want string) error {
	wantB, err := hex.DecodeString(want)
	if err != nil {
		return fmt.Errorf("sha256: bad expected digest: %w", err)
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("sha256: %w", err)
	}
	defer f.Close()
	hs := sha256.New()
	if _, err := io.Copy(hs, f); err != nil {
		return fmt.Errorf("sha256: read %s: %w", path, err)
	}
	if subtle.ConstantTimeCompare(hs.Sum(nil), wantB) != 1 {
		return errors.New("sha256 mismatch: binary does not match the configured digest")
	}
	return nil
}

// Linux waitid constants (not all are in package syscall).
const (
	pPID     = 1
	pPIDFD   = 3
	wEXITED  = 0x4
	wNOWAIT  = 0x1000000
	sigInfoN = 128 // sizeof(siginfo_t)
)

// procRunner is go-plugin's runner.Runner for one plugin process: its own
// process group, Pdeathsig, group kill, and an exit signal that does not
// depend on the stdout/stderr pipes being closed (a grandchild may hold
// them).
type procRunner struct {
	path   string
	cmd    *exec.Cmd
	stdout io.ReadCloser
	stderr io.ReadCloser
	tmpDir string
	pidfd  int // written by cmd.Start; ours to close

	// exited is closed once the process has exited (not yet reaped).
	exited chan struct{}

	mu        sync.Mutex
	pid       int
	started   bool
	aborted   bool
	exitState string
}

var _ runner.Runner = (*procRunner)(nil)

// prepare is the ClientConfig.RunnerFunc: cmd carries go-plugin's env.
func (r *procRunner) prepare(_ hclog.Logger, cmd *exec.Cmd, tmpDir string) (runner.Runner, error) {
	r.tmpDir = tmpDir
	c := exec.Command(r.path)
	c.Env = cmd.Env
	// Stdin stays nil (/dev/null): plugins have no business with ours.
	c.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:   true,            // Shutdown kills the group
		Pdeathsig: syscall.SIGKILL, // the core dying kills the plugin
		PidFD:     &r.pidfd,
	}
	var err error
	if r.stdout, err = c.StdoutPipe(); err != nil {
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	if r.stderr, err = c.StderrPipe(); err != nil {
		return nil, fmt.Errorf("stderr pipe: %w", err)
	}
	r.cmd = c
	return r, nil
}

// Start forks; called by go-plugin on the holder's locked thread.
func (r *procRunner) Start(context.Context) error {
	if err := r.cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", r.path, err)
	}
	pid := r.cmd.Process.Pid
	r.mu.Lock()
	r.pid, r.started = pid, true
	aborted := r.aborted
	r.mu.Unlock()
	go r.waitExit(pid, r.pidfd)
	if aborted {
		r.killGroup()
	}
	return nil
}

// waitExit closes r.exited when the process exits, without reaping it
// (go-plugin's Wait reaps). Owned by the runner; returns at process exit,
// which teardown guarantees.
func (r *procRunner) waitExit(pid, pidfd int) {
	defer close(r.exited)
	idtype, id := uintptr(pPID), uintptr(pid)
	if pidfd >= 0 {
		defer syscall.Close(pidfd)
		idtype, id = pPIDFD, uintptr(pidfd)
	}
	var info [sigInfoN]byte
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_WAITID, idtype, id,
			uintptr(unsafe.Pointer(&info)), wEXITED|wNOWAIT, 0, 0)
		if e != syscall.EINTR {
			return
		}
	}
}

func (r *procRunner) Wait(context.Context) error {
	err := r.cmd.Wait()
	st := "exited"
	if ps := r.cmd.ProcessState; ps != nil {
		st = ps.String()
	}
	r.mu.Lock()
	r.exitState = st
	r.mu.Unlock()
	return err
}

// Kill SIGKILLs the whole process group (the plugin and what it spawned).
func (r *procRunner) Kill(context.Context) error {
	r.killGroup()
	return nil
}

func (r *procRunner) killGroup() {
	r.mu.Lock()
	pid := r.pid
	r.mu.Unlock()
	if pid > 0 {
		// ESRCH: the group is gone already.
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
}

// abort makes a start in progress fail by killing the process.
func (r *procRunner) abort() {
	r.mu.Lock()
	r.aborted = true
	r.mu.Unlock()
	r.killGroup()
}

// PID is the process id (and process group id), 0 before the fork.
func (r *procRunner) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pid
}

// Started reports whether the fork succeeded.
func (r *procRunner) Started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.started
}

// ExitState is "exit status 1", "signal: killed"…, "" until reaped.
func (r *procRunner) ExitState() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exitState
}

func (r *procRunner) ID() string {
	if pid := r.PID(); pid > 0 {
		return strconv.Itoa(pid)
	}
	return "" // go-plugin's Kill does nothing for an unstarted runner
}

func (r *procRunner) Diagnose(context.Context) string { return "" }
func (r *procRunner) Stdout() io.ReadCloser           { return r.stdout }
func (r *procRunner) Stderr() io.ReadCloser           { return r.stderr }
func (r *procRunner) Name() string                    { return r.path }

func (r *procRunner) PluginToHost(n, a string) (string, string, error) { return n, a, nil }
func (r *procRunner) HostToPlugin(n, a string) (string, string, error) { return n, a, nil }
