//go:build !grid_slim

package agent

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

// promMetrics are the agent's series in a private Prometheus registry,
// with the Go runtime and process collectors.
type promMetrics struct {
	reg          *prometheus.Registry
	tasks        *prometheus.CounterVec
	taskDuration *prometheus.HistogramVec
}

var (
	agentCommandsDesc  = prometheus.NewDesc(metricCommands, helpCommands, []string{"outcome"}, nil)
	agentConnectedDesc = prometheus.NewDesc(metricNATSConnected, helpNATSConnected, nil, nil)
)

func newAgentMetrics(a *Agent) agentMetrics {
	m := &promMetrics{
		reg: telemetry.NewRegistry(),
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricTasks, Help: helpTasks},
			[]string{"backend", "action", "status"}),
		taskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: metricTaskDuration, Help: helpTaskDuration, Buckets: telemetry.TaskBuckets,
		}, []string{"backend", "action", "status"}),
	}
	m.reg.MustRegister(m.tasks, m.taskDuration,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricTasksInFlight, Help: helpTasksInFlight},
			func() float64 { return float64(len(a.slots)) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: metricMaxConcurrent, Help: helpMaxConcurrent},
			func() float64 { return float64(cap(a.slots)) }),
		&agentCollector{a: a},
	)
	return m
}

func (m *promMetrics) taskDone(backend, action, status string, d time.Duration) {
	m.tasks.WithLabelValues(backend, action, status).Inc()
	m.taskDuration.WithLabelValues(backend, action, status).Observe(d.Seconds())
}

func (m *promMetrics) handler() http.Handler { return telemetry.Handler(m.reg) }

// agentCollector reads the agent's counters and connection at scrape time.
type agentCollector struct{ a *Agent }

func (c *agentCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- agentCommandsDesc
	ch <- agentConnectedDesc
}

func (c *agentCollector) Collect(ch chan<- prometheus.Metric) {
	for _, o := range c.a.commandCounts() {
		ch <- prometheus.MustNewConstMetric(agentCommandsDesc, prometheus.CounterValue, float64(o.n), o.outcome)
	}
	ch <- prometheus.MustNewConstMetric(agentConnectedDesc, prometheus.GaugeValue, c.a.natsConnected())
}

// Registry is the agent's private Prometheus registry, served at /metrics
// on MetricsAddr. (The slim build, tag grid_slim, has none.)
func (a *Agent) Registry() *prometheus.Registry { return a.obs.metrics.(*promMetrics).reg }
