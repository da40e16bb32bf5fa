package api

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestScheduleNextRunTimeZones: the cron fields are read in the schedule's
// time zone, across daylight saving changes; seconds and descriptors work.
func TestScheduleNextRunTimeZones(t *testing.T) {
	for _, tc := range []struct {
		name, cron, tz, after, want string
	}{
		{"daily in UTC by default", "0 3 * * *", "", "2026-01-10T00:00:00Z", "2026-01-10T03:00:00Z"},
		{"Berlin in winter (UTC+1)", "0 3 * * *", "Europe/Berlin", "2026-01-10T00:00:00Z", "2026-01-10T02:00:00Z"},
		{"Berlin after the spring change (UTC+2)", "0 3 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", "2026-03-29T01:00:00Z"},
		{"Berlin: 02:30 does not exist on the spring change day, which is skipped", "30 2 * * *", "Europe/Berlin", "2026-03-28T12:00:00Z", "2026-03-30T00:30:00Z"},
		{"New York weekdays skip the weekend", "30 9 * * 1-5", "America/New_York", "2026-11-20T15:00:00Z", "2026-11-23T14:30:00Z"},
		{"hourly in a half-hour zone", "@hourly", "Asia/Kolkata", "2026-01-01T00:10:00Z", "2026-01-01T00:30:00Z"},
		{"daily descriptor in Tokyo", "@daily", "Asia/Tokyo", "2026-06-01T16:00:00Z", "2026-06-02T15:00:00Z"}, // midnight in Tokyo (UTC+9),
		{"every 90 seconds", "@every 90s", "Europe/Berlin", "2026-01-01T00:00:00Z", "2026-01-01T00:01:30Z"},
		{"six fields: seconds first", "*/15 * * * * *", "", "2026-01-01T00:00:01Z", "2026-01-01T00:00:15Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := ScheduleSpec{Cron: tc.cron, TimeZone: tc.tz}
			got, err := s.NextRun(mustTime(t, tc.after))
			if err != nil {
				t.Fatal(err)
			}
			if want := mustTime(t, tc.want); !got.Equal(want) {
				t.Fatalf("next run after %s of %q in %q: %s, want %s", tc.after, tc.cron, tc.tz, got, want)
			}
		})
	}
}

// TestScheduleSpecErrorsNameTheField: each bad field is refused with its
// name first.
func TestScheduleSpecErrorsNameTheField(t *testing.T) {
	ok := `"job":{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo"}]}`
	for _, tc := range []struct{ body, field string }{
		{`{"name":"a","cron":"* * *",` + ok + `}`, "cron:"},
		{`{"name":"a","cron":"@sometimes",` + ok + `}`, "cron:"},
		{`{"name":"a","cron":"0 30 * * *",` + ok + `}`, "cron:"},
		{`{"name":"a","cron":"@daily","time_zone":"Local",` + ok + `}`, "time_zone:"},
		{`{"name":"a","cron":"@daily","time_zone":"Europe/Nowhere",` + ok + `}`, "time_zone:"},
		{`{"name":"-a","cron":"@daily",` + ok + `}`, "name:"},
		{`{"name":"a","cron":"@daily","catch_up":"twice",` + ok + `}`, "catch_up:"},
		{`{"name":"a","cron":"@daily","overlap":"maybe",` + ok + `}`, "overlap:"},
		{`{"name":"a","cron":"@daily"}`, "job:"},
		{`{"name":"a","cron":"@daily","job":{"target":{"scope":"all"},"tasks":[]}}`, "job."},
		{`{"name":"a","cron":"@daily","job":{"target":{"scope":"nowhere"},"tasks":[{"backend":"ping","action":"echo"}]}}`, "job.target"},
		{`{"name":"a","cron":"@daily","paused":"yes",` + ok + `}`, "paused"},
	} {
		_, err := ParseScheduleSpec([]byte(tc.body))
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: %v, want an error naming %s", tc.body, err, tc.field)
		}
	}
	s, err := ParseScheduleSpec([]byte(`{"name":"nightly","cron":"0 3 * * *",` + ok + `}`))
	if err != nil {
		t.Fatal(err)
	}
	s.Normalize()
	if s.TimeZone != "UTC" || s.CatchUp != CatchUpSkip || s.Overlap != OverlapSkip {
		t.Fatalf("defaults: %+v", s)
	}
}
