package httpapi

import (
	"context"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tabcast/tabcast/core/access"
	"github.com/tabcast/tabcast/core/dispatch"
	"github.com/tabcast/tabcast/core/session"
	"github.com/tabcast/tabcast/core/supervisor"
	"github.com/tabcast/tabcast/core/telemetry"
)

// PluginMetric is one plugin's state for /metrics.
type PluginMetric struct {
	Name       string
	State      supervisor.State
	Generation uint64
	Restarts   int
}

// Metric is one unlabelled sample from elsewhere in the appliance (e.g.
// the relay's counters). Type is "counter" or "gauge".
type Metric struct {
	Name, Type, Help string
	Value            float64
}

// metricsHandler serves the Prometheus exposition of a dedicated registry:
// the event counters of Options.Telemetry (if any) and the collectors
// below, which read the sessions, dispatchers, plugins and processes at
// scrape time. Label values are fixed words, codecs and plugin names only:
// no session ids, users, URLs or addresses.
func (a *api) metricsHandler() http.Handler {
	reg := a.o.Telemetry.Registry()
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	c := &collector{o: a.o, book: newCounterBook(), rates: map[string]*rate{}, now: time.Now}
	if a.o.Sessions != nil {
		c.sessions, c.totals, c.dispatch = a.o.Sessions.List, a.o.Sessions.PipelineTotals, a.o.Sessions.DispatchStats
	}
	if t := a.o.snapshots; t != nil {
		c.sessions, c.totals, c.dispatch, c.now = t.sessions, t.totals, t.dispatch, t.now
	}
	for _, col := range []prometheus.Collector{c, &telemetry.ProcessCollector{Plugins: a.o.Processes}} {
		if err := reg.Register(col); err != nil {
			a.o.Logger.Warn("metrics: collector not registered", "err", err)
		}
	}
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !require(w, r, access.ScopeRead) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// testSources replace the session manager in tests.
type testSources struct {
	sessions func() []session.Status
	totals   func() map[string][]session.PipelineStats
	dispatch func() []dispatch.Stats
	now      func() time.Time
}

// collector reads snapshots at scrape time. It is unchecked (Describe
// sends nothing): the relay's samples are only known when they arrive.
type collector struct {
	o        Options
	sessions func() []session.Status
	totals   func() map[string][]session.PipelineStats
	dispatch func() []dispatch.Stats
	now      func() time.Time

	mu    sync.Mutex
	book  *counterBook
	rates map[string]*rate // session id + codec
}

// rate derives frames and bits per second of one pipeline from its
// counters between scrapes at least a second apart.
type rate struct {
	at        time.Time
	frames, b uint64
	fps, bps  float64
}

func (c *collector) Describe(chan<- *prometheus.Desc) {}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	sessionsActiveDesc = desc("tabcast_sessions_active", "Sessions starting or ready, by capture mode.", "capture_mode")
	viewersDesc        = desc("tabcast_viewers", "Viewers attached to sessions, all sessions.")
	bitrateDesc        = desc("tabcast_video_bitrate_bps", "Encoded video sent per second, summed over the sessions' pipelines of the codec (measured between scrapes at least 1 s apart).", "codec")
	fpsDesc            = desc("tabcast_video_fps", "Encoded frames per second, mean over the sessions' pipelines of the codec.", "codec")
	frameAgeDesc       = desc("tabcast_video_frame_age_ms", "Capture to send, 95th percentile of recent frames, the worst pipeline of the codec.", "codec")
	encodeDesc         = desc("tabcast_video_encode_ms", "Encode time, 95th percentile of recent frames, the worst pipeline of the codec.", "codec")
	targetDesc         = desc("tabcast_video_target_bps", "Encoder bitrate targets, summed over the pipelines of the codec.", "codec")
	queueDepthDesc     = desc("tabcast_action_queue_depth", "Actions waiting in the input dispatchers, all sessions.")
	heldDesc           = desc("tabcast_held_inputs", "Keys and pointer buttons held down by producers, all sessions.", "kind")
	pluginUpDesc       = desc("tabcast_plugin_up", "1 when the plugin is running.", "plugin")
	pluginRestartsDesc = desc("tabcast_plugin_restarts_total", "Plugin restarts.", "plugin")
)

