package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// rateWindow is a limit's entry in the rate limits bucket: a sliding log
// of the task starts granted within the last window, shared by every
// controller. A start is granted only while fewer than Starts lie in the
// window ending now, so any window of Per holds at most Starts, wherever
// it begins (a fixed window would let twice as many through around its
// edge).
type rateWindow struct {
	// Starts and PerMS are the limit of the controller that wrote last;
	// another controller configured otherwise logs the difference.
	Starts int   `json:"starts"`
	PerMS  int64 `json:"per_ms"`
	// Log holds the grants: when (unix ms, the granting controller's
	// clock) and how many starts.
	Log []rateGrant `json:"log"`
}

type rateGrant struct {
	At int64 `json:"at"`
	N  int   `json:"n"`
}

// mergeFraction: a grant within Per/mergeFraction of the log's last entry
// joins it (taking the later time), which keeps the log at about
// mergeFraction entries whatever Starts is. Joined starts count as of the
// later time, so they free up slightly later: never more than the limit.
const mergeFraction = 100

// admit grants up to want starts at now under l, records them, and returns
// how many it granted and, when fewer than wanted, the time the next start
// frees up.
func (w *rateWindow) admit(l RateLimit, now time.Time, want int) (granted int, next time.Time) {
	per := l.Per.D().Milliseconds()
	t := now.UnixMilli()
	used := 0
	kept := w.Log[:0]
	for _, g := range w.Log {
		if g.At > t-per && g.N > 0 {
			kept = append(kept, g)
			used += g.N
		}
	}
	w.Log = kept
	w.Starts, w.PerMS = l.Starts, per
	granted = min(want, max(l.Starts-used, 0))
	if granted > 0 {
		if n := len(w.Log); n > 0 && w.Log[n-1].At > t-per/mergeFraction {
			w.Log[n-1].At = max(w.Log[n-1].At, t)
			w.Log[n-1].N += granted
		} else {
			w.Log = append(w.Log, rateGrant{At: t, N: granted})
		}
	}
	if granted == want {
		return granted, time.Time{}
	}
	// The oldest grant leaves the window first and frees at least one.
	oldest := w.Log[0].At
	for _, g := range w.Log[1:] {
		oldest = min(oldest, g.At)
	}
	return granted, time.UnixMilli(oldest + per)
}

// rateCASPolicy paces the tries of a grant that lost a race with another
// controller's (or met a bucket failing over).
var rateCASPolicy = retry.Policy{Initial: 5 * time.Millisecond, Multiplier: 2, Max: 250 * time.Millisecond, Jitter: 0.5, Tries: 25}

// errRateConflict: the window changed between read and write.
var errRateConflict = errors.New("rate window changed concurrently")

// rateWindows are the rate limits' windows shared by the controllers of a
// cluster in the rate_limits bucket: one per limit, taken from by
// compare-and-swap.
type rateWindows struct {
	kv  jetstream.KeyValue
	log *slog.Logger
	// mismatch holds the limits whose window another controller wrote
	// under other numbers (logged once each).
	mismatch sync.Map
}

// takeStarts takes up to want starts of l's budget in one compare-and-swap
// of its window, and returns how many it got and, when fewer, when the
// next one frees up.
func (rw *rateWindows) takeStarts(ctx context.Context, l *rateLimit, want int) (granted int, next time.Time, err error) {
	err = retry.Do(ctx, rateCASPolicy, func(int) error {
		var w rateWindow
		var rev uint64
		e, err := rw.kv.Get(ctx, l.key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read rate window %s: %w", l.key, err)
		default:
			rev = e.Revision()
			if json.Unmarshal(e.Value(), &w) != nil {
				// Unreadable: start a new log rather than stall every job.
				w = rateWindow{}
			}
			rw.noteRateMismatch(l, w)
		}
		granted, next = w.admit(l.RateLimit, time.Now(), want)
		if granted == 0 {
			return nil // nothing to record
		}
		data, err := json.Marshal(w)
		if err != nil {
			return retry.Stop(err)
		}
		if rev == 0 {
			_, err = rw.kv.Create(ctx, l.key, data)
		} else {
			_, err = rw.kv.Update(ctx, l.key, data, rev)
		}
		if isRevisionConflict(err) {
			granted = 0
			return errRateConflict
		}
		if err != nil {
			granted = 0
			return fmt.Errorf("write rate window %s: %w", l.key, err)
		}
		return nil
	})
	if err != nil {
		return 0, time.Time{}, err
	}
	return granted, next, nil
}

// noteRateMismatch logs, once per limit, that another controller wrote the
// window under a different limit: the controllers of a cluster should share
// one list, or each enforces its own against the same count.
func (rw *rateWindows) noteRateMismatch(l *rateLimit, w rateWindow) {
	if w.Starts == 0 || (w.Starts == l.Starts && w.PerMS == l.Per.D().Milliseconds()) {
		return
	}
	if _, seen := rw.mismatch.LoadOrStore(l.key, true); seen {
		return
	}
	rw.log.Warn("another controller has a different rate limit; give every controller of the cluster the same rate_limits",
		"action", l.Action, "here", l.String(), "there_starts", w.Starts, "there_per", time.Duration(w.PerMS)*time.Millisecond)
}
