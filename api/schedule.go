package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// BucketSchedules holds the schedules by id, with the state that makes
// each tick fire once across a cluster (next_run, the claimed tick).
const BucketSchedules = "schedules"

// CatchUp says what a schedule does with ticks no controller fired in time
// (every controller was down, or the schedule was more than the
// controller's schedule_grace late).
type CatchUp string

const (
	// CatchUpSkip fires nothing for missed ticks; the next run is the
	// first tick after now.
	CatchUpSkip CatchUp = "skip"
	// CatchUpRunOnce fires one job for all the missed ticks (its id is the
	// first missed tick's), then goes on from the first tick after now.
	CatchUpRunOnce CatchUp = "run_once"
)

// Overlap says whether a tick fires while the job of the schedule's
// previous tick has not finished.
type Overlap string

const (
	// OverlapSkip (the default) does not fire while the previous job is
	// waiting, pending or running; the tick is recorded as skipped.
	OverlapSkip Overlap = "skip"
	// OverlapAllow fires every tick regardless.
	OverlapAllow Overlap = "allow"
)

// ScheduleSpec is what POST /schedules and PUT /schedule/{id} take: the
// parts of a schedule a client chooses.
type ScheduleSpec struct {
	// Name is the schedule's id: 1 to 64 of a-z, 0-9, '-' and '_',
	// starting with a letter or digit.
	Name string `json:"name"`
	// Cron is the schedule: five fields (minute hour day-of-month month
	// day-of-week), six with a leading seconds field, or a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly, @every 90s).
	Cron string `json:"cron"`
	// TimeZone is the IANA zone the cron fields are read in; default UTC.
	TimeZone string `json:"time_zone,omitempty"`
	// Job is the job each tick submits, as POST /job takes it.
	Job     JobSpec `json:"job"`
	Paused  bool    `json:"paused,omitempty"`
	CatchUp CatchUp `json:"catch_up,omitempty"`
	Overlap Overlap `json:"overlap,omitempty"`
}

