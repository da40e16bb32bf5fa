package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// grid status shows each stream's replicas, current replicas and leader,
// and names the ones without a leader or with replicas behind.
func TestPrintStatusStreams(t *testing.T) {
	s := &api.Status{Replicas: 3, Streams: []api.StreamHealth{
		{Name: "requests", Stream: "requests", Replicas: 3, Current: 3, HasLeader: true, Leader: "c1"},
		{Name: "jobs", Bucket: true, Stream: "KV_jobs", Replicas: 3, Current: 2, HasLeader: true, Leader: "c2"},
		{Name: "results", Stream: "results", Error: "stream is offline"},
	}}
	var out bytes.Buffer
	if err := printStatus(&out, "http://c1:8765", s); err != nil {
		t.Fatal(err)
	}
	// Columns are padded with spaces; compare words.
	got := strings.Join(strings.Fields(out.String()), " ")
	for _, want := range []string{
		"streams: 3 replicas wanted",
		"requests: ok: 3 replicas, 3 current, leader c1",
		"KV_jobs: DEGRADED: 3 replicas, 2 current, leader c2",
		"results: NO LEADER: stream is offline",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
