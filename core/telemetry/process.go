package telemetry

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Process names one child process tree of the core: a plugin and its pid.
type Process struct {
	Name string
	PID  int
}

// ProcessCollector reports CPU time and resident memory of the core's
// process tree at scrape time, from /proc: "core" is the core process
// itself, each plugin its process and descendants, and "chromium" every
// other descendant of the core (the Chromium browsers and their helpers).
type ProcessCollector struct {
	// Plugins lists the running plugins' processes; nil = none.
	Plugins func() []Process
	// Proc is the proc file system's root ("" = /proc); Self the core's
	// pid (0 = this process). For tests.
	Proc string
	Self int
}

var (
	cpuDesc = prometheus.NewDesc("tabcast_process_cpu_seconds_total",
		"CPU time (user and system) of the core, Chromium (all its processes) and each plugin (with its children); exited children that were waited for count with their parent.",
		[]string{"process"}, nil)
	rssDesc = prometheus.NewDesc("tabcast_process_rss_bytes",
		"Resident memory of the core, Chromium (all its processes) and each plugin (with its children).",
		[]string{"process"}, nil)
)

// Describe implements prometheus.Collector.
func (c *ProcessCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cpuDesc
	ch <- rssDesc
}

// clockTicks is USER_HZ, 100 on every Linux the appliance runs on.
const clockTicks = 100

type procInfo struct {
	ppid      int
	cpu, self float64 // seconds: with waited-for children, own only
}

// Collect implements prometheus.Collector.
func (c *ProcessCollector) Collect(ch chan<- prometheus.Metric) {
	root := c.Proc
	if root == "" {
		root = "/proc"
	}
	self := c.Self
	if self == 0 {
		self = os.Getpid()
	}
	procs := readProcs(root)
	children := map[int][]int{}
	for pid, p := range procs {
		children[p.ppid] = append(children[p.ppid], pid)
	}
	// tree sums pid and its descendants, marking them seen.
	seen := map[int]bool{self: true}
	tree := func(pid int) (cpu, rss float64) {
		stack := []int{pid}
		for len(stack) > 0 {
			q := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[q] {
				continue
			}
			seen[q] = true
			if p, ok := procs[q]; ok {
				cpu += p.cpu
				rss += vmRSS(filepath.Join(root, strconv.Itoa(q), "status"))
			}
			stack = append(stack, children[q]...)
		}
		return cpu, rss
	}
	emit := func(name string, cpu, rss float64) {
		ch <- prometheus.MustNewConstMetric(cpuDesc, prometheus.CounterValue, cpu, name)
		ch <- prometheus.MustNewConstMetric(rssDesc, prometheus.GaugeValue, rss, name)
	}
	if p, ok := procs[self]; ok {
		emit("core", p.self, vmRSS(filepath.Join(root, strconv.Itoa(self), "status")))
	}
	var plugins []Process
	if c.Plugins != nil {
		plugins = c.Plugins()
	}
	sums := map[string][2]float64{}
	for _, pl := range plugins {
		if pl.PID <= 0 || pl.Name == "" {
			continue
		}
		cpu, rss := tree(pl.PID)
		s := sums[pl.Name]
		sums[pl.Name] = [2]float64{s[0] + cpu, s[1] + rss}
	}
	for name, s := range sums {
		emit(name, s[0], s[1])
	}
	var cpu, rss float64
	for _, q := range children[self] {
		c, r := tree(q)
		cpu += c
		rss += r
	}
	emit("chromium", cpu, rss)
}

// readProcs reads every process's parent and CPU time.
func readProcs(root string) map[int]procInfo {
	out := map[int]procInfo{}
	ents, err := os.ReadDir(root)
	if err != nil {
		return out
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// The command name is in parentheses and may hold anything:
		// fields are counted after the last ')'. Field 3 is index 0.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) < 15 {
			continue
		}
		num := func(k int) float64 { v, _ := strconv.ParseFloat(f[k], 64); return v }
		ppid, _ := strconv.Atoi(f[1])
		p := procInfo{ppid: ppid}
		p.self = (num(11) + num(12)) / clockTicks     // utime, stime
		p.cpu = p.self + (num(13)+num(14))/clockTicks // cutime, cstime
		out[pid] = p
	}
	return out
}

// vmRSS reads VmRSS (kB) from a /proc/<pid>/status file, in bytes.
func vmRSS(path string) float64 {
	fh, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				kb, _ := strconv.ParseFloat(f[0], 64)
				return kb * 1024
			}
		}
	}
	return 0
}
