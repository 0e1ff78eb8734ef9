// Package telemetry holds the core's Prometheus event counters: things
// that happen (a peer connects, an action is acked) and that no snapshot
// remembers. Figures that a snapshot already holds (sessions, pipelines,
// plugins, processes) are read at scrape time by collectors instead.
//
// Every method is safe on a nil *Metrics (it does nothing), so sources
// take an optional *Metrics. Label values are fixed words only: action
// kinds and rejection codes outside the known sets become "other", so a
// client cannot grow the label space.
package telemetry

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabcast/tabcast/core/action"
	"github.com/tabcast/tabcast/core/errcode"
)

// Metrics are the event counters, registered on one registry.
type Metrics struct {
	reg *prometheus.Registry

	sessionCreate      *prometheus.CounterVec
	peerConnect        *prometheus.CounterVec
	peerConnectSeconds *prometheus.HistogramVec
	iceRestart         *prometheus.CounterVec
	inputAck           *prometheus.HistogramVec
	queueWait          prometheus.Histogram
	actionReject       *prometheus.CounterVec
	actionTimeout      *prometheus.CounterVec
	inputCleanup       *prometheus.CounterVec
	iceRefused         *prometheus.CounterVec
}

// New creates the metrics and registers them on reg (a dedicated
// registry, not the global default one).
func New(reg *prometheus.Registry) *Metrics {
	m := &Metrics{
		reg: reg,
		sessionCreate: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_session_create_total", Help: "Session creations by result (ok, capacity, unavailable, error) and capture mode.",
		}, []string{"result", "capture_mode"}),
		peerConnect: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_peer_connect_total", Help: "Viewer peer connections by result (ok, failed) and selected candidate type (host, srflx, prflx, relay; none when failed).",
		}, []string{"result", "candidate_type"}),
		peerConnectSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tabcast_peer_connect_seconds", Help: "From the peer's creation (offer) to connected.",
			Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20},
		}, []string{"candidate_type"}),
		iceRestart: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_ice_restart_total", Help: "ICE restarts by result (ok: connected again; failed).",
		}, []string{"result"}),
		inputAck: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tabcast_input_ack_seconds", Help: "From an action's acceptance to its final ack (queue wait plus execution).",
			Buckets: []float64{0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"action_type"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "tabcast_action_queue_wait_seconds", Help: "Time an accepted action waited in the dispatcher's queue.",
			Buckets: []float64{0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5},
		}),
		actionReject: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_action_reject_total", Help: "Actions rejected, by code (at submit, when dropped from the queue, or by the executor).",
		}, []string{"reason"}),
		actionTimeout: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_action_timeout_total", Help: "Actions that ran past their deadline.",
		}, []string{"action_type"}),
		inputCleanup: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_input_cleanup_total", Help: "Releases of held keys and buttons, by reason (renewed, ended, session_closed, watchdog).",
		}, []string{"reason"}),
		iceRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_ice_candidates_refused_total", Help: "Viewers' remote ICE candidates never given to the ICE agent, by the address class refused (loopback, link_local, metadata, unspecified, multicast, broadcast, reserved, viewer_networks, mdns) and where the candidate came from (sdp, trickle, ice: peer-reflexive from a STUN request or resolved by mDNS).",
		}, []string{"reason", "source"}),
	}
	reg.MustRegister(m.sessionCreate, m.peerConnect, m.peerConnectSeconds, m.iceRestart,
		m.inputAck, m.queueWait, m.actionReject, m.actionTimeout, m.inputCleanup, m.iceRefused)
	// Series that should read 0 rather than be absent before the first event.
	for _, r := range []string{"ok", "failed"} {
		m.iceRestart.WithLabelValues(r)
	}
	for _, r := range []string{"renewed", "ended", "session_closed", "watchdog"} {
		m.inputCleanup.WithLabelValues(r)
	}
	return m
}

// Registry is the registry the metrics live on (nil for a nil *Metrics).
func (m *Metrics) Registry() *prometheus.Registry {
	if m == nil {
		return nil
	}
	return m.reg
}

// SessionCreated counts one Create; result is ok, capacity, unavailable or
// error.
func (m *Metrics) SessionCreated(result, captureMode string) {
	if m == nil {
		return
	}
	m.sessionCreate.WithLabelValues(oneOf(result, "ok", "capacity", "unavailable", "error"), CaptureMode(captureMode)).Inc()
}

