package image

// The QEMU process behind a test guest, and the choice of accelerator.
// Not behind the imagetest tag: TestBootFallsBackToTCG runs in `make test`
// with a stand-in QEMU, so the fallback is checked on every machine, not
// only on one whose nested KVM happens to abort.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Accelerators.
const (
	accelKVM = "kvm"
	accelTCG = "tcg"
)

// kvmGrace is how long a KVM boot has to show its first serial output (or
// simply keep running) before it counts as booting. A KVM that cannot run
// the guest fails at vCPU set-up, before OVMF prints anything: on the
// machine of issue 15 QEMU aborted within a second ("failed to set MSR
// 0x10a", an assertion, exit 134).
var kvmGrace = 20 * time.Second

// ansi matches terminal control codes (OVMF and systemd colour the
// serial console).
var ansi = regexp.MustCompile(`\x1b\[[0-9;=?]*[A-Za-z]`)

// kvmBroken is set once a KVM boot failed in this test binary: later
// guests boot under TCG at once instead of failing the same way again.
var kvmBroken atomic.Bool

// qemuBinary is the QEMU the tests run: IMAGE_TEST_QEMU (a wrapper script
// in the fallback test, or another build) or Debian's.
func qemuBinary() string {
	if b := os.Getenv("IMAGE_TEST_QEMU"); b != "" {
		return b
	}
	return "qemu-system-x86_64"
}

// chooseAccel picks the accelerator for a new guest: TABCAST_IMAGE_ACCEL
// (make image-test IMAGE_ACCEL=kvm|tcg) forces one, with no fallback;
// otherwise KVM when /dev/kvm opens read-write and no KVM boot failed yet,
// with the fallback to TCG on the real boot.
func chooseAccel() (accel string, forced bool, err error) {
	switch a := os.Getenv("TABCAST_IMAGE_ACCEL"); a {
	case accelKVM, accelTCG:
		return a, true, nil
	case "", "auto":
	default:
		return "", false, fmt.Errorf("TABCAST_IMAGE_ACCEL=%q: want kvm, tcg or nothing (auto)", a)
	}
	if kvmBroken.Load() {
		return accelTCG, false, nil
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return accelTCG, false, nil
	}
	f.Close()
	return accelKVM, false, nil
}

// kvmFailureMarks are what QEMU prints when KVM cannot run the guest.
var kvmFailureMarks = []string{"failed to set MSR", "KVM internal error", "emulation failure",
	"kvm_buf_set_msrs", "failed to initialize kvm", "Assertion", "kvm run failed"}

// qemuGuest is one QEMU process at a time for one guest: each boot
// (-no-reboot makes every guest reboot an exit) is a new process. Its
// serial log and QEMU's own stderr are files that outlive each process,
// appended to boot after boot.
type qemuGuest struct {
	t      testing.TB
	serial string                      // serial console log (QEMU appends)
	stderr string                      // QEMU's stderr, every boot appended
	args   func(accel string) []string // QEMU's arguments for an accelerator
	accel  string
	forced bool // TABCAST_IMAGE_ACCEL: no fallback
	boots  []string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// start boots the guest. Under KVM (not forced) it watches the boot's
// first seconds: a QEMU that exits before the guest printed anything
// (or with KVM's failure marks on stderr) is logged with why, and the same
// disk boots again under TCG; the guest stays on TCG from then on.
func (g *qemuGuest) start() error {
	for {
		before := fileSize(g.serial)
		errBefore := fileSize(g.stderr)
		if err := g.launch(); err != nil {
			return err
		}
		if g.accel != accelKVM || g.forced {
			return nil
		}
		why := g.watchEarlyExit(before, errBefore)
		if why == "" {
			return nil
		}
		kvmBroken.Store(true)
		g.t.Logf("QEMU under KVM cannot boot this guest (%s); booting the same disk again under TCG", why)
		g.accel = accelTCG
	}
}

// launch starts one QEMU process with the current accelerator.
func (g *qemuGuest) launch() error {
	errf, err := os.OpenFile(g.stderr, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(errf, "--- boot %d (%s) %s\n", len(g.boots)+1, g.accel, time.Now().Format(time.RFC3339))
	cmd := exec.Command(qemuBinary(), g.args(g.accel)...)
	cmd.Stderr = errf
	if err := cmd.Start(); err != nil {
		errf.Close()
		return fmt.Errorf("qemu: %w", err)
	}
	g.boots = append(g.boots, g.accel)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); errf.Close(); close(done) }()
	g.mu.Lock()
	g.cmd, g.done = cmd, done
	g.mu.Unlock()
	return nil
}

