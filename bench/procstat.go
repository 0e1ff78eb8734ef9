package main

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// clockTicks is Linux's USER_HZ, 100 on every architecture Tabcast runs on.
const clockTicks = 100

type procSample struct {
	cpu time.Duration
	// pss is the proportional set size in bytes: shared pages (Chromium's
	// many processes, FFmpeg's libraries) are split among their users, so
	// sums over processes are not inflated the way RSS sums are.
	pss int64
}

func readPSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "Pss:" {
			var kb int64
			fmt.Sscan(f[1], &kb)
			return kb << 10
		}
	}
	return 0
}

func readProc(pid int) (procSample, string, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procSample{}, "", false
	}
	s := string(b)
	open, closeIdx := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || closeIdx < 0 {
		return procSample{}, "", false
	}
	comm := s[open+1 : closeIdx]
	f := strings.Fields(s[closeIdx+2:])
	if len(f) < 22 {
		return procSample{}, "", false
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return procSample{cpu: time.Duration(ut+st) * time.Second / clockTicks, pss: readPSS(pid)}, comm, true
}

// groups splits the appliance's process tree into core+plugins and
// Chromium (every process whose command name starts with "chrom").
type groups struct{ core, chromium procSample }

func sampleTree(root int) groups {
	var g groups
	add := func(pid int) {
		s, comm, ok := readProc(pid)
		if !ok {
			return
		}
		dst := &g.core
		if strings.HasPrefix(comm, "chrom") {
			dst = &g.chromium
		}
		dst.cpu += s.cpu
		dst.pss += s.pss
	}
	add(root)
	for _, p := range harness.Descendants(root) {
		add(p)
	}
	return g
}

// machine names the box a result was measured on.
func machine() string {
	return fmt.Sprintf("%s/%s, %d cores", runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
}
