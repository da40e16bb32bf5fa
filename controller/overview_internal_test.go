package controller

import (
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// TestBucketJobs checks which bucket a job's submission and end fall in,
// at the edges of the window and of a bucket, for both windows.
func TestBucketJobs(t *testing.T) {
	now := time.Date(2026, 11, 24, 10, 30, 20, 0, time.UTC)
	hour, day := statsWindows[0], statsWindows[1]
	at := func(s string) time.Time {
		tm, err := time.Parse(time.TimeOnly, s)
		if err != nil {
			t.Fatal(err)
		}
		return time.Date(2026, 11, 24, tm.Hour(), tm.Minute(), tm.Second(), 0, time.UTC)
	}
	type want struct {
		bucket int
		b      statsBucket
	}
	for _, tc := range []struct {
		name   string
		w      statsWindow
		job    jobPoint
		want   []want // buckets with anything in them
		active int
		failed bool // listed as a recent failure
	}{
		{name: "completed within one minute", w: hour,
			job:  jobPoint{status: api.JobCompleted, created: at("10:30:01"), finished: at("10:30:05")},
			want: []want{{59, statsBucket{Submitted: 1, Completed: 1}}}},
		{name: "submitted and ended in different minutes", w: hour,
			job:  jobPoint{status: api.JobFailed, created: at("10:00:00"), finished: at("10:29:59")},
			want: []want{{29, statsBucket{Submitted: 1}}, {58, statsBucket{Failed: 1}}}, failed: true},
		{name: "first bucket's first instant is in", w: hour,
			job:  jobPoint{status: api.JobCancelled, created: at("09:31:00"), finished: at("09:31:00")},
			want: []want{{0, statsBucket{Submitted: 1, Cancelled: 1}}}},
		{name: "just before the window is out", w: hour,
			job:  jobPoint{status: api.JobCompleted, created: at("09:20:00"), finished: at("09:30:59")},
			want: nil},
		{name: "made before the window, ended in it", w: hour,
			job:  jobPoint{status: api.JobPartialFailure, created: at("09:00:00"), finished: at("09:45:30")},
			want: []want{{14, statsBucket{PartialFailure: 1}}}, failed: true},
		{name: "running counts as active, submitted only", w: hour,
			job:  jobPoint{status: api.JobRunning, created: at("10:10:10")},
			want: []want{{39, statsBucket{Submitted: 1}}}, active: 1},
		{name: "pending made before the window is active only", w: hour,
			job: jobPoint{status: api.JobPending, created: at("08:00:00")}, active: 1},
		{name: "day: quarter hours", w: day,
			job:  jobPoint{status: api.JobFailed, created: at("10:14:59"), finished: at("10:15:00")},
			want: []want{{93, statsBucket{Submitted: 1}}, {94, statsBucket{Failed: 1}}}, failed: true},
		{name: "day: first bucket", w: day,
			job:  jobPoint{status: api.JobCompleted, created: at("00:00:00").Add(-13*time.Hour - 15*time.Minute), finished: at("00:00:00").Add(-13*time.Hour - time.Minute)},
			want: []want{{0, statsBucket{Submitted: 1, Completed: 1}}}},
		{name: "day: an hour ago falls in the day", w: day,
			job:  jobPoint{status: api.JobCompleted, created: at("09:29:00"), finished: at("09:31:00")},
			want: []want{{90, statsBucket{Submitted: 1}}, {91, statsBucket{Completed: 1}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.job.id = "job-1"
			s := bucketJobs([]jobPoint{tc.job}, now, tc.w, 10)
			if n := int(tc.w.span / tc.w.bucket); len(s.Buckets) != n {
				t.Fatalf("%d buckets, want %d", len(s.Buckets), n)
			}
			if !s.To.Equal(now.Truncate(tc.w.bucket).Add(tc.w.bucket)) || !s.From.Equal(s.To.Add(-tc.w.span)) {
				t.Errorf("window %s–%s", s.From, s.To)
			}
			wantAt := map[int]statsBucket{}
			var total statsBucket
			for _, w := range tc.want {
				wantAt[w.bucket] = w.b
				total.add(w.b)
			}
			for i, b := range s.Buckets {
				if want := s.From.Add(time.Duration(i) * tc.w.bucket); !b.Start.Equal(want) {
					t.Fatalf("bucket %d starts %s, want %s", i, b.Start, want)
				}
				b.Start = time.Time{}
				if b != wantAt[i] {
					t.Errorf("bucket %d (%s) = %+v, want %+v", i, s.From.Add(time.Duration(i)*tc.w.bucket).Format(time.TimeOnly), b, wantAt[i])
				}
			}
			if s.Totals != total {
				t.Errorf("totals %+v, want %+v", s.Totals, total)
			}
			if s.Active != tc.active {
				t.Errorf("active %d, want %d", s.Active, tc.active)
			}
			if got := len(s.RecentFailures) == 1 && s.RecentFailures[0].ID == "job-1"; got != tc.failed {
				t.Errorf("recent failures %+v, want listed: %v", s.RecentFailures, tc.failed)
			}
		})
	}
}

// TestJobStatsFromIndex feeds jobs through the index as the watch does
// and checks the stats read back: counts by outcome, failures newest
// first and capped, and a job that moved on is counted once, as it is now.
func TestJobStatsFromIndex(t *testing.T) {
	x := newJobIndex()
	now := time.Now().UTC()
	ended := func(id string, st api.JobStatus, ago time.Duration) {
		fin := now.Add(-ago)
		putJob(t, x, &api.Job{ID: id, Status: api.JobRunning, CreatedAt: fin.Add(-time.Second)}, 1)
		putJob(t, x, &api.Job{ID: id, Status: st, CreatedAt: fin.Add(-time.Second), FinishedAt: &fin}, 2)
	}
	for i := range 12 {
		ended("fail-"+string(rune('a'+i)), api.JobFailed, time.Duration(i+1)*time.Minute)
	}
	ended("ok-1", api.JobCompleted, 2*time.Minute)
	ended("part-1", api.JobPartialFailure, 30*time.Second)
	ended("old-1", api.JobFailed, 3*time.Hour)
	putJob(t, x, &api.Job{ID: "run-1", Status: api.JobRunning, CreatedAt: now}, 1)

	s := x.statsOver(now, statsWindows[0], recentFailures)
	if s.Totals.Failed != 12 || s.Totals.Completed != 1 || s.Totals.PartialFailure != 1 || s.Totals.Submitted != 15 || s.Active != 1 {
		t.Errorf("last hour: totals %+v, active %d", s.Totals, s.Active)
	}
	if len(s.RecentFailures) != recentFailures || s.RecentFailures[0].ID != "part-1" || s.RecentFailures[1].ID != "fail-a" {
		t.Errorf("recent failures: %+v", s.RecentFailures)
	}
	d := x.statsOver(now, statsWindows[1], recentFailures)
	if d.Totals.Failed != 13 || d.Totals.Submitted != 16 {
		t.Errorf("last day: totals %+v", d.Totals)
	}
}