// watchEarlyExit waits until the boot shows serial output, kvmGrace
// passes, or QEMU exits; it says why the boot failed, or "" when it did
// not.
func (g *qemuGuest) watchEarlyExit(serialBefore, stderrBefore int64) string {
	g.mu.Lock()
	done := g.done
	g.mu.Unlock()
	deadline := time.After(kvmGrace)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			out := readFrom(g.stderr, stderrBefore)
			mark := ""
			for _, m := range kvmFailureMarks {
				if strings.Contains(out, m) {
					mark = m
					break
				}
			}
			if fileSize(g.serial) > serialBefore && mark == "" {
				return "" // it booted and the guest ended it: not KVM's doing
			}
			code := -1
			if g.cmd.ProcessState != nil {
				code = g.cmd.ProcessState.ExitCode()
			}
			return fmt.Sprintf("QEMU exited with status %d before the guest's first output: %s", code, firstLine(out, mark))
		case <-tick.C:
			if fileSize(g.serial) > serialBefore {
				return ""
			}
		case <-deadline:
			return ""
		}
	}
}

// stop ends QEMU if it runs.
func (g *qemuGuest) stop() {
	g.mu.Lock()
	cmd, done := g.cmd, g.done
	g.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
	default:
		_ = cmd.Process.Kill()
		<-done
	}
}

// exited reports whether QEMU has ended (the guest rebooted or powered off).
func (g *qemuGuest) exited() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done == nil {
		return true
	}
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// waitExit waits for the guest to reboot (QEMU exits: -no-reboot).
func (g *qemuGuest) waitExit(timeout time.Duration) bool {
	g.mu.Lock()
	done := g.done
	g.mu.Unlock()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// keepLogsOnFailure, registered as a cleanup, keeps the serial log and
// QEMU's stderr of a failed test: copied to TABCAST_IMAGE_LOGS (default
// dist/image-test-logs under root) in a folder named after the test, and
// their last 50 lines printed, instead of vanishing with the temporary
// directory.
func (g *qemuGuest) keepLogsOnFailure(root string) {
	if !g.t.Failed() {
		return
	}
	dir := os.Getenv("TABCAST_IMAGE_LOGS")
	if dir == "" {
		dir = filepath.Join(root, "dist", "image-test-logs")
	}
	dir = filepath.Join(dir, strings.ReplaceAll(g.t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		g.t.Logf("keeping the guest's logs: %v", err)
	}
	for _, f := range []struct{ what, path string }{{"serial console", g.serial}, {"QEMU stderr", g.stderr}} {
		dst := filepath.Join(dir, filepath.Base(f.path))
		if err := copyFile(f.path, dst); err != nil {
			g.t.Logf("%s: not kept: %v", f.what, err)
			continue
		}
		g.t.Logf("%s (boots: %s), kept in %s; its last 50 lines:\n%s", f.what, strings.Join(g.boots, ", "), dst, lastLines(f.path, 50))
	}
}

func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// readFrom is a file's text from offset on.
func readFrom(path string, offset int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return ""
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1<<20))
	return string(b)
}

// firstLine is the line holding mark (or the first non-empty one).
func firstLine(out, mark string) string {
	var first string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "--- boot ") {
			continue
		}
		if first == "" {
			first = l
		}
		if mark != "" && strings.Contains(l, mark) {
			return l
		}
	}
	if first == "" {
		return "(nothing on stderr)"
	}
	return first
}

// lastLines is the last n lines of a file, terminal control codes removed.
func lastLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(ansi.ReplaceAll(b, nil)))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
