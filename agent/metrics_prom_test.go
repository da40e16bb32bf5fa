//go:build !grid_slim

package agent

import (
	"testing"
	"time"
)

// The cached children count in the vectors the registry serves.
func TestPromTaskSeriesCached(t *testing.T) {
	a := &Agent{slots: make(chan struct{}, 1)}
	m := newAgentMetrics(a).(*promMetrics)
	for range 3 {
		m.taskDone("ping", "echo", "success", 2*time.Millisecond)
	}
	m.taskDone("ping", "echo", "failed", time.Second)
	families, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	observed := map[string]uint64{}
	for _, f := range families {
		for _, s := range f.GetMetric() {
			status := ""
			for _, l := range s.GetLabel() {
				if l.GetName() == "status" {
					status = l.GetValue()
				}
			}
			switch f.GetName() {
			case metricTasks:
				counts[status] = s.GetCounter().GetValue()
			case metricTaskDuration:
				observed[status] = s.GetHistogram().GetSampleCount()
			}
		}
	}
	if counts["success"] != 3 || counts["failed"] != 1 {
		t.Errorf("task counts %v, want success 3 and failed 1", counts)
	}
	if observed["success"] != 3 || observed["failed"] != 1 {
		t.Errorf("durations observed %v, want success 3 and failed 1", observed)
	}
	if len(m.series) != 2 {
		t.Errorf("%d cached series, want 2", len(m.series))
	}
}
