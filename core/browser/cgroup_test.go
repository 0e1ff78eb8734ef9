package browser

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tabcast/tabcast/internal/testenv"
)

// cgroup2Mount is where this machine mounts the cgroup v2 hierarchy
// (/sys/fs/cgroup on a systemd host, /sys/fs/cgroup/unified on a hybrid
// one, as in this project's CI containers).
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint options - fstype source ...
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && i > 4 {
				return fields[4]
			}
		}
	}
	// A machine without cgroup v2 (or a container that hides it) cannot
	// run this; TestApplianceImage checks the same in the booted image.
	t.Skip("no cgroup v2 file system is mounted here; TestApplianceImage checks Options.Cgroup in the image")
	return ""
}

// cgroupOf is pid's cgroup v2 path ("0::/x/y" → "/x/y").
func cgroupOf(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(l, "0::"); ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("pid %d: no cgroup v2 line in %q", pid, b)
}

// TestLaunchIntoCgroup: with Options.Cgroup, Chromium's main process
// starts inside that cgroup (made when missing), and so does every process
// it forks (renderers, the network service): none runs outside it. A path
// that is no cgroup v2 directory is refused before anything starts.
func TestLaunchIntoCgroup(t *testing.T) {
	testenv.NeedsChromium(t)
	mount := cgroup2Mount(t)
	rel := fmt.Sprintf("/tabcast-test-%d", os.Getpid())
	dir := filepath.Join(mount, rel)
	t.Cleanup(func() { _ = os.Remove(dir) })
	if err := os.Mkdir(dir, 0o755); errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		t.Skipf("the cgroup v2 hierarchy at %s is read-only here (%v); TestApplianceImage checks Options.Cgroup in the image", mount, err)
	} else if err != nil {
		t.Fatal(err)
	}
	_ = os.Remove(dir) // Launch makes it

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := Launch(ctx, Options{Headless: true, Cgroup: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	p, err := b.NewPage(ctx, PageOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Navigate(ctx, "data:text/html,<p>in a cgroup</p>"); err != nil {
		t.Fatal(err)
	}
	if got, err := cgroupOf(b.PID()); err != nil || got != rel {
		t.Fatalf("Chromium's main process is in cgroup %q (%v), want %q", got, err, rel)
	}
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		t.Fatal(err)
	}
	in := map[int]bool{}
	for _, f := range strings.Fields(string(procs)) {
		n, _ := strconv.Atoi(f)
		in[n] = true
	}
	// Every process of Chromium's group (renderer, GPU, utility, zygotes).
	kids := processGroup(t, b.PID())
	if len(kids) < 3 {
		t.Fatalf("Chromium's process group has %d processes, want the browser, a zygote and a renderer at least", len(kids))
	}
	for _, pid := range kids {
		if !in[pid] {
			cg, _ := cgroupOf(pid)
			t.Errorf("Chromium process %d runs in %q, outside %s", pid, cg, rel)
		}
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Errorf("the cgroup still holds processes after Close: %v", err)
	}

	if _, err := Launch(ctx, Options{Headless: true, Cgroup: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "not on a cgroup v2 file system") {
		t.Errorf("a plain directory as the cgroup: %v, want refused", err)
	}
	if _, err := Launch(ctx, Options{Headless: true, Cgroup: "relative/path"}); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Errorf("a relative cgroup path: %v, want refused", err)
	}
}

// processGroup lists the processes whose process group is pgid.
func processGroup(t *testing.T, pgid int) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces.
		rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}
