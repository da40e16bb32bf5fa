package controller

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Every run in this package's tests checks its encodings against
// json.Marshal.
func init() { checkEncoding = true }

// jobHead, Results and jobTail must be api.Job's fields, in order, with its
// tags, or the encoder would write another JSON than json.Marshal.
func TestJobEncoderCoversJob(t *testing.T) {
	var got []string
	for _, typ := range []reflect.Type{reflect.TypeFor[jobHead](), nil, reflect.TypeFor[jobTail]()} {
		if typ == nil {
			f, _ := reflect.TypeFor[api.Job]().FieldByName("Results")
			got = append(got, fmt.Sprintf("%s %s %s", f.Name, f.Type, f.Tag))
			continue
		}
		for i := range typ.NumField() {
			f := typ.Field(i)
			got = append(got, fmt.Sprintf("%s %s %s", f.Name, f.Type, f.Tag))
		}
	}
	var want []string
	jt := reflect.TypeFor[api.Job]()
	for i := range jt.NumField() {
		f := jt.Field(i)
		want = append(want, fmt.Sprintf("%s %s %s", f.Name, f.Type, f.Tag))
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("encoder fields\n%v\nwant api.Job's\n%v", got, want)
	}
}

func TestJobEncoderMatchesMarshal(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	pct := 40
	j := &api.Job{ID: "j1", Target: api.Target{Scope: api.ScopeAll}, Status: api.JobRunning, Expected: []string{"a", "b"},
		Tasks:     []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "<hi & bye>", "results": "0"}}},
		CreatedAt: now, UpdatedAt: now}
	e := newJobEncoder()
	e.check = false
	same := func(what string) {
		t.Helper()
		got, err := e.encode(j)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(j)
		if string(got) != string(want) {
			t.Fatalf("%s:\n got %s\nwant %s", what, got, want)
		}
	}
	same("no results")
	j.Results = api.JobResults{}
	same("empty results")
	for s := range 12 { // 10 and 11 sort before 2
		m := ensureStep(j, s)
		m["b"] = &api.NodeResult{Status: api.StepDispatched, Events: []api.Event{{Status: api.StepDispatched, Time: now, Attempt: 1}}}
		m["a"] = &api.NodeResult{Status: api.StepRunning, Progress: &pct}
	}
	j.Results[12] = nil
	j.Results[13] = map[string]*api.NodeResult{"n<1>&": {Status: api.StepSkipped}, "z": nil, "é": {Status: api.StepFailed, Error: "x\ny\"z"}}
	same("pending results")
	// Results change in place until final, then are cached.
	for s := range 12 {
		r := j.Results[s]["a"]
		r.Status, r.Output, r.Facts, r.Duration, r.Progress = api.StepSuccess, "out", map[string]any{"k": []any{1.5, "v"}}, api.Duration(1500), nil
		same(fmt.Sprintf("step %d final", s))
	}
	j.Results[3]["b"].Status = api.StepPending
	j.Results[3]["b"].Attempts = 2
	same("retry pending")
	j.Results[3]["b"] = &api.NodeResult{Status: api.StepSkipped, Output: "replaced"}
	j.Results[3]["c"] = &api.NodeResult{Status: api.StepCancelled}
	same("replaced and added")
	fin := now.Add(time.Second)
	j.Status, j.Error, j.Owner, j.TraceID, j.StartedAt, j.FinishedAt, j.Step = api.JobCompleted, "e", "ctl", "t", &now, &fin, 13
	same("terminal")
	if len(e.final) == 0 {
		t.Fatal("nothing cached")
	}
}

func BenchmarkJobEncode(b *testing.B) {
	j := bigJob(10000)
	b.Run("json.Marshal", func(b *testing.B) {
		for b.Loop() {
			_, _ = json.Marshal(j)
		}
	})
	b.Run("jobEncoder", func(b *testing.B) {
		e := newJobEncoder()
		e.check = false
		for b.Loop() {
			_, _ = e.encode(j)
		}
	})
}

// bigJob is a finished one-step job on n nodes.
func bigJob(n int) *api.Job {
	now := time.Now().UTC()
	j := &api.Job{ID: "big", Target: api.Target{Scope: api.ScopeAll}, Status: api.JobCompleted, CreatedAt: now, UpdatedAt: now,
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": "bench"}}}}
	m := ensureStep(j, 0)
	for i := range n {
		id := fmt.Sprintf("bench-abcdef-%d", i)
		j.Expected = append(j.Expected, id)
		m[id] = &api.NodeResult{Status: api.StepSuccess, Output: "bench", Duration: api.Duration(12345), Attempts: 1,
			Events: []api.Event{{Status: api.StepDispatched, Time: now, Attempt: 1}, {Status: api.StepRunning, Time: now, Attempt: 1},
				{Status: api.StepSuccess, Time: now, Attempt: 1}}}
	}
	return j
}

func TestFlushWait(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		took time.Duration
		size int
		want time.Duration
	}{
		{0, 0, 100 * ms},                        // a small job: the flush interval
		{2 * ms, 300 << 10, 100 * ms},           // 1,000 nodes
		{30 * ms, 1 << 20, 300 * ms},            // a slow write: ten times its time
		{10 * ms, 3 << 20, 750 * ms},            // 10,000 nodes: by rate
		{time.Second, 1 << 30, 5 * time.Second}, // capped
	} {
		if got := flushWait(100*ms, c.took, c.size); got != c.want {
			t.Errorf("flushWait(took %s, %d bytes) = %s, want %s", c.took, c.size, got, c.want)
		}
	}
}
