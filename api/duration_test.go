package api

import (
	"encoding/json"
	"strconv"
	"testing"
	"time"
)

func TestDurationJSON(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 999, 1500 * time.Nanosecond, 12345 * time.Nanosecond, 3 * time.Millisecond,
		1500 * time.Millisecond, -2 * time.Second, 90 * time.Minute, 1<<63 - 1, -1 << 63} {
		b, err := json.Marshal(Duration(d))
		if err != nil {
			t.Fatal(err)
		}
		if want := strconv.Quote(d.String()); string(b) != want {
			t.Errorf("%v: %s, want %s", d, b, want)
		}
		var back Duration
		if err := json.Unmarshal(b, &back); err != nil || time.Duration(back) != d {
			t.Errorf("%v: read back %v (%v)", d, time.Duration(back), err)
		}
	}
}
