package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Topology sizes the streams and buckets.
type Topology struct {
	// Replicas for every stream and bucket (1 on a single server). An
	// existing stream or bucket with another count is updated to it.
	Replicas int
	// NeverLower keeps the replicas of a stream or bucket that already has
	// more than Replicas: a count the controller chose by itself must not
	// undo one an operator set.
	NeverLower bool
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
	for _, step := range t.steps(js, nil, 0) {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// steps returns one function per stream and bucket that creates it or
// updates it to the topology. A stream that has fewer replicas than wanted
// is raised; when JetStream cannot place more replicas (too few servers up),
// the stream keeps its count, its other settings are still applied, and log
// says so, so that a controller restarting in a degraded cluster still
// starts. raiseWait is how long a refused raise is retried first (the
// step's caller retries on error): controllers of a cluster start in any
// order, and the servers that would hold the new replicas may be moments
// away.
func (t Topology) steps(js jetstream.JetStream, log *slog.Logger, raiseWait time.Duration) []func(context.Context) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	streams, buckets := t.configs()
	var steps []func(context.Context) error
	for _, sc := range streams {
		var refused time.Time
		steps = append(steps, func(ctx context.Context) error {
			err := t.ensure(ctx, js, log, &refused, raiseWait, "stream", sc.Name, sc.Name, func(ctx context.Context, replicas int) error {
				sc.Replicas = replicas
				_, err := js.CreateOrUpdateStream(ctx, sc)
				return err
			})
			if err != nil {
				return fmt.Errorf("stream %s: %w", sc.Name, err)
			}
			return nil
		})
	}
	for _, kc := range buckets {
		var refused time.Time
		steps = append(steps, func(ctx context.Context) error {
			err := t.ensure(ctx, js, log, &refused, raiseWait, "bucket", kc.Bucket, KVStream(kc.Bucket), func(ctx context.Context, replicas int) error {
				kc.Replicas = replicas
				_, err := js.CreateOrUpdateKeyValue(ctx, kc)
				return err
			})
			if err != nil {
				return fmt.Errorf("bucket %s: %w", kc.Bucket, err)
			}
			return nil
		})
	}
	return steps
}

// ensure applies one stream's or bucket's config with the replicas it should
// have. refused holds when JetStream first refused to raise it.
func (t Topology) ensure(ctx context.Context, js jetstream.JetStream, log *slog.Logger, refused *time.Time, raiseWait time.Duration,
	kind, name, stream string, apply func(context.Context, int) error) error {
	want, have, err := t.replicasFor(ctx, js, stream)
	if err != nil {
		return err
	}
	err = apply(ctx, want)
	if err == nil {
		switch {
		case have > 0 && want > have:
			log.Info("raised replicas", kind, name, "from", have, "to", want)
		case have > 0 && want < have:
			log.Warn("lowered replicas as configured", kind, name, "from", have, "to", want)
		}
		return nil
	}
	if have == 0 || want <= have || !cannotPlace(err) {
		return err
	}
	if refused.IsZero() {
		*refused = time.Now()
	}
	if time.Since(*refused) < raiseWait {
		return err
	}
	// Keep the count it has; the next start tries again.
	if err2 := apply(ctx, have); err2 != nil {
		return err2
	}
	log.Warn(fmt.Sprintf("%s %s keeps %d replicas: raising it to %d failed; it is raised at the next start "+
		"with all servers of the cluster up, or now with: nats stream edit %s --replicas %d",
		kind, name, have, want, stream, want),
		kind, name, "replicas", have, "want", want, "err", err)
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
		{Bucket: api.BucketEnrollments, Description: "agent enrollments (NKey, node id, groups) by node id", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		// Scoped join tokens: small records, a few per enrollment wave.
		// Capped so that no client of the API can grow it without bound
		// (a full bucket refuses new tokens, not enrollments).
		{Bucket: api.BucketJoinTokens, Description: "scoped join tokens by name (SHA-256, groups, expiry, uses; controllers only)", History: 1,
			MaxBytes: JoinTokensMaxBytes, MaxValueSize: 4 << 10, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketTokens, Description: "API tokens by name (SHA-256 of the token, role)", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketKeys, Description: "cluster keys (controllers only)", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketJobSecrets, Description: "sensitive params of unfinished jobs, encrypted", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketRateLimits, Description: "task starts per rate limit within its window (controllers only)", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
		{Bucket: api.BucketSchedules, Description: "cron schedules and the tick each fired last", History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage},
	}
	return streams, buckets
}

// JoinTokensMaxBytes caps the join_tokens bucket: about 2,000 records.
const JoinTokensMaxBytes = 1 << 20

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

// Names lists the topology's streams and buckets (by bucket name), in the
// order they are created.
func (t Topology) Names() (streams, buckets []string) {
	ss, bs := t.configs()
	for _, s := range ss {
		streams = append(streams, s.Name)
	}
	for _, b := range bs {
		buckets = append(buckets, b.Bucket)
	}
	return streams, buckets
}

// KVStream is the name of the stream that holds a KV bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// replicasFor returns the replicas to ask of stream (Replicas, or the
// stream's own count when NeverLower keeps a higher one) and the count it
// has now (0 when it does not exist yet).
func (t Topology) replicasFor(ctx context.Context, js jetstream.JetStream, stream string) (want, have int, err error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return t.Replicas, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	have = s.CachedInfo().Config.Replicas
	return t.wantReplicas(have), have, nil
}

// wantReplicas is the count to ask of a stream that has have (0: none yet).
func (t Topology) wantReplicas(have int) int {
	if t.NeverLower && have > t.Replicas {
		return have
	}
	return t.Replicas
}

// cannotPlace reports whether JetStream refused a replica count for good
// (not enough servers or resources for it, or no cluster at all), as opposed
// to a cluster that is still forming.
func cannotPlace(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.ErrorCode {
	case 10005, // no suitable peers for placement
		10023, // insufficient resources
		10074: // replicas > 1 not supported in non-clustered mode
		return true
	}
	return false
}
