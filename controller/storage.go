package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// A write refused because a stream or bucket is at its cap is a
// *storageFullError naming the setting to raise; it matches errStorageFull
// (errors.Is), which the API answers with 507 Insufficient Storage.

// storageFullError says which bucket is full and which setting raises it.
type storageFullError struct {
	bucket, setting string
	// used and limit are the bucket's bytes and cap when known (0 if not).
	used, limit int64
	hint        string
	err         error // JetStream's refusal, when it refused
}

func (e *storageFullError) Error() string {
	msg := fmt.Sprintf("%s: the %s bucket is full", errStorageFull, e.bucket)
	if e.limit > 0 {
		msg = fmt.Sprintf("%s: the %s bucket has no room for new entries (%d of its %d bytes used)", errStorageFull, e.bucket, e.used, e.limit)
	}
	msg += fmt.Sprintf("; raise %s in the controller's config", e.setting)
	if e.hint != "" {
		msg += ", " + e.hint
	}
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *storageFullError) Is(target error) bool { return target == errStorageFull }
func (e *storageFullError) Unwrap() error        { return e.err }

// isMaxBytes reports JetStream's refusal of a write to a stream (a KV
// bucket) with discard new that is at its max bytes: error code 10077
// (JSStreamStoreFailedF) with the store's "maximum bytes exceeded".
func isMaxBytes(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 &&
		strings.Contains(apiErr.Description, "maximum bytes exceeded")
}

// jobsRoomHint is what else frees room in the jobs bucket.
const jobsRoomHint = "or shorten job_retention (finished jobs are removed that long after they end)"

// jobsReserveDiv: new jobs may fill the jobs bucket up to all but
// 1/jobsReserveDiv of its cap; the rest is kept for running jobs, whose
// entries grow as their results come in (a write that outgrows a full
// bucket is refused, and in a replicated bucket so is every write once it
// is over its cap).
const jobsReserveDiv = 8

// roomCheckEvery bounds how often the jobs bucket's usage is read; in
// between, the bytes of the jobs created are added to the last reading.
const roomCheckEvery = 250 * time.Millisecond

// room tracks a bucket's usage against its cap for new entries.
type room struct {
	kv              jetstream.KeyValue
	bucket, setting string

	mu          sync.Mutex
	at          time.Time
	used, limit int64
}

// check refuses an entry of n bytes when it would fill the bucket past its
// cap less the reserve kept for running jobs; it counts the n bytes as used
// when it accepts them.
func (r *room) check(ctx context.Context, n int) error {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.at) >= roomCheckEvery {
		st, err := r.kv.Status(ctx)
		if err != nil {
			// Not knowing is no reason to refuse: JetStream enforces the
			// cap itself.
			return nil
		}
		r.used, r.limit, r.at = int64(st.Bytes()), 0, time.Now()
		if ks, ok := st.(*jetstream.KeyValueBucketStatus); ok {
			r.limit = ks.StreamInfo().Config.MaxBytes
		}
	}
	if r.limit > 0 && r.used+int64(n) > r.limit-r.limit/jobsReserveDiv {
		return &storageFullError{bucket: r.bucket, setting: r.setting, used: r.used, limit: r.limit,
			hint: fmt.Sprintf("%s; new jobs may fill %d bytes, the rest is kept for running jobs", jobsRoomHint, r.limit-r.limit/jobsReserveDiv)}
	}
	r.used += int64(n)
	return nil
}