// Schedule is a stored schedule and its state.
type Schedule struct {
	ID string `json:"id"`
	ScheduleSpec
	// NextRun is the next tick to fire (nil while paused).
	NextRun *time.Time `json:"next_run,omitempty"`
	// LastRun is the last tick that fired a job, and LastJobID that job.
	LastRun   *time.Time `json:"last_run,omitempty"`
	LastJobID string     `json:"last_job_id,omitempty"`
	// LastSkip is the last tick that fired nothing, and LastSkipReason why
	// (overlap, missed ticks under catch_up skip, a refused submission).
	LastSkip       *time.Time `json:"last_skip,omitempty"`
	LastSkipReason string     `json:"last_skip_reason,omitempty"`
	// Fired and Skipped count the ticks.
	Fired   int64 `json:"fired"`
	Skipped int64 `json:"skipped"`
	// PendingJob is the job of a tick claimed but not yet known to be
	// submitted, ClaimedAt when and ClaimedBy which controller claimed it.
	// A controller that finds it older than a few seconds submits it itself
	// (the job id is the tick's, so it can be submitted only once).
	PendingJob string     `json:"pending_job,omitempty"`
	ClaimedAt  *time.Time `json:"claimed_at,omitempty"`
	ClaimedBy  string     `json:"claimed_by,omitempty"`
	CreatedBy  string     `json:"created_by,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

var scheduleNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// cronParser reads standard five-field expressions, an optional leading
// seconds field, and descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron reads a cron expression in a time zone (empty: UTC).
func ParseCron(expr, timeZone string) (cron.Schedule, error) {
	loc, err := LoadTimeZone(timeZone)
	if err != nil {
		return nil, err
	}
	e := strings.TrimSpace(expr)
	if e == "" {
		return nil, invalid("cron", "is empty (want five fields such as \"0 3 * * *\", six with seconds first, or @hourly, @daily, @every 10m)")
	}
	if strings.HasPrefix(e, "TZ=") || strings.HasPrefix(e, "CRON_TZ=") {
		return nil, invalid("cron", "%q sets a time zone; use time_zone instead", expr)
	}
	s, err := cronParser.Parse("CRON_TZ=" + loc.String() + " " + e)
	if err != nil {
		return nil, invalid("cron", "%q: %v (want five fields such as \"0 3 * * *\", six with seconds first, or @hourly, @daily, @every 10m)", expr, err)
	}
	return s, nil
}

// LoadTimeZone resolves an IANA time zone name; empty is UTC. The grid
// binary embeds the zone database (controller/schedules.go imports
// time/tzdata), so zones resolve the same on every machine; the api
// package leaves that to its importers, sparing the agent's binary.
func LoadTimeZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if strings.EqualFold(name, "local") {
		return nil, invalid("time_zone", "%q depends on the controller's machine; name an IANA zone such as Europe/Berlin", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, invalid("time_zone", "%q is not an IANA time zone (such as UTC, Europe/Berlin, America/New_York)", name)
	}
	return loc, nil
}

// NextRun is the first tick of the schedule after t.
func (s *ScheduleSpec) NextRun(t time.Time) (time.Time, error) {
	cs, err := ParseCron(s.Cron, s.TimeZone)
	if err != nil {
		return time.Time{}, err
	}
	n := cs.Next(t)
	if n.IsZero() {
		return time.Time{}, invalid("cron", "%q never fires", s.Cron)
	}
	return n.UTC(), nil
}

// Normalize fills in the defaults.
func (s *ScheduleSpec) Normalize() {
	if s.TimeZone == "" {
		s.TimeZone = "UTC"
	}
	if s.CatchUp == "" {
		s.CatchUp = CatchUpSkip
	}
	if s.Overlap == "" {
		s.Overlap = OverlapSkip
	}
}

// Validate checks the schedule's own fields and its job's structure;
// errors name the field (job.tasks[0].backend, cron, time_zone, ...).
func (s *ScheduleSpec) Validate() error {
	if !scheduleNameRE.MatchString(s.Name) {
		return invalid("name", "%q: want 1 to 64 of a-z, 0-9, '-' and '_', starting with a letter or digit", s.Name)
	}
	if _, err := s.NextRun(time.Now()); err != nil {
		return err
	}
	switch s.CatchUp {
	case "", CatchUpSkip, CatchUpRunOnce:
	default:
		return invalid("catch_up", "%q: want skip or run_once", s.CatchUp)
	}
	switch s.Overlap {
	case "", OverlapSkip, OverlapAllow:
	default:
		return invalid("overlap", "%q: want skip or allow", s.Overlap)
	}
	if err := s.Job.Job().Validate(); err != nil {
		return PrefixField("job", err)
	}
	if _, err := ParseNotBefore(s.Job.NotBefore, time.Now()); err != nil {
		return PrefixField("job", err)
	}
	return nil
}

// PrefixField puts prefix before the field a validation error names
// ("job" and "tasks[0].backend" make "job.tasks[0].backend").
func PrefixField(prefix string, err error) error {
	var ve *ValidationError
	if errors.As(err, &ve) {
		f := prefix
		if ve.Field != "" {
			f += "." + ve.Field
		}
		return &ValidationError{Field: f, Msg: ve.Msg}
	}
	return fmt.Errorf("%s: %w", prefix, err)
}

// ParseScheduleSpec reads a POST /schedules or PUT /schedule/{id} body
// (JSON; unknown fields are errors, in the schedule and in its job) and
// validates it.
func ParseScheduleSpec(data []byte) (*ScheduleSpec, error) {
	var raw struct {
		ScheduleSpec
		Job json.RawMessage `json:"job"`
	}
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(&raw); err != nil {
		return nil, fmt.Errorf("parse schedule: %w", err)
	}
	if len(bytes.TrimSpace(raw.Job)) == 0 || string(bytes.TrimSpace(raw.Job)) == "null" {
		return nil, invalid("job", "is missing (want the job to submit, as POST /job takes it)")
	}
	spec, err := ParseJobSpec(raw.Job)
	if err != nil {
		return nil, PrefixField("job", err)
	}
	s := raw.ScheduleSpec
	s.Job = *spec
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// ScheduleJobID is the id of the job a schedule's tick submits: the same on
// every controller, so a tick's job can be stored only once.
func ScheduleJobID(scheduleID string, tick time.Time) string {
	return fmt.Sprintf("sched-%s-%d", scheduleID, tick.Unix())
}
