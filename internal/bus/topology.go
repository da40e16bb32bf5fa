package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
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
	// AuditMaxAge is how long audit records are kept (audit_retention).
	AuditMaxAge time.Duration
	// Limits bound each stream and bucket, by its name (api.StreamResults,
	// api.BucketJobs, ...). One that is missing, or a zero field, leaves
	// that bound off.
	Limits map[string]Limit
}

// Limit bounds one stream or bucket.
type Limit struct {
	// MaxBytes caps what it holds. A bucket (and the requests and
	// dead-letter streams) then refuses new writes (discard new); the
	// commands and results streams drop their oldest messages (discard
	// old). An existing stream that holds more than MaxBytes keeps the
	// limit it has (see EnsureTopology).
	MaxBytes int64
	// MaxMsgSize caps each message (a KV value with its headers).
	MaxMsgSize int32
	// Setting names the controller setting behind MaxBytes, for messages
	// that say what to raise.
	Setting string
}

// Default caps on what each stream and bucket holds (see DESIGN.md,
// "Streams and buckets", for how they are sized). The controller's config
// overrides them (requests_max_bytes, ...).
const (
	DefaultRequestsMaxBytes = 256 << 20
	DefaultCommandsMaxBytes = 1 << 30
	DefaultResultsMaxBytes  = 1 << 30
	DefaultDLQMaxBytes      = 128 << 20
	DefaultJobsMaxBytes     = 1 << 30
	// DefaultAuditMaxBytes holds some two million records of about 500
	// bytes: a year of a busy fleet's API calls, ticks and job ends.
	DefaultAuditMaxBytes = 1 << 30
	// DefaultAuditRetention keeps a year of records plus slack, so that
	// an annual review still finds the whole year it looks back on.
	DefaultAuditRetention = 400 * 24 * time.Hour
	// MinSmallBucketMaxBytes is the least the small buckets (nodes,
	// schemas, ...) get when their cap is derived from the jobs bucket's.
	MinSmallBucketMaxBytes = 64 << 20
)

// DefaultMaxPayload is the embedded server's max_payload, the largest
// message the bus carries.
const DefaultMaxPayload = 8 << 20

// SmallBucketMaxBytes derives the cap of the small buckets from the jobs
// bucket's: a sixteenth of it, at least MinSmallBucketMaxBytes.
func SmallBucketMaxBytes(jobsMaxBytes int64) int64 {
	return max(jobsMaxBytes/16, MinSmallBucketMaxBytes)
}

// SmallBuckets are the buckets that share one cap (small_buckets_max_bytes).
var SmallBuckets = []string{api.BucketNodes, api.BucketSchemas, api.BucketControllers, api.BucketEnrollments,
	api.BucketTokens, api.BucketKeys, api.BucketJobSecrets, api.BucketRateLimits, api.BucketSchedules}

// Per-message caps of the streams and buckets whose entries are small by
// nature; the others (requests, commands, dlq, jobs, job_secrets,
// schedules), which carry a whole job or its params, get the bus's
// max_payload.
const (
	// ResultMaxMsgSize: a task's output, error and facts are each at most
	// 1 MiB (the agent's max_output_bytes limit; 64 KiB by default), plus
	// its timeline.
	ResultMaxMsgSize = 4 << 20
	// NodeMaxMsgSize: a node's record (id, groups, backends, seal key;
	// its schemas are kept apart) takes about 1 KiB.
	NodeMaxMsgSize = 64 << 10
	// SchemaMaxMsgSize: the biggest schema set the built-in backends make
	// is about 10 KB (9.1 KB, plus some 50 bytes per exec program).
	SchemaMaxMsgSize = 256 << 10
	// SmallMaxMsgSize: a controller's record, an enrollment, a token, the
	// cluster key, a rate limit's log (about 100 grants): well under 4 KiB.
	SmallMaxMsgSize = 64 << 10
	// AuditMaxMsgSize: an audit record names who, what and where; the
	// params it carries are cut down to fit (see the controller's audit).
	AuditMaxMsgSize = 64 << 10
)

// DefaultLimits are the caps with the default sizes, per-message caps
// bounded by maxPayload (0: DefaultMaxPayload).
func DefaultLimits(maxPayload int64) map[string]Limit {
	return Limits(maxPayload, DefaultRequestsMaxBytes, DefaultCommandsMaxBytes, DefaultResultsMaxBytes, DefaultDLQMaxBytes,
		DefaultJobsMaxBytes, SmallBucketMaxBytes(DefaultJobsMaxBytes))
}