// PeerConnected counts a peer that reached connected after d over a path
// of candidateType.
func (m *Metrics) PeerConnected(candidateType string, d time.Duration) {
	if m == nil {
		return
	}
	ct := CandidateType(candidateType)
	m.peerConnect.WithLabelValues("ok", ct).Inc()
	m.peerConnectSeconds.WithLabelValues(ct).Observe(d.Seconds())
}

// PeerFailed counts a peer that ended without ever connecting.
func (m *Metrics) PeerFailed() {
	if m == nil {
		return
	}
	m.peerConnect.WithLabelValues("failed", "none").Inc()
}

// ICERestart counts a restart's outcome: ok (connected again) or failed.
func (m *Metrics) ICERestart(ok bool) {
	if m == nil {
		return
	}
	r := "failed"
	if ok {
		r = "ok"
	}
	m.iceRestart.WithLabelValues(r).Inc()
}

// ActionAcked observes an action's time from acceptance to final ack.
func (m *Metrics) ActionAcked(kind action.Kind, d time.Duration) {
	if m == nil {
		return
	}
	m.inputAck.WithLabelValues(ActionType(kind)).Observe(d.Seconds())
}

// QueueWait observes how long an action waited in the queue.
func (m *Metrics) QueueWait(d time.Duration) {
	if m == nil {
		return
	}
	m.queueWait.Observe(d.Seconds())
}

// ActionRejected counts one rejection by its code.
func (m *Metrics) ActionRejected(code string) {
	if m == nil {
		return
	}
	m.actionReject.WithLabelValues(rejectCode(code)).Inc()
}

// ActionTimedOut counts an action that overran its deadline.
func (m *Metrics) ActionTimedOut(kind action.Kind) {
	if m == nil {
		return
	}
	m.actionTimeout.WithLabelValues(ActionType(kind)).Inc()
}

// InputCleanup counts one release of held input; reason is renewed,
// ended, session_closed or watchdog.
func (m *Metrics) InputCleanup(reason string) {
	if m == nil {
		return
	}
	m.inputCleanup.WithLabelValues(oneOf(reason, "renewed", "ended", "session_closed", "watchdog")).Inc()
}

// ICECandidateRefused counts one remote ICE candidate the peer refused
// by its address; reason and source are the peer package's fixed words.
func (m *Metrics) ICECandidateRefused(reason, source string) {
	if m == nil {
		return
	}
	m.iceRefused.WithLabelValues(
		oneOf(reason, "loopback", "link_local", "metadata", "unspecified", "multicast", "broadcast", "reserved", "viewer_networks", "mdns"),
		oneOf(source, "sdp", "trickle", "ice"),
	).Inc()
}

var kinds = map[action.Kind]bool{
	action.PointerMove: true, action.Wheel: true, action.PointerDown: true, action.PointerUp: true, action.Click: true,
	action.KeyDown: true, action.KeyUp: true, action.KeyPress: true, action.TextInsert: true, action.Navigate: true,
	action.Back: true, action.Forward: true, action.Reload: true, action.Stop: true,
	action.Viewport: true, action.ClipboardWrite: true, action.ClipboardRead: true,
	action.DialogResponse: true, action.Heartbeat: true, action.ReleaseAll: true,
}

// ActionType is kind as a label value: a known kind or "other".
func ActionType(kind action.Kind) string {
	if kinds[kind] {
		return string(kind)
	}
	return "other"
}

var codes = map[string]bool{}

func init() {
	for _, c := range []string{
		errcode.InvalidArgument, errcode.UnknownKind, errcode.TooLarge, errcode.SeqGap,
		errcode.Conflict, errcode.StalePage, errcode.StaleGeneration, errcode.UnknownProducer,
		errcode.QueueFull, errcode.RateLimited, errcode.OutcomeUnknown, errcode.Timeout,
		errcode.NavigationBlocked, errcode.ShortcutBlocked, errcode.NotAllowed, errcode.NoDialog,
		errcode.Failed, errcode.SessionClosed,
	} {
		codes[c] = true
	}
}

func rejectCode(c string) string {
	if codes[c] {
		return c
	}
	return "other"
}

// CandidateType is an ICE candidate type as a label value.
func CandidateType(t string) string {
	return oneOf(t, "host", "srflx", "prflx", "relay", "none")
}

// CaptureMode is a capture mode as a label value.
func CaptureMode(m string) string {
	if m == "" {
		return "none"
	}
	return oneOf(m, "cdp", "tab", "auto", "none")
}

func oneOf(v string, allowed ...string) string {
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	return "other"
}
