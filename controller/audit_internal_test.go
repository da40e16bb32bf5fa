package controller

import (
	"testing"
	"time"
)

// The failed-authentication limiter: 10 a minute per source, 100 in all,
// the count of dropped ones handed to the next recorded one, and a new
// minute starting afresh.
func TestAuthFailLimiter(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)
	type step struct {
		source      string
		n           int
		at          time.Duration
		wantOK      int   // of the n, how many are recorded
		wantDropped int64 // what the first recorded one reports
	}
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"one source over its limit", []step{
			{"10.0.0.1", 12, 0, 10, 0},
			{"10.0.0.1", 1, 30 * time.Second, 0, 0},
			{"10.0.0.1", 1, time.Minute, 1, 3},
		}},
		{"many sources over the total", []step{
			{"a", 10, 0, 10, 0}, {"b", 10, 0, 10, 0}, {"c", 10, 0, 10, 0}, {"d", 10, 0, 10, 0}, {"e", 10, 0, 10, 0},
			{"f", 10, 0, 10, 0}, {"g", 10, 0, 10, 0}, {"h", 10, 0, 10, 0}, {"i", 10, 0, 10, 0}, {"j", 10, 0, 10, 0},
			{"k", 5, time.Second, 0, 0},
			{"k", 1, time.Minute, 1, 5},
		}},
		{"a long scan over the day's bound", func() []step {
			// 100 a minute from ten sources for ten minutes fills the day.
			var steps []step
			for m := range 10 {
				for _, src := range []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"} {
					steps = append(steps, step{src, 10, time.Duration(m) * time.Minute, 10, 0})
				}
			}
			return append(steps, step{"k", 3, 11 * time.Minute, 0, 0}, step{"k", 1, 24 * time.Hour, 1, 3})
		}()},
	} {
		t.Run(c.name, func(t *testing.T) {
			var l authFailLimiter
			for i, s := range c.steps {
				ok, first := 0, int64(-1)
				for range s.n {
					allowed, dropped := l.allow(s.source, t0.Add(s.at))
					if allowed {
						if first < 0 {
							first = dropped
						}
						ok++
					}
				}
				if ok != s.wantOK || (ok > 0 && first != s.wantDropped) {
					t.Fatalf("step %d (%s ×%d at +%s): %d recorded reporting %d dropped, want %d reporting %d",
						i, s.source, s.n, s.at, ok, first, s.wantOK, s.wantDropped)
				}
			}
		})
	}
}
