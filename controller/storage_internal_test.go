package controller

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/bus/embedded"
)

// A jobs bucket at its cap: JetStream refuses a new job, and the store
// answers errStorageFull naming the setting; an existing job's entry is
// still replaced by one no larger. Short of the cap, the store refuses new
// jobs once only the reserve kept for running jobs is left.
func TestJobStoreFullBucketIsStorageFull(t *testing.T) {
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
	const capBytes = 256 << 10
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "jobs", History: 1, MaxBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	job := func(id string) *api.Job {
		return &api.Job{ID: id, Status: api.JobPending, Error: strings.Repeat("p", 10<<10)}
	}

	// JetStream's own refusal (the store's check blinded: no cap known).
	hard := &jobStore{kv: kv, room: &room{kv: kv, bucket: "jobs", setting: "jobs_max_bytes", at: time.Now().Add(time.Hour)}}
	var full error
	var first *api.Job
	var firstRev uint64
	for i := range 100 {
		j := job("job-" + string(rune('a'+i%26)) + strings.Repeat("x", i/26))
		rev, _, err := hard.create(ctx, j)
		if err != nil {
			full = err
			break
		}
		if first == nil {
			first, firstRev = j, rev
		}
	}
	if !errors.Is(full, errStorageFull) || !isMaxBytes(full) || !strings.Contains(full.Error(), "jobs_max_bytes") {
		t.Fatalf("a job into the full bucket: %v, want errStorageFull naming jobs_max_bytes", full)
	}
	// A running job's update that does not grow its entry still lands.
	first.Status = api.JobRunning
	if _, err := hard.update(ctx, first, firstRev); err != nil {
		t.Errorf("update of a job in the full bucket: %v", err)
	}

	// The store's own check, with the cap read from the bucket, refuses
	// before JetStream does, leaving the reserve free.
	kv2, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "jobs2", History: 1, MaxBytes: capBytes})
	if err != nil {
		t.Fatal(err)
	}
	soft := newJobStore(kv2, "jobs_max_bytes")
	full = nil
	for i := range 100 {
		soft.room.at = time.Time{} // read the usage every time
		if _, _, err := soft.create(ctx, job("job-"+strings.Repeat("y", i+1))); err != nil {
			full = err
			break
		}
	}
	if !errors.Is(full, errStorageFull) || isMaxBytes(full) || !strings.Contains(full.Error(), "jobs_max_bytes") {
		t.Fatalf("a job into the nearly full bucket: %v, want errStorageFull from the store's check", full)
	}
	st, err := kv2.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Bytes(); used > capBytes-capBytes/jobsReserveDiv {
		t.Errorf("the bucket holds %d bytes: more than %d, the reserve is used", used, capBytes-capBytes/jobsReserveDiv)
	}
}
