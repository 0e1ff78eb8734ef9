package telemetry

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabcast/tabcast/core/action"
)

// gather returns name{label=value} → value for every sample of reg
// (histograms by their count).
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			k := f.GetName() + "{"
			for i, lp := range m.GetLabel() {
				if i > 0 {
					k += ","
				}
				k += lp.GetName() + "=" + lp.GetValue()
			}
			k += "}"
			switch {
			case m.Counter != nil:
				out[k] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				out[k] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				out[k] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestNilAndLabels: a nil *Metrics does nothing; label values outside the
// known sets become "other".
func TestNilAndLabels(t *testing.T) {
	var m *Metrics
	m.SessionCreated("ok", "cdp")
	m.PeerConnected("relay", time.Second)
	m.PeerFailed()
	m.ICERestart(true)
	m.ActionAcked(action.KeyDown, time.Millisecond)
	m.QueueWait(time.Millisecond)
	m.ActionRejected("queue_full")
	m.ActionTimedOut(action.Navigate)
	m.InputCleanup("watchdog")
	m.ICECandidateRefused("loopback", "sdp")
	if m.Registry() != nil {
		t.Error("nil Metrics has a registry")
	}

	reg := prometheus.NewRegistry()
	m = New(reg)
	m.ActionRejected("http://10.0.0.1/x")
	m.ActionTimedOut(action.Kind("ann@example"))
	m.PeerConnected("192.168.1.1", time.Second)
	m.SessionCreated("ok", "bob")
	m.ICECandidateRefused("127.0.0.1", "udp")
	got := gather(t, reg)
	for _, k := range []string{
		"tabcast_action_reject_total{reason=other}", "tabcast_action_timeout_total{action_type=other}",
		"tabcast_peer_connect_total{candidate_type=other,result=ok}", "tabcast_peer_connect_seconds{candidate_type=other}",
		"tabcast_session_create_total{capture_mode=other,result=ok}", "tabcast_ice_candidates_refused_total{reason=other,source=other}",
	} {
		if got[k] != 1 {
			t.Errorf("%s = %v, want 1 (all: %v)", k, got[k], got)
		}
	}
	if len(got) != 6+2+4+1 { // the six above; ice restarts, cleanups and the queue wait at 0
		t.Errorf("%d series: %v", len(got), got)
	}
}

// TestProcessCollector reads a fake /proc: core alone, a plugin with its
// child, everything else under the core as chromium.
func TestProcessCollector(t *testing.T) {
	root := t.TempDir()
	proc := func(pid, ppid, utime, stime, cutime, rssKB string) {
		dir := filepath.Join(root, pid)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
		stat := pid + " (a (b) c) S " + ppid + " 0 0 0 0 0 0 0 0 0 " + utime + " " + stime + " " + cutime + " 0 20 0 1 0"
		if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "status"), []byte("Name:\tx\nVmRSS:\t   "+rssKB+" kB\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	proc("10", "1", "100", "50", "900", "1000")   // core: 1.5 s; its waited-for children do not count
	proc("11", "10", "200", "0", "0", "2000")     // plugin enc
	proc("12", "11", "100", "0", "0", "500")      // its child
	proc("20", "10", "300", "100", "100", "4000") // chromium
	proc("21", "20", "50", "50", "0", "3000")     // a renderer
	proc("30", "1", "999", "0", "0", "9999")      // not ours
	reg := prometheus.NewRegistry()
	reg.MustRegister(&ProcessCollector{Proc: root, Self: 10, Plugins: func() []Process { return []Process{{Name: "enc", PID: 11}} }})
	got := gather(t, reg)
	for k, v := range map[string]float64{
		"tabcast_process_cpu_seconds_total{process=core}":     1.5,
		"tabcast_process_cpu_seconds_total{process=enc}":      3,
		"tabcast_process_cpu_seconds_total{process=chromium}": 6,
		"tabcast_process_rss_bytes{process=core}":             1000 * 1024,
		"tabcast_process_rss_bytes{process=enc}":              2500 * 1024,
		"tabcast_process_rss_bytes{process=chromium}":         7000 * 1024,
	} {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	if len(got) != 6 {
		t.Errorf("%d series: %v", len(got), got)
	}
}