// Limits are the caps of every stream and bucket: the given totals, with
// the names of the controller settings behind them, and per-message caps
// bounded by maxPayload (0: DefaultMaxPayload).
func Limits(maxPayload, requests, commands, results, dlq, jobs, small int64) map[string]Limit {
	if maxPayload <= 0 {
		maxPayload = DefaultMaxPayload
	}
	mp := int32(min(maxPayload, 1<<31-1))
	capped := func(n int32) int32 { return min(n, mp) }
	l := map[string]Limit{
		api.StreamRequests:    {MaxBytes: requests, MaxMsgSize: mp, Setting: "requests_max_bytes"},
		api.StreamCommands:    {MaxBytes: commands, MaxMsgSize: mp, Setting: "commands_max_bytes"},
		api.StreamResults:     {MaxBytes: results, MaxMsgSize: capped(ResultMaxMsgSize), Setting: "results_max_bytes"},
		api.StreamDeadLetters: {MaxBytes: dlq, MaxMsgSize: mp, Setting: "dlq_max_bytes"},
		api.BucketJobs:        {MaxBytes: jobs, MaxMsgSize: mp, Setting: "jobs_max_bytes"},
		api.StreamAudit:       {MaxBytes: DefaultAuditMaxBytes, MaxMsgSize: capped(AuditMaxMsgSize), Setting: "audit_max_bytes"},
	}
	for _, b := range SmallBuckets {
		size := int32(SmallMaxMsgSize)
		switch b {
		case api.BucketNodes:
			size = NodeMaxMsgSize
		case api.BucketSchemas:
			size = SchemaMaxMsgSize
		case api.BucketJobSecrets, api.BucketSchedules:
			// A job's sensitive values, a schedule's job: as big as a job.
			size = mp
		}
		l[b] = Limit{MaxBytes: small, MaxMsgSize: capped(size), Setting: "small_buckets_max_bytes"}
	}
	// A fixed cap: join tokens are made by admins, a few at a time.
	l[api.BucketJoinTokens] = Limit{MaxBytes: JoinTokensMaxBytes, MaxMsgSize: 4 << 10}
	// Sites too: one record each, made by admins.
	l[api.BucketSites] = Limit{MaxBytes: SitesMaxBytes, MaxMsgSize: 4 << 10}
	return l
}

// DefaultTopology suits one controller.
func DefaultTopology() Topology {
	return Topology{Replicas: 1, CommandsMaxAge: time.Hour, ResultsMaxAge: 24 * time.Hour, AuditMaxAge: DefaultAuditRetention,
		Limits: DefaultLimits(0)}
}

// EnsureTopology creates or updates the streams and KV buckets of seed 000.
//
// Limits are applied to existing streams too (an upgrade bounds the ones an
// earlier version left unbounded), raised or lowered as configured, with one
// exception: a cap is never set below what the stream holds now. A stream
// that discards old messages would delete them at once, and a bucket would
// refuse every new write; so such a stream keeps the cap it has (none, for
// one an earlier version made) and a warning names the setting. A later
// start applies the lower cap once the stream holds less (finished jobs
// expire after job_retention, commands and results after their max age).
func EnsureTopology(ctx context.Context, js jetstream.JetStream, t Topology) error {
	for _, step := range t.steps(js, nil, 0) {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

// EnsureStream creates or updates one stream or bucket of the topology, by
// its name, as EnsureTopology does (for the dead-letter stream, which is
// looked up again when it is used).
func EnsureStream(ctx context.Context, js jetstream.JetStream, t Topology, name string) error {
	streams, buckets := t.configs()
	for i, sc := range streams {
		if sc.Name == name {
			return t.steps(js, nil, 0)[i](ctx)
		}
	}
	for i, kc := range buckets {
		if kc.Bucket == name {
			return t.steps(js, nil, 0)[len(streams)+i](ctx)
		}
	}
	return fmt.Errorf("no stream or bucket %q in the topology", name)
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
			err := t.ensure(ctx, js, log, &refused, raiseWait, "stream", sc.Name, sc.Name, sc.MaxBytes, func(ctx context.Context, replicas int, maxBytes int64) error {
				sc.Replicas, sc.MaxBytes = replicas, maxBytes
				_, err := js.CreateOrUpdateStream(ctx, sc)
				return err
			})
			if err != nil {
				return t.explain("stream "+sc.Name, err)
			}
			return nil
		})
	}
	for _, kc := range buckets {
		var refused time.Time
		steps = append(steps, func(ctx context.Context) error {
			err := t.ensure(ctx, js, log, &refused, raiseWait, "bucket", kc.Bucket, KVStream(kc.Bucket), kc.MaxBytes, func(ctx context.Context, replicas int, maxBytes int64) error {
				kc.Replicas, kc.MaxBytes = replicas, maxBytes
				_, err := js.CreateOrUpdateKeyValue(ctx, kc)
				return err
			})
			if err != nil {
				return t.explain("bucket "+kc.Bucket, err)
			}
			return nil
		})
	}
	return steps
}

