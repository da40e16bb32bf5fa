package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelayGrowsAndIsCapped(t *testing.T) {
	cases := []struct {
		name string
		p    Policy
		want []time.Duration // waits after tries 1, 2, …
	}{
		{"exponential capped", Policy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: 500 * time.Millisecond},
			[]time.Duration{100, 200, 400, 500, 500}},
		{"linear capped", Policy{Initial: 100 * time.Millisecond, Step: 100 * time.Millisecond, Max: 250 * time.Millisecond},
			[]time.Duration{100, 200, 250, 250}},
		{"linear", Policy{Initial: 100 * time.Millisecond, Step: 100 * time.Millisecond},
			[]time.Duration{100, 200, 300}},
		{"constant", Policy{Initial: 250 * time.Millisecond},
			[]time.Duration{250, 250, 250}},
		{"initial above cap", Policy{Initial: time.Second, Multiplier: 2, Max: 300 * time.Millisecond},
			[]time.Duration{300, 300}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for i, w := range c.want {
				if got := c.p.Delay(i + 1); got != w*time.Millisecond {
					t.Errorf("Delay(%d) = %s, want %s", i+1, got, w*time.Millisecond)
				}
			}
		})
	}
	// Far out, growth does not overflow past the cap.
	p := Policy{Initial: time.Second, Multiplier: 2, Max: time.Minute}
	if got := p.Delay(10_000); got != time.Minute {
		t.Errorf("Delay(10000) = %s, want the cap", got)
	}
}

func TestWaitJitterStaysInRange(t *testing.T) {
	p := Policy{Initial: time.Second, Multiplier: 2, Max: 4 * time.Second, Jitter: 0.5}
	for n := 1; n <= 5; n++ {
		d := p.Delay(n)
		seen := map[bool]bool{}
		for range 1000 {
			w := p.Wait(n)
			if w < d/2 || w > d {
				t.Fatalf("Wait(%d) = %s, outside [%s, %s]", n, w, d/2, d)
			}
			seen[w == d] = true
		}
		if !seen[false] {
			t.Errorf("Wait(%d) never jittered", n)
		}
	}
}

// Do stops trying as soon as its context ends, also in the middle of a
// wait far longer than the test.
func TestDoStopsWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	boom := errors.New("boom")
	tries := 0
	done := make(chan error, 1)
	go func() {
		done <- Do(ctx, Policy{Initial: time.Hour}, func(int) error {
			tries++
			return boom
		})
	}()
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, boom) && !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v", err)
		}
		if tries > 1 {
			t.Fatalf("%d tries after the context ended", tries)
		}
	case <-time.After(time.Minute): // a hang guard, not a speed bound
		t.Fatal("Do waited out its backoff after the context ended")
	}

	// A context that has already ended runs nothing.
	ran := false
	if err := Do(ctx, Policy{}, func(int) error { ran = true; return nil }); !errors.Is(err, context.Canceled) || ran {
		t.Fatalf("Do on an ended context = %v, ran %v", err, ran)
	}
}

func TestDoBounds(t *testing.T) {
	boom := errors.New("boom")
	ctx := context.Background()

	t.Run("tries", func(t *testing.T) {
		n := 0
		err := Do(ctx, Policy{Tries: 3}, func(try int) error {
			n++
			if try != n {
				t.Errorf("try %d, want %d", try, n)
			}
			return boom
		})
		if !errors.Is(err, boom) || n != 3 {
			t.Fatalf("Do = %v after %d tries, want boom after 3", err, n)
		}
	})
	t.Run("stop", func(t *testing.T) {
		n := 0
		err := Do(ctx, Policy{}, func(int) error { n++; return Stop(boom) })
		if err != boom || n != 1 { //nolint:errorlint // Stop must unwrap to the error itself
			t.Fatalf("Do = %v after %d tries, want boom after 1", err, n)
		}
	})
	t.Run("success", func(t *testing.T) {
		n := 0
		err := Do(ctx, Policy{}, func(try int) error {
			n++
			if try < 4 {
				return boom
			}
			return nil
		})
		if err != nil || n != 4 {
			t.Fatalf("Do = %v after %d tries", err, n)
		}
	})
	t.Run("max elapsed", func(t *testing.T) {
		// The first wait would already pass MaxElapsed: give up after one try.
		n := 0
		err := Do(ctx, Policy{Initial: time.Hour, MaxElapsed: time.Minute}, func(int) error { n++; return boom })
		if !errors.Is(err, boom) || n != 1 {
			t.Fatalf("Do = %v after %d tries", err, n)
		}
	})
}

func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on an ended context = %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
}