// Counters kept monotonic across sessions that come and go.
var counterHelp = map[string]struct {
	help, label string
}{
	"tabcast_video_frames_dropped_total":    {"Frames dropped by stage: capture (the capture plugin's slot of one), pipeline (replaced before the encoder took them), encoder (refused by the encoder).", "stage"},
	"tabcast_video_encoded_frames_total":    {"Frames encoded and sent.", "codec"},
	"tabcast_video_keyframes_total":         {"Keyframes sent.", "codec"},
	"tabcast_video_sent_bytes_total":        {"Encoded bytes sent.", "codec"},
	"tabcast_video_pipeline_restarts_total": {"Encode pipeline restarts.", "codec"},
	"tabcast_capture_frames_total":          {"Frames received from the capture plugin.", ""},
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	if c.sessions != nil {
		c.collectSessions(gauge, ch)
	}
	if c.dispatch != nil {
		var queued, held, keys int
		for _, st := range c.dispatch() {
			queued += st.Queued
			held += st.Held
			keys += st.HeldKeys
		}
		gauge(queueDepthDesc, float64(queued))
		gauge(heldDesc, float64(keys), "key")
		gauge(heldDesc, float64(held-keys), "button")
	}
	if c.o.Plugins != nil {
		for _, p := range c.o.Plugins() {
			up := 0.0
			if p.State == supervisor.StateRunning {
				up = 1
			}
			gauge(pluginUpDesc, up, p.Name)
			ch <- prometheus.MustNewConstMetric(pluginRestartsDesc, prometheus.CounterValue, float64(p.Restarts), p.Name)
		}
	}
	if c.o.Metrics != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		for _, m := range c.o.Metrics(ctx) {
			t := prometheus.GaugeValue
			if m.Type == "counter" {
				t = prometheus.CounterValue
			}
			ch <- prometheus.MustNewConstMetric(desc(m.Name, m.Help), t, m.Value)
		}
	}
}

