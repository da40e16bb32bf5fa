package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// BenchmarkFleetPage10k is the server's work for one GET /fleet over
// 10,000 nodes: filter, page and tally.
func BenchmarkFleetPage10k(b *testing.B) {
	r := newRegistry(nil, time.Minute, nil)
	now := time.Now()
	for i := range 10000 {
		id := fmt.Sprintf("node-%05d", i)
		r.nodes[id] = &api.NodeInfo{ID: id, Hostname: id + ".example", Groups: []string{fmt.Sprintf("dc%d.rack%02d", i%4, i%25)},
			Backends: []string{"ping", "file", "apt"}, Status: api.NodeOnline, Version: "v1", LastSeen: now}
	}
	b.ReportAllocs()
	for b.Loop() {
		p := r.fleetPage(fleetFilter{q: "node-0999"}, 100, 0)
		if p.Total != 10000 {
			b.Fatal(p.Total)
		}
	}
}
