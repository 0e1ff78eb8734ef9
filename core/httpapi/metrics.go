package httpapi

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/session"
)

// PluginMetric is one plugin's state for /metrics.
type PluginMetric struct {
	Name       string
	State      string
	Generation uint64
	Restarts   int
}

// Metric is one unlabelled sample from elsewhere in the appliance (e.g.
// the relay's counters).
type Metric struct {
	Name, Type, Help string
	Value            float64
}

// metrics writes the Prometheus text exposition format. Label values are
// ids and fixed words only: no URLs or titles (they may be private).
func (a *api) metrics(w http.ResponseWriter, r *http.Request) {
	if !require(w, r, access.ScopeRead) {
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	var b strings.Builder
	sessions := a.o.Sessions.List()
	states := map[session.State]int{}
	for _, s := range sessions {
		states[s.State]++
	}
	help(&b, "tabcast_sessions", "gauge", "Sessions by state.")
	for _, st := range []session.State{session.StateStarting, session.StateReady, session.StateClosing, session.StateClosed, session.StateFailed} {
		fmt.Fprintf(&b, "tabcast_sessions{state=%q} %d\n", st, states[st])
	}
	help(&b, "tabcast_session_viewers", "gauge", "Viewers attached to a session.")
	for _, s := range sessions {
		fmt.Fprintf(&b, "tabcast_session_viewers{session=%q} %d\n", s.ID, s.Viewers)
	}
	help(&b, "tabcast_capture_frames_total", "counter", "Frames received from the capture plugin.")
	for _, s := range sessions {
		fmt.Fprintf(&b, "tabcast_capture_frames_total{session=%q} %d\n", s.ID, s.FramesCaptured)
	}
	help(&b, "tabcast_capture_dropped_total", "counter", "Frames the capture plugin replaced in its slot of one.")
	for _, s := range sessions {
		fmt.Fprintf(&b, "tabcast_capture_dropped_total{session=%q} %d\n", s.ID, s.CaptureDropped)
	}
	type pm struct {
		name, typ, help string
		val             func(session.PipelineStats) string
	}
	for _, m := range []pm{
		{"tabcast_encoded_frames_total", "counter", "Frames encoded and sent.", func(p session.PipelineStats) string { return u(p.FramesEncoded) }},
		{"tabcast_keyframes_total", "counter", "Keyframes sent.", func(p session.PipelineStats) string { return u(p.Keyframes) }},
		{"tabcast_pipeline_dropped_total", "counter", "Frames replaced before the encoder took them.", func(p session.PipelineStats) string { return u(p.FramesDropped) }},
		{"tabcast_bad_frames_total", "counter", "Frames the encoder refused.", func(p session.PipelineStats) string { return u(p.BadFrames) }},
		{"tabcast_sent_bytes_total", "counter", "Encoded bytes sent.", func(p session.PipelineStats) string { return u(p.Bytes) }},
		{"tabcast_pipeline_restarts_total", "counter", "Encode pipeline restarts.", func(p session.PipelineStats) string { return u(p.Restarts) }},
		{"tabcast_frame_age_p95_ms", "gauge", "Capture to send, 95th percentile of recent frames.", func(p session.PipelineStats) string { return f(p.FrameAge.P95ms) }},
		{"tabcast_encode_p95_ms", "gauge", "Encode time, 95th percentile of recent frames.", func(p session.PipelineStats) string { return f(p.EncodeDuration.P95ms) }},
	} {
		help(&b, m.name, m.typ, m.help)
		for _, s := range sessions {
			for _, p := range s.Pipelines {
				fmt.Fprintf(&b, "%s{session=%q,codec=%q} %s\n", m.name, s.ID, p.Codec, m.val(p))
			}
		}
	}
	if a.o.Plugins != nil {
		plugs := a.o.Plugins()
		help(&b, "tabcast_plugin_up", "gauge", "1 when the plugin is running.")
		for _, p := range plugs {
			up := 0
			if p.State == "running" {
				up = 1
			}
			fmt.Fprintf(&b, "tabcast_plugin_up{plugin=%q,state=%q} %d\n", p.Name, p.State, up)
		}
		help(&b, "tabcast_plugin_restarts_total", "counter", "Plugin restarts.")
		for _, p := range plugs {
			fmt.Fprintf(&b, "tabcast_plugin_restarts_total{plugin=%q} %d\n", p.Name, p.Restarts)
		}
	}
	if a.o.Metrics != nil {
		for _, m := range a.o.Metrics(r.Context()) {
			help(&b, m.Name, m.Type, m.Help)
			fmt.Fprintf(&b, "%s %s\n", m.Name, strconv.FormatFloat(m.Value, 'f', -1, 64))
		}
	}
	_, _ = io.WriteString(w, b.String())
}

func help(b *strings.Builder, name, typ, text string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, typ)
}

func u(v uint64) string { return strconv.FormatUint(v, 10) }

func f(v float64) string { return strconv.FormatFloat(v, 'f', 3, 64) }