func (c *collector) collectSessions(gauge func(*prometheus.Desc, float64, ...string), ch chan<- prometheus.Metric) {
	snaps := c.sessions()
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	active := map[string]int{session.CaptureCDP: 0, session.CaptureTab: 0}
	viewers := 0
	type codecFig struct {
		bps, fpsSum, age, enc, target float64
		n                             int
	}
	codecs := map[string]*codecFig{}
	live := map[string]bool{}
	for _, s := range snaps {
		live[s.ID] = true
		if s.State == session.StateStarting || s.State == session.StateReady {
			active[telemetry.CaptureMode(s.CaptureMode)]++
			viewers += s.Viewers
		}
		c.book.observe(s.ID, bookKey{"tabcast_capture_frames_total", ""}, float64(s.FramesCaptured))
		c.book.observe(s.ID, bookKey{"tabcast_video_frames_dropped_total", "capture"}, float64(s.CaptureDropped))
		for _, p := range s.Pipelines {
			live[s.ID+"/"+p.Codec] = true
			r := c.rates[s.ID+"/"+p.Codec]
			if r == nil {
				r = &rate{at: now, frames: p.FramesEncoded, b: p.Bytes}
				c.rates[s.ID+"/"+p.Codec] = r
			} else if dt := now.Sub(r.at).Seconds(); dt >= 1 {
				if p.FramesEncoded >= r.frames && p.Bytes >= r.b {
					r.fps = float64(p.FramesEncoded-r.frames) / dt
					r.bps = float64(p.Bytes-r.b) * 8 / dt
				} else {
					r.fps, r.bps = 0, 0 // a new pipeline
				}
				r.at, r.frames, r.b = now, p.FramesEncoded, p.Bytes
			}
			if s.State != session.StateReady {
				continue
			}
			f := codecs[p.Codec]
			if f == nil {
				f = &codecFig{}
				codecs[p.Codec] = f
			}
			f.n++
			f.bps += r.bps
			f.fpsSum += r.fps
			f.age = max(f.age, p.FrameAge.P95ms)
			f.enc = max(f.enc, p.EncodeDuration.P95ms)
			f.target += float64(p.TargetKbps) * 1000
		}
	}
	// Per-session totals include the pipelines that stopped since the
	// last scrape (a viewer came and went).
	if c.totals != nil {
		for id, list := range c.totals() {
			for _, p := range list {
				src := id + "/codec/" + p.Codec
				live[src] = true
				b := func(name, label string, v uint64) { c.book.observe(src, bookKey{name, label}, float64(v)) }
				b("tabcast_video_frames_dropped_total", "pipeline", p.FramesDropped)
				b("tabcast_video_frames_dropped_total", "encoder", p.BadFrames)
				b("tabcast_video_encoded_frames_total", p.Codec, p.FramesEncoded)
				b("tabcast_video_keyframes_total", p.Codec, p.Keyframes)
				b("tabcast_video_sent_bytes_total", p.Codec, p.Bytes)
				b("tabcast_video_pipeline_restarts_total", p.Codec, p.Restarts)
			}
		}
	}
	c.book.retire(live)
	for k := range c.rates {
		if !live[k] {
			delete(c.rates, k)
		}
	}
	for mode, n := range active {
		gauge(sessionsActiveDesc, float64(n), mode)
	}
	gauge(viewersDesc, float64(viewers))
	for codec, f := range codecs {
		gauge(bitrateDesc, f.bps, codec)
		gauge(fpsDesc, f.fpsSum/float64(f.n), codec)
		gauge(frameAgeDesc, f.age, codec)
		gauge(encodeDesc, f.enc, codec)
		gauge(targetDesc, f.target, codec)
	}
	totals := c.book.totals()
	// Series that read 0 before anything happened.
	for _, stage := range []string{"capture", "pipeline", "encoder"} {
		if _, ok := totals[bookKey{"tabcast_video_frames_dropped_total", stage}]; !ok {
			totals[bookKey{"tabcast_video_frames_dropped_total", stage}] = 0
		}
	}
	keys := make([]bookKey, 0, len(totals))
	for k := range totals {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].name < keys[j].name || keys[i].name == keys[j].name && keys[i].label < keys[j].label
	})
	for _, k := range keys {
		h := counterHelp[k.name]
		if h.label == "" {
			ch <- prometheus.MustNewConstMetric(desc(k.name, h.help), prometheus.CounterValue, totals[k])
			continue
		}
		ch <- prometheus.MustNewConstMetric(desc(k.name, h.help, h.label), prometheus.CounterValue, totals[k], k.label)
	}
}

type bookKey struct{ name, label string }

// counterBook keeps counters summed over sessions monotonic: a session's
// (or pipeline's) last values stay counted after it is gone or restarted.
type counterBook struct {
	base map[bookKey]float64            // from sources that are gone or restarted
	last map[string]map[bookKey]float64 // source → last values
}

func newCounterBook() *counterBook {
	return &counterBook{base: map[bookKey]float64{}, last: map[string]map[bookKey]float64{}}
}

func (b *counterBook) observe(src string, k bookKey, v float64) {
	m := b.last[src]
	if m == nil {
		m = map[bookKey]float64{}
		b.last[src] = m
	}
	if old, ok := m[k]; ok && v < old {
		b.base[k] += old // restarted from zero
	}
	m[k] = v
}

// retire moves the sources not in live into the base.
func (b *counterBook) retire(live map[string]bool) {
	for src, m := range b.last {
		if live[src] {
			continue
		}
		for k, v := range m {
			b.base[k] += v
		}
		delete(b.last, src)
	}
}

func (b *counterBook) totals() map[bookKey]float64 {
	out := make(map[bookKey]float64, len(b.base))
	for k, v := range b.base {
		out[k] = v
	}
	for _, m := range b.last {
		for k, v := range m {
			out[k] += v
		}
	}
	return out
}
