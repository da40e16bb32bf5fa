// Package retry is GRID's one way to retry: a backoff policy (growth, cap,
// jitter, bounds) and a loop that stops as soon as its context ends.
//
// Every loop in the tree that tries something again (publishing a result or
// a command, pulling requests, waiting for JetStream, waiting for a job)
// goes through Do or Sleep, so none of them outlives the context that owns
// it.
package retry

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"
)

// Policy says how long to wait between tries and when to give up. The zero
// Policy retries at once, forever, until the context ends.
type Policy struct {
	// Initial is the wait after the first failed try.
	Initial time.Duration
	// Multiplier grows the wait after each further failure; values below 1
	// mean 1 (a constant wait). Ignored when Step is set.
	Multiplier float64
	// Step, when set, grows the wait linearly instead: Initial, Initial+Step, …
	Step time.Duration
	// Max caps one wait (before jitter); 0 is no cap.
	Max time.Duration
	// Jitter in [0, 1] draws each wait uniformly from [w·(1−Jitter), w], so
	// peers that failed together do not retry together.
	Jitter float64
	// Tries bounds the tries (the first included); 0 is no bound.
	Tries int
	// MaxElapsed gives up once the next wait would end later than this
	// after the first try; 0 is no bound.
	MaxElapsed time.Duration
}

// Delay is the wait after failed try number n (1 for the first), before
// jitter: never more than Max.
func (p Policy) Delay(n int) time.Duration {
	if n < 1 {
		n = 1
	}
	d := p.Initial
	for i := 1; i < n && (p.Max <= 0 || d < p.Max); i++ {
		switch {
		case p.Step > 0:
			d += p.Step
		case p.Multiplier > 1:
			d = time.Duration(float64(d) * p.Multiplier)
		default:
			return p.capped(d)
		}
	}
	return p.capped(d)
}

func (p Policy) capped(d time.Duration) time.Duration {
	if p.Max > 0 && d > p.Max {
		return p.Max
	}
	return max(d, 0)
}

// Wait is Delay(n) with the policy's jitter applied.
func (p Policy) Wait(n int) time.Duration {
	d := p.Delay(n)
	j := min(max(p.Jitter, 0), 1)
	if j == 0 || d <= 0 {
		return d
	}
	low := time.Duration(float64(d) * (1 - j))
	return low + rand.N(d-low+1) //nolint:gosec // spreading retries, not a secret
}

// Sleep waits d, or less when ctx ends first; it returns ctx's error then.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// permanent marks an error that retrying cannot fix.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Stop wraps an error so that Do returns it (unwrapped) without trying again.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Do calls op (with the try number, from 1) until it returns nil, returns an
// error wrapped by Stop, the policy's bounds are reached, or ctx ends.
// It never waits past ctx's end. When it gives up it returns op's last
// error; ctx.Err() when op never ran. Callers that need to know whether
// ctx ended look at ctx.Err().
func Do(ctx context.Context, p Policy, op func(try int) error) error {
	start := time.Now()
	var last error
	for try := 1; ; try++ {
		if err := ctx.Err(); err != nil {
			if last == nil {
				return err
			}
			return last
		}
		last = op(try)
		if last == nil {
			return nil
		}
		var perm permanent
		if errors.As(last, &perm) {
			return perm.err
		}
		if p.Tries > 0 && try >= p.Tries {
			return last
		}
		w := p.Wait(try)
		if p.MaxElapsed > 0 && time.Since(start)+w > p.MaxElapsed {
			return last
		}
		if Sleep(ctx, w) != nil {
			return last
		}
	}
}
