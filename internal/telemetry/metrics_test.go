package telemetry

import (
	"runtime"
	"testing"
)

// The registry exports the live heap (what the controller's soft memory
// limit is computed from) beside the default Go and process figures.
func TestRegistryExportsLiveHeap(t *testing.T) {
	runtime.GC()
	mfs, err := NewRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"go_gc_heap_live_bytes": false, "go_memstats_heap_inuse_bytes": false, "go_goroutines": false, "process_open_fds": false}
	for _, mf := range mfs {
		if _, ok := want[mf.GetName()]; !ok {
			continue
		}
		want[mf.GetName()] = true
		if mf.GetName() == "go_gc_heap_live_bytes" {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); v <= 0 {
				t.Errorf("go_gc_heap_live_bytes = %v after a collection, want > 0", v)
			}
		}
	}
	for name, found := range want {
		if !found {
			t.Errorf("no %s", name)
		}
	}
}
