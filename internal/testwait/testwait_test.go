package testwait

import (
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	n := 0
	Until(t, time.Minute, time.Millisecond, "three polls", func() bool {
		n++
		return n == 3
	})
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
}
