package controller

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// statsWindow is one window of GET /jobs/stats: how far back it looks and
// how wide its buckets are. A window is a whole number of buckets.
type statsWindow struct {
	name   string
	span   time.Duration
	bucket time.Duration
}

// statsWindows are the windows the overview charts: the last hour by the
// minute, the last day by the quarter hour (96 bars, which a chart still
// draws legibly).
var statsWindows = []statsWindow{
	{name: "1h", span: time.Hour, bucket: time.Minute},
	{name: "24h", span: 24 * time.Hour, bucket: 15 * time.Minute},
}

// recentFailures is how many failed jobs the overview lists.
const recentFailures = 10

// statsBucket counts the jobs submitted in one bucket and the jobs that
// ended in it, by outcome.
type statsBucket struct {
	Start          time.Time `json:"start"`
	Submitted      int       `json:"submitted"`
	Completed      int       `json:"completed"`
	Failed         int       `json:"failed"`
	PartialFailure int       `json:"partial_failure"`
	Cancelled      int       `json:"cancelled"`
}

// ended counts one job that ended with status st; false for a status that
// is not an end.
func (b *statsBucket) ended(st api.JobStatus) bool {
	switch st {
	case api.JobCompleted:
		b.Completed++
	case api.JobFailed:
		b.Failed++
	case api.JobPartialFailure:
		b.PartialFailure++
	case api.JobCancelled:
		b.Cancelled++
	default:
		return false
	}
	return true
}

func (b *statsBucket) add(o statsBucket) {
	b.Submitted += o.Submitted
	b.Completed += o.Completed
	b.Failed += o.Failed
	b.PartialFailure += o.PartialFailure
	b.Cancelled += o.Cancelled
}

// failedJob is one of the overview's recent failures.
type failedJob struct {
	ID          string        `json:"id"`
	Status      api.JobStatus `json:"status"`
	SubmittedBy string        `json:"submitted_by,omitempty"`
	Finished    time.Time     `json:"finished_at"`
	// Target, Tasks and Error come from the stored job (one read by key
	// per listed failure); empty when it could not be read.
	Target string   `json:"target,omitempty"`
	Tasks  []string `json:"tasks,omitempty"`
	Error  string   `json:"error,omitempty"`
}

// jobStats is the answer of GET /jobs/stats.
type jobStats struct {
	Window        string `json:"window"`
	BucketSeconds int    `json:"bucket_seconds"`
	// From and To bound the buckets: From is the first one's start, To the
	// last one's end (the current bucket, still filling, is the last).
	From    time.Time     `json:"from"`
	To      time.Time     `json:"to"`
	Buckets []statsBucket `json:"buckets"`
	// Totals adds the buckets up; Start is zero.
	Totals statsBucket `json:"totals"`
	// Active counts the jobs not yet ended (pending, waiting, running) now.
	Active         int         `json:"active"`
	RecentFailures []failedJob `json:"recent_failures"`
}

// jobPoint is what the bucketing reads of one job.
type jobPoint struct {
	id          string
	status      api.JobStatus
	submittedBy string
	created     time.Time
	finished    time.Time
}

// bucketJobs counts jobs into the buckets of window w that ends with the
// bucket holding now: a job counts as submitted in the bucket of its
// creation and, once ended, under its outcome in the bucket of its end.
// Buckets are aligned to whole multiples of their width (UTC), so two
// reads a few seconds apart draw the same bars. It also returns the jobs
// that failed (wholly or in part) inside the window, newest end first, at
// most maxFailures of them.
func bucketJobs(jobs []jobPoint, now time.Time, w statsWindow, maxFailures int) jobStats {
	n := int(w.span / w.bucket)
	to := now.UTC().Truncate(w.bucket).Add(w.bucket)
	from := to.Add(-time.Duration(n) * w.bucket)
	s := jobStats{Window: w.name, BucketSeconds: int(w.bucket / time.Second), From: from, To: to,
		Buckets: make([]statsBucket, n), RecentFailures: []failedJob{}}
	for i := range s.Buckets {
		s.Buckets[i].Start = from.Add(time.Duration(i) * w.bucket)
	}
	at := func(t time.Time) int {
		if t.IsZero() || t.Before(from) || !t.Before(to) {
			return -1
		}
		return int(t.Sub(from) / w.bucket)
	}
	var failures []failedJob
	for _, j := range jobs {
		if i := at(j.created); i >= 0 {
			s.Buckets[i].Submitted++
		}
		if !j.status.Terminal() {
			s.Active++
			continue
		}
		i := at(j.finished)
		if i < 0 || !s.Buckets[i].ended(j.status) {
			continue
		}
		if j.status == api.JobFailed || j.status == api.JobPartialFailure {
			failures = append(failures, failedJob{ID: j.id, Status: j.status, SubmittedBy: j.submittedBy, Finished: j.finished})
		}
	}
	for _, b := range s.Buckets {
		s.Totals.add(b)
	}
	slices.SortFunc(failures, func(a, b failedJob) int {
		if c := b.Finished.Compare(a.Finished); c != 0 {
			return c
		}
		return strings.Compare(b.ID, a.ID)
	})
	s.RecentFailures = append(s.RecentFailures, failures[:min(len(failures), maxFailures)]...)
	return s
}

// statsOver buckets the jobs the index holds over window w; it copies what it
// needs under the read lock and counts outside it.
func (x *jobIndex) statsOver(now time.Time, w statsWindow, maxFailures int) jobStats {
	cut := now.Add(-w.span - w.bucket)
	x.mu.RLock()
	pts := make([]jobPoint, 0, len(x.entries))
	for _, e := range x.entries {
		// A job that ended before the window and was made before it adds
		// nothing but to the active count, which only unended jobs feed.
		if e.status.Terminal() && e.finished.Before(cut) && e.created.Before(cut) {
			continue
		}
		pts = append(pts, jobPoint{id: e.id, status: e.status, submittedBy: e.submittedBy, created: e.created, finished: e.finished})
	}
	x.mu.RUnlock()
	return bucketJobs(pts, now, w, maxFailures)
}

// handleJobStats serves GET /jobs/stats?window=1h|24h: jobs submitted and
// ended per bucket, by outcome, from the job index in memory; the listed
// failures are then read by key for their target and error.
func (c *Controller) handleJobStats(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("window")
	if name == "" {
		name = statsWindows[0].name
	}
	i := slices.IndexFunc(statsWindows, func(sw statsWindow) bool { return sw.name == name })
	if i < 0 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("window %q must be 1h or 24h", name))
		return
	}
	if err := c.jobIdx.waitReady(r.Context()); err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	s := c.jobIdx.statsOver(time.Now(), statsWindows[i], recentFailures)
	for k := range s.RecentFailures {
		f := &s.RecentFailures[k]
		h, err := c.views.jobHead(r.Context(), f.ID)
		switch {
		case err == nil:
			f.Target, f.Tasks, f.Error = h.Target.String(), h.Tasks, h.Error
		case errors.Is(err, jetstream.ErrKeyNotFound):
			// Deleted since the index saw it: listed without details.
		default:
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, s)
}
