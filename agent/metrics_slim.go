//go:build grid_slim

package agent

import (
	"bufio"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// taskBuckets are telemetry.TaskBuckets (a test keeps them equal): the slim
// build does not import telemetry, which holds the Prometheus client.
var taskBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600}

// slimMetrics are the agent's grid_agent_* series kept by hand and written
// in the Prometheus text format (version 0.0.4); they are what the
// Prometheus build serves, without its go_* and process_* series.
type slimMetrics struct {
	a *Agent

	mu    sync.Mutex
	tasks map[taskLabels]*taskSeries
}

type taskSeries struct {
	count   uint64
	sum     float64
	buckets []uint64 // per bucket, not cumulative
}

func newAgentMetrics(a *Agent) agentMetrics {
	return &slimMetrics{a: a, tasks: map[taskLabels]*taskSeries{}}
}

func (m *slimMetrics) taskDone(backend, action, status string, d time.Duration) {
	secs := d.Seconds()
	m.mu.Lock()
	defer m.mu.Unlock()
	k := taskLabels{backend, action, status}
	s := m.tasks[k]
	if s == nil {
		s = &taskSeries{buckets: make([]uint64, len(taskBuckets))}
		m.tasks[k] = s
	}
	s.count++
	s.sum += secs
	if i, _ := slices.BinarySearch(taskBuckets, secs); i < len(taskBuckets) {
		s.buckets[i]++
	}
}

func (m *slimMetrics) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		bw := bufio.NewWriter(w)
		m.write(bw)
		_ = bw.Flush()
	})
}

// write writes every series, families in name order as Prometheus's
// client does, series in label order.
func (m *slimMetrics) write(w *bufio.Writer) {
	m.mu.Lock()
	keys := make([]taskLabels, 0, len(m.tasks))
	for k := range m.tasks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y taskLabels) int {
		return strings.Compare(x.backend+"\x00"+x.action+"\x00"+x.status, y.backend+"\x00"+y.action+"\x00"+y.status)
	})
	series := make([]taskSeries, len(keys))
	for i, k := range keys {
		s := m.tasks[k]
		series[i] = taskSeries{count: s.count, sum: s.sum, buckets: slices.Clone(s.buckets)}
	}
	m.mu.Unlock()

	header(w, metricCommands, helpCommands, "counter")
	for _, o := range m.a.commandCounts() {
		sample(w, metricCommands, `outcome="`+o.outcome+`"`, float64(o.n))
	}
	header(w, metricMaxConcurrent, helpMaxConcurrent, "gauge")
	sample(w, metricMaxConcurrent, "", float64(cap(m.a.slots)))
	header(w, metricNATSConnected, helpNATSConnected, "gauge")
	sample(w, metricNATSConnected, "", m.a.natsConnected())
	header(w, metricTaskDuration, helpTaskDuration, "histogram")
	for i, k := range keys {
		labels := k.String()
		var cum uint64
		for j, b := range taskBuckets {
			cum += series[i].buckets[j]
			sample(w, metricTaskDuration+"_bucket", labels+`,le="`+formatFloat(b)+`"`, float64(cum))
		}
		sample(w, metricTaskDuration+"_bucket", labels+`,le="+Inf"`, float64(series[i].count))
		sample(w, metricTaskDuration+"_sum", labels, series[i].sum)
		sample(w, metricTaskDuration+"_count", labels, float64(series[i].count))
	}
	header(w, metricTasksInFlight, helpTasksInFlight, "gauge")
	sample(w, metricTasksInFlight, "", float64(len(m.a.slots)))
	header(w, metricTasks, helpTasks, "counter")
	for i, k := range keys {
		sample(w, metricTasks, k.String(), float64(series[i].count))
	}
}

func (k taskLabels) String() string {
	return `backend="` + escapeLabel(k.backend) + `",action="` + escapeLabel(k.action) + `",status="` + escapeLabel(k.status) + `"`
}

func header(w *bufio.Writer, name, help, typ string) {
	_, _ = w.WriteString("# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n")
}

func sample(w *bufio.Writer, name, labels string, v float64) {
	_, _ = w.WriteString(name)
	if labels != "" {
		_, _ = w.WriteString("{" + labels + "}")
	}
	_, _ = w.WriteString(" " + formatFloat(v) + "\n")
}

func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// escapeLabel escapes a label value as the text format wants: backslash,
// double quote and line feed.
func escapeLabel(v string) string {
	if !strings.ContainsAny(v, "\\\"\n") {
		return v
	}
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