// explain names the stream or bucket in err, and adds what to do to
// JetStream's refusal to reserve the caps: the servers' JetStream storage
// (by default three quarters of the data dir's free disk) must hold every
// cap of the streams each server keeps a replica of. That refusal is not
// retried.
func (t Topology) explain(what string, err error) error {
	if noStorage(err) {
		return retry.Stop(fmt.Errorf("%s: %w: JetStream reserves each stream's and bucket's cap on every server holding a replica (%d MiB in all here); "+
			"free disk in the data dir, or lower requests_max_bytes, commands_max_bytes, results_max_bytes, dlq_max_bytes, jobs_max_bytes, small_buckets_max_bytes or audit_max_bytes",
			what, err, t.totalMaxBytes()>>20))
	}
	return fmt.Errorf("%s: %w", what, err)
}

// noStorage reports JetStream's refusal to reserve a stream's cap: "insufficient
// storage resources available" (10047).
func noStorage(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10047
}

// totalMaxBytes is the sum of the caps.
func (t Topology) totalMaxBytes() int64 {
	var n int64
	for _, l := range t.Limits {
		n += max(l.MaxBytes, 0)
	}
	return n
}

// ensure applies one stream's or bucket's config with the replicas it should
// have and its cap (maxBytes, or the one it has when it holds more).
// refused holds when JetStream first refused to raise it.
func (t Topology) ensure(ctx context.Context, js jetstream.JetStream, log *slog.Logger, refused *time.Time, raiseWait time.Duration,
	kind, name, stream string, maxBytes int64, apply func(context.Context, int, int64) error) error {
	info, err := streamInfo(ctx, js, stream)
	if err != nil {
		return err
	}
	want, have := t.Replicas, 0
	if info != nil {
		have = info.Config.Replicas
		want = t.wantReplicas(have)
		if stored := int64(info.State.Bytes); maxBytes > 0 && stored > maxBytes {
			kept := info.Config.MaxBytes
			if kept <= 0 {
				kept = -1
			}
			log.Warn(fmt.Sprintf("%s %s holds %d bytes, more than its configured cap of %d (%s): it keeps its cap (%s) so that nothing "+
				"is deleted or refused at once; the lower cap applies at a start once it holds less, or raise %s",
				kind, name, stored, maxBytes, t.Limits[name].Setting, capText(kept), t.Limits[name].Setting),
				kind, name, "bytes", stored, "max_bytes", maxBytes, "kept", kept)
			maxBytes = kept
		}
	}
	err = apply(ctx, want, maxBytes)
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
	if err2 := apply(ctx, have, maxBytes); err2 != nil {
		return err2
	}
	log.Warn(fmt.Sprintf("%s %s keeps %d replicas: raising it to %d failed; it is raised at the next start "+
		"with all servers of the cluster up, or now with: nats stream edit %s --replicas %d",
		kind, name, have, want, stream, want),
		kind, name, "replicas", have, "want", want, "err", err)
	return nil
}

func capText(n int64) string {
	if n <= 0 {
		return "none"
	}
	return fmt.Sprintf("%d bytes", n)
}

