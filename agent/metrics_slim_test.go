//go:build grid_slim

package agent

import (
	"net/http"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
	"github.com/gridfleet/terraform-provider-grid/internal/testwait"
)

// The slim build's /metrics, read by Prometheus's own text parser, holds
// the agent's series with the values tasks and commands gave them.
// Run with: go test -tags grid_slim -run TestSlimMetrics ./agent/
func TestSlimMetrics(t *testing.T) {
	if !slices.Equal(taskBuckets, telemetry.TaskBuckets) {
		t.Fatalf("taskBuckets %v differ from telemetry.TaskBuckets %v", taskBuckets, telemetry.TaskBuckets)
	}
	h := newHarness(t)
	a, _ := h.startAgent("slim", func(c *Config) { c.MetricsAddr = "127.0.0.1:0" })
	h.send(api.NodeCommandSubject("slim", "ping", "echo"), echo("slim-1"))
	h.final("slim-1", "slim", 10*time.Second)
	h.send(api.NodeCommandSubject("slim", "test", "fail"), command("slim-2", "test", "fail", nil))
	h.final("slim-2", "slim", 10*time.Second)
	a.obs.metrics.taskDone(`we"ird`, "a\\b", "x\ny", 0)

	var fams map[string]*dto.MetricFamily
	testwait.Until(t, 10*time.Second, 20*time.Millisecond, "three task series", func() bool {
		fams = scrapeSlim(t, a.MetricsURL()+"/metrics")
		return len(fams[metricTasks].GetMetric()) == 3
	})
	cases := []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{metricTasks, map[string]string{"backend": "ping", "action": "echo", "status": api.StepSuccess}, 1},
		{metricTasks, map[string]string{"backend": "test", "action": "fail", "status": api.StepFailed}, 1},
		{metricTasks, map[string]string{"backend": `we"ird`, "action": "a\\b", "status": "x\ny"}, 1},
		{metricTaskDuration, map[string]string{"backend": "ping", "action": "echo", "status": api.StepSuccess}, 1},
		{metricCommands, map[string]string{"outcome": "accepted"}, 2},
		{metricCommands, map[string]string{"outcome": "duplicate"}, 0},
		{metricNATSConnected, nil, 1},
		{metricMaxConcurrent, nil, DefaultMaxConcurrent},
		{metricTasksInFlight, nil, 0},
	}
	for _, c := range cases {
		m := findMetric(fams[c.family], c.labels)
		if m == nil {
			t.Errorf("%s%v: missing", c.family, c.labels)
			continue
		}
		var got float64
		switch {
		case m.Counter != nil:
			got = m.Counter.GetValue()
		case m.Gauge != nil:
			got = m.Gauge.GetValue()
		case m.Histogram != nil:
			got = float64(m.Histogram.GetSampleCount())
			// The parser keeps +Inf as a bucket of its own.
			if n := len(m.Histogram.GetBucket()); n != len(taskBuckets)+1 {
				t.Errorf("%s: %d buckets, want %d and +Inf", c.family, n, len(taskBuckets))
			}
			if last := m.Histogram.GetBucket()[len(taskBuckets)-1].GetCumulativeCount(); last != 1 {
				t.Errorf("%s: last bucket %d, want 1 (cumulative)", c.family, last)
			}
		}
		if got != c.want {
			t.Errorf("%s%v = %v, want %v", c.family, c.labels, got, c.want)
		}
	}
}

func scrapeSlim(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	if ct := resp.Header.Get("Content-Type"); expfmt.ResponseFormat(resp.Header).FormatType() != expfmt.TypeTextPlain {
		t.Fatalf("Content-Type %q is not the text format", ct)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

func findMetric(f *dto.MetricFamily, labels map[string]string) *dto.Metric {
	for _, m := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range m.GetLabel() {
			got[l.GetName()] = l.GetValue()
		}
		match := len(got) == len(labels)
		for k, v := range labels {
			match = match && got[k] == v
		}
		if match {
			return m
		}
	}
	return nil
}
