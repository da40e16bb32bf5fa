package controller

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
)

// Recovery reads a job's final results back from the results stream: those
// stored on the job's one subject (step and node in the body) and those an
// earlier version stored on result.<job>.<step>.<node>, and nothing of
// another job, a running report, a step the job lacks or a failure a retry
// was still due for.
func TestFoldStoredResultsReadsBothSubjectForms(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := embedded.StartServer(ctx, embedded.ServerConfig{Port: -1, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.WaitForShutdown)
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: api.StreamResults, Subjects: []string{api.SubjectResults}}); err != nil {
		t.Fatal(err)
	}
	put := func(subject string, r api.TaskResult) {
		t.Helper()
		b, _ := json.Marshal(r)
		if _, err := js.Publish(ctx, subject, b); err != nil {
			t.Fatal(err)
		}
	}
	const job = "j1"
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 0, NodeID: "n1", Status: api.StepSuccess, Output: "one"})
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 1, NodeID: "n2", Status: api.StepFailed, Attempt: 1, Error: "two"})
	// An earlier version's subject names the step and node; the body's are
	// not read.
	put("result."+job+".0.n3", api.TaskResult{JobID: job, TaskIndex: 1, NodeID: "other", Status: api.StepSuccess, Output: "three"})
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 0, NodeID: "n4", Status: api.ResultRunning})
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 5, NodeID: "n5", Status: api.StepSuccess})
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 0, NodeID: "", Status: api.StepSuccess})
	put(api.ResultSubject(job), api.TaskResult{JobID: job, TaskIndex: 0, NodeID: "n6", Status: api.StepFailed, Attempt: 0})
	put(api.ResultSubject("j10"), api.TaskResult{JobID: "j10", TaskIndex: 0, NodeID: "n7", Status: api.StepSuccess})
	put("result.j10.0.n8", api.TaskResult{JobID: "j10", TaskIndex: 0, NodeID: "n8", Status: api.StepSuccess})

	// Step 0 may be retried once, so its failure at attempt 0 is not final.
	j := &api.Job{ID: job, Status: api.JobRunning, Tasks: []api.Phase{
		{Backend: "ping", Action: "echo", MaxRetries: 1}, {Backend: "ping", Action: "echo"}}}
	c := &Controller{js: js}
	if err := c.foldStoredResults(ctx, j); err != nil {
		t.Fatal(err)
	}
	got := map[[2]string]string{}
	for step := range 2 {
		for node, r := range j.Results[step] {
			got[[2]string{string(rune('0' + step)), node}] = string(r.Status) + ":" + r.Output + r.Error
		}
	}
	want := map[[2]string]string{
		{"0", "n1"}: "success:one",
		{"1", "n2"}: "failed:two",
		{"0", "n3"}: "success:three",
	}
	if len(got) != len(want) {
		t.Errorf("folded %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("step %s node %s: %q, want %q", k[0], k[1], got[k], v)
		}
	}
}
