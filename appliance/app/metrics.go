package app

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tabcast/tabcast/core/telemetry"
)

// newTelemetry makes the event counters on a registry of their own (not
// the global default one); /metrics serves it.
func newTelemetry() *telemetry.Metrics {
	return telemetry.New(prometheus.NewRegistry())
}

// pluginProcesses are the running plugins' pids, for the per-process CPU
// and memory figures of /metrics.
func (a *appliance) pluginProcesses() []telemetry.Process {
	var out []telemetry.Process
	for _, h := range a.sup.Handles() {
		if st := h.Status(); st.PID > 0 {
			out = append(out, telemetry.Process{Name: st.Name, PID: st.PID})
		}
	}
	return out
}
