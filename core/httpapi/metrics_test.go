package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/metrics"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/core/telemetry"
)

// slowExec completes every action at once, except navigate: that one
// ignores the page until its deadline ends it.
type slowExec struct{}

func (slowExec) Execute(ctx context.Context, _ string, a action.Action) (action.Result, error) {
	if a.Kind == action.Navigate {
		<-ctx.Done()
		return action.Result{}, ctx.Err()
	}
	return action.Result{}, nil
}

func (slowExec) PageRevision() uint64 { return 1 }

// TestMetrics scrapes /metrics after real dispatcher traffic and telemetry
// events: every metric family is there with sane values, the route needs
// the read scope, and no label value is an address, a URL or a user name.
func TestMetrics(t *testing.T) {
	const user = "mallory-the-user"
	tm := telemetry.New(prometheus.NewRegistry())

	// Input events through a real dispatcher.
	d := dispatch.New(dispatch.Config{Deadline: 100 * time.Millisecond, Burst: 2, RatePerSec: 0.001, Telemetry: tm}, slowExec{})
	p := d.Grant("human", user)
	acks := make(chan action.Ack, 16)
	reply := func(a action.Ack) {
		if a.Status != action.StatusAccepted {
			acks <- a
		}
	}
	submit := func(seq uint64, a action.Action) {
		d.Submit(action.Envelope{ProducerID: p.ID, ProducerGeneration: p.Generation, ControlSeq: seq, ActionID: "a" + string(rune('0'+seq)), Action: a}, reply)
	}
	submit(1, action.Action{Kind: action.KeyDown, Key: "a", Code: "KeyA"})
	if a := <-acks; a.Status != action.StatusCompleted {
		t.Fatalf("key_down: %+v", a)
	}
	submit(2, action.Action{Kind: action.Navigate, URL: "http://192.0.2.7/private"})
	if a := <-acks; a.Status != action.StatusRejected {
		t.Fatalf("navigate past its deadline: %+v", a)
	}
	submit(3, action.Action{Kind: action.TextInsert, Text: "x"}) // over the burst of 2
	if a := <-acks; a.Code != "rate_limited" {
		t.Fatalf("third action: %+v, want rate_limited", a)
	}
	held := d.Stats() // one key held
	d.End(p.ID)       // releases it: a cleanup
	d.Close()

	tm.SessionCreated("ok", "cdp")
	tm.SessionCreated("capacity", "tab")
	tm.PeerConnected("relay", 800*time.Millisecond)
	tm.PeerConnected("host", 120*time.Millisecond)
	tm.PeerFailed()
	tm.ICERestart(true)
	tm.ICERestart(false)

	// Child processes: one stands for a plugin, one for Chromium.
	var procs []*exec.Cmd
	for range 2 {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal("start a child process:", err)
		}
		procs = append(procs, c)
	}
	defer func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()

	var (
		mu  sync.Mutex
		now = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		enc = uint64(100)
	)
	snaps := func() []session.Status {
		mu.Lock()
		defer mu.Unlock()
		return []session.Status{{
			ID: "0123456789abcdef", State: session.StateReady, URL: "http://10.1.2.3/secret", Title: "Payroll",
			CaptureMode: session.CaptureCDP, Viewers: 2, FramesCaptured: 500, CaptureDropped: 3, Owner: user,
			Pipelines: []session.PipelineStats{{
				Codec: "vp8", FramesEncoded: enc, Keyframes: 4, FramesDropped: 5, BadFrames: 1, Bytes: enc * 1000,
				TargetKbps: 2500, FrameAge: metrics.Summary{P95ms: 42}, EncodeDuration: metrics.Summary{P95ms: 6},
			}},
		}}
	}

	dir := t.TempDir()
	tokens, err := access.OpenTokens(filepath.Join(dir, "tokens.json"))
	if err != nil {
		t.Fatal(err)
	}
	read, _, err := tokens.Create("prom", user, access.RoleOperator, []string{access.ScopeRead}, 0)
	if err != nil {
		t.Fatal(err)
	}
	controlOnly, _, _ := tokens.Create("ctl", user, access.RoleOperator, []string{access.ScopeControl}, 0)
	srv := httptest.NewServer(New(Options{
		Auth:      AuthOptions{Tokens: tokens, Logins: access.NewLogins(time.Hour, time.Hour)},
		Telemetry: tm,
		Plugins: func() []PluginMetric {
			return []PluginMetric{{Name: "encoder-ffmpeg", State: supervisor.StateRunning, Restarts: 2}, {Name: "capture-cdp", State: supervisor.StateRestarting, Restarts: 1}}
		},
		Processes: func() []telemetry.Process {
			return []telemetry.Process{{Name: "encoder-ffmpeg", PID: procs[0].Process.Pid}}
		},
		Metrics: func(context.Context) []Metric {
			return []Metric{
				{Name: "tabcast_turn_allocations_active", Type: "gauge", Help: "TURN allocations open now.", Value: 3},
				{Name: "tabcast_turn_denies_total", Type: "counter", Help: "TURN permissions refused.", Value: 1},
			}
		},
		snapshots: &testSources{
			sessions: snaps,
			totals: func() map[string][]session.PipelineStats {
				s := snaps()[0]
				old := session.PipelineStats{Codec: "h264", FramesEncoded: 7, Bytes: 7000, Keyframes: 1} // a pipeline that stopped
				return map[string][]session.PipelineStats{s.ID: {s.Pipelines[0], old}}
			},
			dispatch: func() []dispatch.Stats { return []dispatch.Stats{held} },
			now:      func() time.Time { mu.Lock(); defer mu.Unlock(); return now },
		},
	}))
	defer srv.Close()

	get := func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", srv.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, _ := get(""); st != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", st)
	}
	if st, _ := get(controlOnly); st != http.StatusForbidden {
		t.Errorf("token without the read scope: %d, want 403", st)
	}
	if st, body := get(read); st != 200 {
		t.Fatalf("first scrape: %d %s", st, body)
	}
	// Two seconds and 60 frames (60 kB) later.
	mu.Lock()
	now = now.Add(2 * time.Second)
	enc += 60
	mu.Unlock()
	st, body := get(read)
	if st != 200 {
		t.Fatalf("scrape: %d %s", st, body)
	}
	p2 := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p2.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, body)
	}

	// value returns the sample of family name with the labels given (k, v
	// pairs; others ignored), summed over the matches; ok when one matched.
	value := func(name string, labels ...string) (float64, bool) {
		f := fams[name]
		if f == nil {
			return 0, false
		}
		var sum float64
		found := false
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			found = true
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			case m.Histogram != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			case m.Untyped != nil:
				sum += m.GetUntyped().GetValue()
			}
		}
		return sum, found
	}
	type want struct {
		name   string
		labels []string
		check  func(float64) bool
		what   string
	}
	eq := func(v float64) func(float64) bool { return func(x float64) bool { return x == v } }
	pos := func(x float64) bool { return x > 0 }
	for _, w := range []want{
		{"tabcast_sessions_active", []string{"capture_mode", "cdp"}, eq(1), "1"},
		{"tabcast_sessions_active", []string{"capture_mode", "tab"}, eq(0), "0"},
		{"tabcast_session_create_total", []string{"result", "ok", "capture_mode", "cdp"}, eq(1), "1"},
		{"tabcast_session_create_total", []string{"result", "capacity", "capture_mode", "tab"}, eq(1), "1"},
		{"tabcast_peer_connect_total", []string{"result", "ok", "candidate_type", "relay"}, eq(1), "1"},
		{"tabcast_peer_connect_total", []string{"result", "failed"}, eq(1), "1"},
		{"tabcast_peer_connect_seconds", []string{"candidate_type", "host"}, eq(1), "1 sample"},
		{"tabcast_ice_restart_total", []string{"result", "ok"}, eq(1), "1"},
		{"tabcast_ice_restart_total", []string{"result", "failed"}, eq(1), "1"},
		{"tabcast_video_bitrate_bps", []string{"codec", "vp8"}, eq(60 * 1000 * 8 / 2), "240000"},
		{"tabcast_video_fps", []string{"codec", "vp8"}, eq(30), "30"},
		{"tabcast_video_frame_age_ms", []string{"codec", "vp8"}, eq(42), "42"},
		{"tabcast_video_frames_dropped_total", []string{"stage", "capture"}, eq(3), "3"},
		{"tabcast_video_frames_dropped_total", []string{"stage", "pipeline"}, eq(5), "5"},
		{"tabcast_video_frames_dropped_total", []string{"stage", "encoder"}, eq(1), "1"},
		{"tabcast_video_encoded_frames_total", []string{"codec", "vp8"}, eq(160), "160"},
		{"tabcast_video_keyframes_total", []string{"codec", "vp8"}, eq(4), "4"},
		{"tabcast_video_encoded_frames_total", []string{"codec", "h264"}, eq(7), "7 (a stopped pipeline)"},
		{"tabcast_video_sent_bytes_total", []string{"codec", "vp8"}, eq(160000), "160000"},
		{"tabcast_input_ack_seconds", []string{"action_type", "key_down"}, eq(1), "1 sample"},
		{"tabcast_input_ack_seconds", []string{"action_type", "navigate"}, eq(1), "1 sample"},
		{"tabcast_action_queue_depth", nil, eq(0), "0"},
		{"tabcast_action_queue_wait_seconds", nil, eq(2), "2 samples"},
		{"tabcast_action_reject_total", []string{"reason", "rate_limited"}, eq(1), "1"},
		{"tabcast_action_reject_total", []string{"reason", "outcome_unknown"}, eq(1), "1"},
		{"tabcast_action_timeout_total", []string{"action_type", "navigate"}, eq(1), "1"},
		{"tabcast_held_inputs", []string{"kind", "key"}, eq(1), "1"},
		{"tabcast_held_inputs", []string{"kind", "button"}, eq(0), "0"},
		{"tabcast_input_cleanup_total", []string{"reason", "ended"}, eq(1), "1"},
		{"tabcast_turn_allocations_active", nil, eq(3), "3"},
		{"tabcast_turn_denies_total", nil, eq(1), "1"},
		{"tabcast_plugin_up", []string{"plugin", "encoder-ffmpeg"}, eq(1), "1"},
		{"tabcast_plugin_up", []string{"plugin", "capture-cdp"}, eq(0), "0"},
		{"tabcast_plugin_restarts_total", []string{"plugin", "encoder-ffmpeg"}, eq(2), "2"},
		{"tabcast_process_cpu_seconds_total", []string{"process", "core"}, func(x float64) bool { return x >= 0 && x < 1e6 }, ">= 0"},
		{"tabcast_process_rss_bytes", []string{"process", "core"}, pos, "> 0"},
		{"tabcast_process_rss_bytes", []string{"process", "encoder-ffmpeg"}, pos, "> 0"},
		{"tabcast_process_rss_bytes", []string{"process", "chromium"}, pos, "> 0 (the other child)"},
		{"tabcast_process_cpu_seconds_total", []string{"process", "chromium"}, func(x float64) bool { return x >= 0 }, ">= 0"},
	} {
		v, ok := value(w.name, w.labels...)
		switch {
		case !ok:
			t.Errorf("%s%v missing", w.name, w.labels)
		case !w.check(v):
			t.Errorf("%s%v = %v, want %s", w.name, w.labels, v, w.what)
		}
	}
	if f := fams["tabcast_peer_connect_seconds"]; f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
		t.Errorf("tabcast_peer_connect_seconds is not a histogram")
	}

	// Label values: fixed words, codecs and plugin names only.
	url := regexp.MustCompile(`(?i)^[a-z]+://|/`)
	for name, f := range fams {
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				v := lp.GetValue()
				if net.ParseIP(v) != nil || regexp.MustCompile(`\d+\.\d+\.\d+\.\d+|:[0-9a-f]*:`).MatchString(v) {
					t.Errorf("%s: label %s=%q looks like an address", name, lp.GetName(), v)
				}
				if url.MatchString(v) {
					t.Errorf("%s: label %s=%q looks like a URL", name, lp.GetName(), v)
				}
				if strings.Contains(v, user) || v == "0123456789abcdef" || v == "Payroll" {
					t.Errorf("%s: label %s=%q names a user, session or page", name, lp.GetName(), v)
				}
			}
		}
	}
	if strings.Contains(body, user) || strings.Contains(body, "10.1.2.3") || strings.Contains(body, "192.0.2.7") {
		t.Errorf("the exposition holds a user name or an address:\n%s", body)
	}
	// The Grafana dashboard asks only for metrics that exist.
	dash, err := os.ReadFile("../../appliance/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`tabcast_[a-z0-9_]+`).FindAllString(string(dash), -1) {
		if fams[strings.TrimSuffix(name, "_bucket")] == nil {
			t.Errorf("the dashboard uses %s: not exposed", name)
		}
	}
	if t.Failed() {
		t.Logf("exposition:\n%s", body)
	}
}

// TestCounterBook: counters summed over sessions never go back when a
// session or pipeline goes away or starts over.
func TestCounterBook(t *testing.T) {
	b := newCounterBook()
	k := bookKey{"x", "vp8"}
	b.observe("s1", k, 10)
	b.observe("s2", k, 5)
	if got := b.totals()[k]; got != 15 {
		t.Fatalf("total %v, want 15", got)
	}
	b.retire(map[string]bool{"s2": true}) // s1 is gone
	b.observe("s2", k, 2)                 // s2 restarted from zero
	if got := b.totals()[k]; got != 17 {
		t.Fatalf("total %v, want 17", got)
	}
}