// configs returns the streams and buckets of the topology.
func (t Topology) configs() ([]jetstream.StreamConfig, []jetstream.KeyValueConfig) {
	if t.Replicas < 1 {
		t.Replicas = 1
	}
	lim := func(name string) (int64, int32) {
		l := t.Limits[name]
		return l.MaxBytes, l.MaxMsgSize
	}
	stream := func(sc jetstream.StreamConfig) jetstream.StreamConfig {
		sc.MaxBytes, sc.MaxMsgSize = lim(sc.Name)
		if sc.MaxBytes <= 0 {
			sc.MaxBytes = -1
		}
		if sc.MaxMsgSize <= 0 {
			sc.MaxMsgSize = -1
		}
		sc.Replicas, sc.Storage = t.Replicas, jetstream.FileStorage
		// Finished jobs and results are JSON with the same keys and
		// timestamps over and over: S2 on the store's blocks takes them to
		// a fraction on disk (DESIGN.md, "Caps"). It costs little CPU (S2
		// is made for speed) and changes nothing a client sees; the caps
		// (MaxBytes) still count the messages' own size.
		sc.Compression = jetstream.S2Compression
		return sc
	}
	// Requests and dead letters refuse new messages when full: dropping
	// the oldest would lose a queued job or a dead letter without a word.
	// Commands and results are kept for catch-up and audit only, so the
	// oldest go first.
	streams := []jetstream.StreamConfig{
		stream(jetstream.StreamConfig{Name: api.StreamRequests, Subjects: []string{api.SubjectRequests}, Retention: jetstream.WorkQueuePolicy,
			Discard: jetstream.DiscardNew}),
		stream(jetstream.StreamConfig{Name: api.StreamCommands, Subjects: []string{api.SubjectCommands}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardOld, MaxAge: t.CommandsMaxAge}),
		stream(jetstream.StreamConfig{Name: api.StreamResults, Subjects: []string{api.SubjectResults}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardOld, MaxAge: t.ResultsMaxAge}),
		stream(jetstream.StreamConfig{Name: api.StreamDeadLetters, Subjects: []string{"dlq.>"}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardNew, Description: "job requests no controller could claim after max_deliveries deliveries"}),
		// The audit trail refuses new records when full rather than drop
		// the oldest: a trail that forgets silently is no trail, and a
		// refused record makes the API refuse the action (fail closed).
		// Records are never deleted or purged by GRID; DenyDelete and
		// DenyPurge make JetStream refuse that to every client too.
		stream(jetstream.StreamConfig{Name: api.StreamAudit, Subjects: []string{api.SubjectAudit}, Retention: jetstream.LimitsPolicy,
			Discard: jetstream.DiscardNew, MaxAge: t.AuditMaxAge, DenyDelete: true, DenyPurge: true,
			Description: "audit trail: who did what, chained by hash (controllers only)"}),
	}
	bucket := func(name, desc string) jetstream.KeyValueConfig {
		kc := jetstream.KeyValueConfig{Bucket: name, Description: desc, History: 1, Replicas: t.Replicas, Storage: jetstream.FileStorage,
			Compression: true}
		kc.MaxBytes, kc.MaxValueSize = lim(name)
		return kc
	}
	buckets := []jetstream.KeyValueConfig{
		bucket(api.BucketJobs, "job definitions and status"),
		bucket(api.BucketNodes, "node registration and health"),
		bucket(api.BucketControllers, "controller registration and heartbeat"),
		bucket(api.BucketSchemas, "backend schema sets by digest"),
		bucket(api.BucketEnrollments, "agent enrollments (NKey, node id, groups) by node id"),
		// Scoped join tokens: small records, a few per enrollment wave.
		// Capped so that no client of the API can grow it without bound
		// (a full bucket refuses new tokens, not enrollments).
		bucket(api.BucketJoinTokens, "scoped join tokens by name (SHA-256, groups, expiry, uses; controllers only)"),
		bucket(api.BucketSites, "sites by name (the public NKey of the site's relay; controllers only)"),
		bucket(api.BucketTokens, "API tokens by name (SHA-256 of the token, role)"),
		bucket(api.BucketKeys, "cluster keys (controllers only)"),
		bucket(api.BucketJobSecrets, "sensitive params of unfinished jobs, encrypted"),
		bucket(api.BucketRateLimits, "task starts per rate limit within its window (controllers only)"),
		bucket(api.BucketSchedules, "cron schedules and the tick each fired last"),
	}
	return streams, buckets
}

// JoinTokensMaxBytes caps the join_tokens bucket: about 2,000 records.
const JoinTokensMaxBytes = 1 << 20

// SitesMaxBytes caps the sites bucket: about 2,000 sites.
const SitesMaxBytes = 1 << 20

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

// CapturedSubjects are the subjects the topology's streams store: each
// stream's own, and $KV.<bucket>.> for each bucket.
func (t Topology) CapturedSubjects() []string {
	ss, bs := t.configs()
	var out []string
	for _, s := range ss {
		out = append(out, s.Subjects...)
	}
	for _, b := range bs {
		out = append(out, KVSubject(b.Bucket, ">"))
	}
	return out
}

// KVStream is the name of the stream that holds a KV bucket.
func KVStream(bucket string) string { return "KV_" + bucket }

// KVSubject is the subject a bucket's key is written on: a put is a
// publish there, which plain subscribers hear too.
func KVSubject(bucket, key string) string { return "$KV." + bucket + "." + key }

// streamInfo returns a stream's info, nil when it does not exist yet.
func streamInfo(ctx context.Context, js jetstream.JetStream, stream string) (*jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.CachedInfo(), nil
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
