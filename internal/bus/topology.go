package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Topology sizes the streams and buckets.
type Topology struct {
	// Replicas for every stream and bucket (1 on a single server).
	Replicas int
	// CommandsMaxAge and ResultsMaxAge bound how long commands and results
	// are kept for catch-up and recovery.
	CommandsMaxAge time.Duration
	ResultsMaxAge  time.Duration
	// MaxBytes caps the commands and results streams each.
	MaxBytes int64
}

// DefaultTopology suits one controller.
func DefaultTopology() Topology {
	return Topology{Replicas: 1, CommandsMaxAge: time.Hour, ResultsMaxAge: 24 * time.Hour, MaxBytes: 1 << 30}
}

// EnsureTopology creates or updates the streams and KV buckets of seed 000.
func EnsureTopology(ctx context.Context, js jetstream.JetStream, t Topology) error {
	streams, buckets := t.configs()
	for _, sc := range streams {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("stream %s: %w", sc.Name, err)
		}
	}
	for _, kc := range buckets {
		if _, err := js.CreateOrUpdateKeyValue(ctx, kc); err != nil {
			return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
		}
	}
	return nil
}

// configs returns the streams and buckets of the topology.
func (t Topology) configs() ([]jetstream.StreamConfig, []jetstream.KeyValueConfig) {
	if t.Replicas < 1 {
		t.Replicas = 1
	}
	streams := []jetstream.StreamConfig{
		{Name: api.StreamRequests, Subjects: []string{api.SubjectRequests}, Retention: jetstream.WorkQueuePolicy,
			Discard: jetstream.DiscardOld, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Name: api.StreamCommands, Subjects: []string{api.SubjectCommands}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardOld, MaxAge: t.CommandsMaxAge, MaxBytes: t.MaxBytes, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Name: api.StreamResults, Subjects: []string{api.SubjectResults}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardOld, MaxAge: t.ResultsMaxAge, MaxBytes: t.MaxBytes, Replicas: t.Replicas, Storage: jetstream.FileStorage},
	}
	buckets := []jetstream.KeyValueConfig{
		{Bucket: api.BucketJobs, Description: "job definitions and status", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketNodes, Description: "node registration and health", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketControllers, Description: "controller registration and heartbeat", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketSchemas, Description: "backend schema sets by digest", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketKeys, Description: "cluster keys (controllers only)", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketJobSecrets, Description: "sensitive params of unfinished jobs, encrypted", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
	}
	return streams, buckets
}

// WaitForBucket returns the bucket once it exists (a controller creates it),
// retrying until ctx ends.
func WaitForBucket(ctx context.Context, js jetstream.JetStream, name string) (jetstream.KeyValue, error) {
	for {
		kv, err := js.KeyValue(ctx, name)
		if err == nil {
			return kv, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, jetstream.ErrJetStreamNotEnabled) {
			// Transient errors (no responders while a cluster forms) also retry.
			_ = err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for bucket %s: %w (is a controller running?)", name, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
