package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/tabcast/tabcast/test/harness"
)

// clockTicks is Linux's USER_HZ, 100 on every architecture Tabcast runs on.
const clockTicks = 100

type procSample struct {
	cpu time.Duration
	rss int64 // bytes
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
	var ut, st, rssPages int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	fmt.Sscan(f[21], &rssPages)
	return procSample{
		cpu: time.Duration(ut+st) * time.Second / clockTicks,
		rss: rssPages * int64(os.Getpagesize()),
	}, comm, true
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
		dst.rss += s.rss
	}
	add(root)
	for _, p := range harness.Descendants(root) {
		add(p)
	}
	return g
}
