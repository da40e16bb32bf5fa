package agent

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// BenchmarkCommand is one agent's cost per command end to end: a ping echo
// command published to a real embedded server, run by one agent and its
// final result stored in the results stream, waited for before the next.
// Its allocs/op count the whole process (server and benchmark included),
// so they compare builds, not the agent alone.
func BenchmarkCommand(b *testing.B) {
	h := newHarnessCollecting(b, false)
	h.startAgent("bench", nil)
	results := make(chan *nats.Msg, 16)
	sub, err := h.nc.ChanSubscribe(api.SubjectResults, results)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := h.nc.Flush(); err != nil {
		b.Fatal(err)
	}
	subject := api.NodeCommandSubject("bench", "ping", "echo")
	cmd := echo("jbench")
	run := func(i int) {
		cmd.JobID = "jbench" + strconv.Itoa(i)
		b.StopTimer()
		h.jobExists(cmd.JobID) // the controller stores results of jobs that exist
		b.StartTimer()
		data, err := json.Marshal(cmd)
		if err != nil {
			b.Fatal(err)
		}
		if err := h.nc.Publish(subject, data); err != nil {
			b.Fatal(err)
		}
		select {
		case <-results:
		case <-time.After(10 * time.Second):
			b.Fatalf("no result for command %d", i)
		}
	}
	// Warm up: the first commands fill the agent's caches and pools.
	for i := range 100 {
		run(-1 - i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		run(i)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/cmd")
}
