package browser

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// stderrTailSize bounds the Chromium stderr kept for error messages.
const stderrTailSize = 8 << 10

// ring keeps the last stderrTailSize bytes written to it.
type ring struct {
	mu  sync.Mutex
	buf []byte
}

func (r *ring) Write(p []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.buf = append(r.buf, p...)
	if over := len(r.buf) - stderrTailSize; over > 0 {
		// Copy down so the backing array stays bounded.
		n := copy(r.buf, r.buf[over:])
		r.buf = r.buf[:n]
	}
}

// WriteLine appends line and a newline (line is not modified: it may alias
// a scanner's buffer).
func (r *ring) WriteLine(line []byte) {
	r.mu.Lock()
	r.buf = append(append(r.buf, line...), '\n')
	r.mu.Unlock()
	r.Write(nil) // trims
}

// Tail returns at most max bytes of the end of the buffer, cut at a line start.
func (r *ring) Tail(max int) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.buf
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 && i+1 < len(b) {
			b = b[i+1:]
		}
	}
	return strings.TrimSpace(string(b))
}

// process is a running Chromium main process and the goroutines that own it.
type process struct {
	pid    int
	stderr *os.File // read end of the stderr pipe
	tail   ring

	exited  chan struct{} // closed when the main process has been reaped
	waitErr error         // valid after exited

	readerDone chan struct{} // closed when the stderr reader returned
}

// startProcess starts cmd in its own process group with Pdeathsig, so Chromium
// dies with us. Pdeathsig fires when the forking OS *thread* exits, so the
// start and the wait run on one goroutine locked to its thread; the thread
// stays alive (blocked in Wait) for exactly the life of the process.
//
// With cgroup (an open cgroup v2 directory) the process starts inside it.
func startProcess(cmd *exec.Cmd, log *slog.Logger, cgroup *os.File) (*process, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	// An *os.File stderr is handed to the child as is: no copy goroutine in
	// exec, so Wait returns when the main process exits even while its
	// children still hold the pipe.
	cmd.Stdout = nil
	cmd.Stderr = w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if cgroup != nil {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cgroup.Fd())
	}

	p := &process{stderr: r, exited: make(chan struct{}), readerDone: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, after the
		// process was reaped, which is the point.
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		r.Close()
		w.Close()
		return nil, err
	}
	// Only the children hold the write end now; EOF means they all exited.
	w.Close()
	go p.readStderr(log)
	return p, nil
}

func (p *process) readStderr(log *slog.Logger) {
	defer close(p.readerDone)
	sc := bufio.NewScanner(p.stderr)
	sc.Buffer(make([]byte, 0, 4096), 64<<10)
	for sc.Scan() {
		line := sc.Bytes()
		// Without a system bus (containers, appliances) Chromium logs
		// D-Bus failures by the dozen; they would crowd the real cause
		// out of the tail used in error messages.
		// The DevTools line carries the browser endpoint: not for error texts.
		if !bytes.Contains(line, []byte(":ERROR:dbus/")) && !bytes.HasPrefix(line, []byte("DevTools listening on ")) {
			p.tail.WriteLine(line)
		}
		log.Debug("chromium stderr", "line", string(line))
	}
	if err := sc.Err(); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
		// A line longer than the scanner buffer: keep draining raw so the
		// children never block on a full pipe.
		buf := make([]byte, 4096)
		for {
			n, err := p.stderr.Read(buf)
			p.tail.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}
}

// stopReader waits up to d for the stderr reader to hit EOF, then closes the
// read end so the reader returns regardless.
func (p *process) stopReader(d time.Duration) {
	select {
	case <-p.readerDone:
	case <-time.After(d):
	}
	p.stderr.Close()
	<-p.readerDone
}

// related lists live processes that belong to this browser: the members of
// its process group, and processes whose command line names dir (the
// crashpad handlers daemonize into their own group but carry the profile
// paths we gave them). Zombies are dead and are not listed.
func related(pgid int, dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		state, pg, ok := procStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if pg == pgid {
			out = append(out, pid)
			continue
		}
		if dir != "" {
			// dir+"/": every path we hand Chromium is below dir, and a bare
			// prefix could match a sibling temp dir with a longer name.
			cl, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if err == nil && bytes.Contains(cl, []byte(dir+"/")) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// procStat reads the state and the process group of pid from /proc/pid/stat.
func procStat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// comm may hold spaces and parentheses: fields start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0]=state f[1]=ppid f[2]=pgrp
	if len(f) < 3 || len(f[0]) == 0 {
		return 0, 0, false
	}
	pg, err := strconv.Atoi(f[2])
	if err != nil {
		return 0, 0, false
	}
	return f[0][0], pg, true
}

// killAll SIGKILLs the process group and every related process, then waits
// up to d for them to be gone.
func killAll(pgid int, dir string, d time.Duration) (left []int) {
	deadline := time.Now().Add(d)
	for {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		left = related(pgid, dir)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// openCgroup opens the cgroup v2 directory path for CLONE_INTO_CGROUP,
// making it when missing (the service's delegated subtree: systemd's
// Delegate=yes gives the service user its own cgroup). "" is no cgroup.
// A path that is not a cgroup v2 directory is refused here, not at the
// start: clone3 would only say EBADF or EINVAL.
func openCgroup(path string) (*os.File, error) {
	if path == "" {
		return nil, nil
	}
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("cgroup %q: not an absolute path", path)
	}
	// Made only when missing: the image's service sees /sys/fs/cgroup
	// read-only (ProtectControlGroups) with the cgroup made for it.
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(path, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return nil, fmt.Errorf("cgroup %s: not on a cgroup v2 file system", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", path, err)
	}
	return f, nil
}
