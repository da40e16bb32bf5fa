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

// scheduleStore reads and writes schedules in the schedules bucket. Every
// change is a compare-and-swap on the revision read, so that two
// controllers (or an API call and a firing) never both win: the firing
// that advances a schedule past a tick is the one that fires it.
type scheduleStore struct {
	kv jetstream.KeyValue
}

func (s *scheduleStore) get(ctx context.Context, id string) (*api.Schedule, uint64, error) {
	return getJSON[api.Schedule](ctx, s.kv, "schedule", id)
}

// create stores a new schedule; errConflict when the id is taken.
func (s *scheduleStore) create(ctx context.Context, sc *api.Schedule) (uint64, error) {
	b, err := json.Marshal(sc)
	if err != nil {
		return 0, err
	}
	rev, err := s.kv.Create(ctx, sc.ID, b)
	if errors.Is(err, jetstream.ErrKeyExists) {
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("store schedule %s: %w", sc.ID, err)
	}
	return rev, nil
}

// update writes sc if the stored revision is still rev (errConflict if not).
func (s *scheduleStore) update(ctx context.Context, sc *api.Schedule, rev uint64) (uint64, error) {
	b, err := json.Marshal(sc)
	if err != nil {
		return 0, err
	}
	nrev, err := s.kv.Update(ctx, sc.ID, b, rev)
	if isRevisionConflict(err) {
		return 0, errConflict
	}
	if err != nil {
		return 0, fmt.Errorf("update schedule %s: %w", sc.ID, err)
	}
	return nrev, nil
}

// mutate applies fn to the latest stored schedule and writes it by CAS,
// retrying on conflict. fn returns false to leave it as it is, or an error
// to stop.
func (s *scheduleStore) mutate(ctx context.Context, id string, fn func(*api.Schedule) (bool, error)) (*api.Schedule, error) {
	for range 20 {
		sc, rev, err := s.get(ctx, id)
		if err != nil {
			return nil, err
		}
		change, err := fn(sc)
		if err != nil || !change {
			return sc, err
		}
		_, err = s.update(ctx, sc, rev)
		if errors.Is(err, errConflict) {
			continue
		}
		return sc, err
	}
	return nil, fmt.Errorf("schedule %s: %w (gave up after 20 tries)", id, errConflict)
}

// delete removes a schedule.
func (s *scheduleStore) delete(ctx context.Context, id string) error {
	if err := s.kv.Delete(ctx, id); err != nil {
		return fmt.Errorf("delete schedule %s: %w", id, err)
	}
	return nil
}

// list returns every schedule, by id.
func (s *scheduleStore) list(ctx context.Context) ([]api.Schedule, error) {
	keys, err := s.kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var out []api.Schedule
	for k := range keys.Keys() {
		sc, _, err := s.get(ctx, k)
		if errors.Is(err, api.ErrNotFound) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, *sc)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	if out == nil {
		out = []api.Schedule{}
	}
	return out, nil
}
