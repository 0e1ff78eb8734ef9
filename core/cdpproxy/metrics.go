package cdpproxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus series. Labels are bounded: a domain
// or method a client made up counts as "other".
type metrics struct {
	conns    prometheus.Gauge
	messages *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	if reg == nil {
		return nil
	}
	m := &metrics{
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tabcast_cdp_connections", Help: "CDP clients connected now.",
		}),
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_cdp_messages_total", Help: "CDP commands from clients, by domain.",
		}, []string{"domain"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tabcast_cdp_refused_total", Help: "CDP commands refused by the filter, by method (\"other\" for a method the filter does not know).",
		}, []string{"method"}),
	}
	reg.MustRegister(m.conns, m.messages, m.refused)
	return m
}

func (m *metrics) connected(d int) {
	if m != nil {
		m.conns.Add(float64(d))
	}
}

func (m *metrics) message(method string) {
	if m != nil {
		m.messages.WithLabelValues(domainLabel(method)).Inc()
	}
}

func (m *metrics) refusal(method string) {
	if m != nil {
		m.refused.WithLabelValues(methodLabel(method)).Inc()
	}
}
