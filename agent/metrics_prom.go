//go:build !grid_slim

package agent

import (
	"net/http"
	"sync"
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

	// series caches the children of tasks and taskDuration by their
	// labels, so a finished task does not hash its label values into the
	// vectors again: an agent sees a handful of label sets.
	mu     sync.RWMutex
	series map[taskLabels]promSeries
}

type promSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
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
		series: map[taskLabels]promSeries{},
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
	k := taskLabels{backend, action, status}
	m.mu.RLock()
	s, ok := m.series[k]
	m.mu.RUnlock()
	if !ok {
		s = promSeries{
			count:    m.tasks.WithLabelValues(backend, action, status),
			duration: m.taskDuration.WithLabelValues(backend, action, status),
		}
		m.mu.Lock()
		m.series[k] = s
		m.mu.Unlock()
	}
	s.count.Inc()
	s.duration.Observe(d.Seconds())
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
