package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// jobStore reads and writes jobs in the jobs bucket. Every update is a
// compare-and-swap on the revision the writer last saw.
type jobStore struct {
	kv jetstream.KeyValue
	// room refuses new jobs when the bucket is nearly full (nil: only
	// JetStream's own cap applies).
	room *room
}

// newJobStore returns the store of the jobs bucket, whose cap is raised by
// setting.
func newJobStore(kv jetstream.KeyValue, setting string) *jobStore {
	return &jobStore{kv: kv, room: &room{kv: kv, bucket: kv.Bucket(), setting: setting}}
}

var errConflict = errors.New("job changed concurrently")

func (s *jobStore) get(ctx context.Context, id string) (*api.Job, uint64, error) {
	return getJSON[api.Job](ctx, s.kv, "job", id)
}

// getJSON reads the JSON value under id and its revision; api.ErrNotFound
// for a missing key or an id no key can have.
func getJSON[T any](ctx context.Context, kv jetstream.KeyValue, what, id string) (*T, uint64, error) {
	if !api.ValidToken(id) {
		return nil, 0, api.ErrNotFound
	}
	e, err := kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, api.ErrNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read %s %s: %w", what, id, err)
	}
	var v T
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, 0, fmt.Errorf("decode %s %s: %w", what, id, err)
	}
	return &v, e.Revision(), nil
}

// getRaw returns a stored job's JSON with its status and owner.
func (s *jobStore) getRaw(ctx context.Context, id string) ([]byte, jobHeadFields, error) {
	if !api.ValidToken(id) {
		return nil, jobHeadFields{}, api.ErrNotFound
	}
	e, err := s.kv.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, jobHeadFields{}, api.ErrNotFound
	}
	if err != nil {
		return nil, jobHeadFields{}, fmt.Errorf("read job %s: %w", id, err)
	}
	return e.Value(), decodeJobHead(e.Value()), nil
}

// create stores a new job and returns its revision and JSON.
func (s *jobStore) create(ctx context.Context, j *api.Job) (uint64, []byte, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return 0, nil, err
	}
	if err := s.room.check(ctx, len(b)); err != nil {
		return 0, nil, fmt.Errorf("store job %s: %w", j.ID, err)
	}
	rev, err := s.kv.Create(ctx, j.ID, b)
	if err != nil {
		if isMaxBytes(err) && s.room != nil {
			err = &storageFullError{bucket: s.room.bucket, setting: s.room.setting, hint: jobsRoomHint, err: err}
		}
		return 0, nil, fmt.Errorf("store job %s: %w", j.ID, err)
	}
	return rev, b, nil
}

// update writes j if the stored revision is still rev.
func (s *jobStore) update(ctx context.Context, j *api.Job, rev uint64) (uint64, error) {
	b, err := json.Marshal(j)
	if err != nil {
		return 0, err
	}
	return s.updateRaw(ctx, j.ID, b, rev)
}

// updateRaw writes an encoded job if the stored revision is still rev.
func (s *jobStore) updateRaw(ctx context.Context, id string, b []byte, rev uint64) (uint64, error) {
	nrev, err := s.kv.Update(ctx, id, b, rev)
	if err != nil {
		if isRevisionConflict(err) {
			return 0, errConflict
		}
		return 0, fmt.Errorf("update job %s: %w", id, err)
	}
	return nrev, nil
}

// mutate applies fn to the latest stored job and writes it by CAS, retrying
// on conflict. fn returns false to leave the job as it is.
func (s *jobStore) mutate(ctx context.Context, id string, fn func(*api.Job) bool) (*api.Job, uint64, error) {
	return s.mutateFrom(ctx, id, nil, 0, fn)
}

// mutateFrom is mutate starting from a copy of the job believed current at
// revision rev (nil: read it), which saves a read when it still is.
func (s *jobStore) mutateFrom(ctx context.Context, id string, j *api.Job, rev uint64, fn func(*api.Job) bool) (*api.Job, uint64, error) {
	for range 20 {
		if j == nil {
			var err error
			if j, rev, err = s.get(ctx, id); err != nil {
				return nil, 0, err
			}
		}
		if !fn(j) {
			return j, rev, nil
		}
		nrev, err := s.update(ctx, j, rev)
		if errors.Is(err, errConflict) {
			j = nil
			continue
		}
		return j, nrev, err
	}
	return nil, 0, fmt.Errorf("job %s: %w (gave up after 20 tries)", id, errConflict)
}

// list returns every job in the bucket, newest first.
func (s *jobStore) list(ctx context.Context) ([]api.Job, error) {
	w, err := s.kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("list jobs: %w", err)
	}
	defer func() { _ = w.Stop() }()
	var out []api.Job
	for e := range w.Updates() {
		if e == nil {
			break
		}
		var j api.Job
		if json.Unmarshal(e.Value(), &j) == nil {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].CreatedAt.After(out[b].CreatedAt) })
	return out, nil
}

// isRevisionConflict reports a KV write refused because the key is no
// longer at the expected revision (or, for a create, already exists):
// another writer won. A single-replica bucket answers with the stream's
// wrong-last-sequence code, a replicated one with another code that
// ErrKeyRevisionMismatch matches.
func isRevisionConflict(err error) bool {
	if err == nil {
		return false
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return true
	}
	return errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch)
}
