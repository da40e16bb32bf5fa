package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newScheduleCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Submit a job on a cron schedule: create, update, list, show, pause, resume, delete",
		Long: `A schedule submits an ordinary job at every tick of a cron expression, once
per tick across all controllers of a cluster. Its jobs name it in
schedule_id ('grid job status ID' shows it).`,
	}
	cmd.AddCommand(newScheduleCreateCommand(g, false), newScheduleCreateCommand(g, true), newScheduleListCommand(g), newScheduleShowCommand(g),
		newSchedulePauseCommand(g, true), newSchedulePauseCommand(g, false), newScheduleDeleteCommand(g))
	return cmd
}

// scheduleOptions are the flags of "schedule create" besides the job's.
type scheduleOptions struct {
	cron, timeZone, catchUp, overlap string
	paused                           bool
}

// newScheduleCreateCommand is "schedule create", or with update "schedule
// update", which takes the same arguments and replaces the whole
// definition.
func newScheduleCreateCommand(g *globals, update bool) *cobra.Command {
	o, so := &runOptions{}, &scheduleOptions{}
	verb, short, lead := "create", "Create a schedule that submits a job at every tick of a cron expression",
		"Create a schedule."
	if update {
		verb, short, lead = "update", "Replace a schedule's cron expression, policies and job",
			`Replace a schedule's definition with the one given, in the form 'create'
takes. It keeps its name, its counters and its paused state (unless
--paused is given); a new cron expression or time zone counts from now.`
	}
	example := `  grid schedule create nightly-update --cron '0 3 * * *' --time-zone Europe/Berlin -f examples/jobs/nightly-update.yaml
  grid schedule create ping-all --cron '@every 5m' --target all ping echo --message alive
  grid schedule create weekdays --cron '30 9 * * 1-5' --time-zone America/New_York --overlap allow -f report.yaml`
	if update {
		example = `  grid schedule update nightly-update --cron '0 4 * * *' --time-zone Europe/Berlin -f examples/jobs/nightly-update.yaml`
	}
	cmd := &cobra.Command{
		Use:   verb + " NAME --cron EXPR (-f FILE | --target TARGET BACKEND ACTION [--PARAM VALUE]...)",
		Short: short,
		Long: lead + ` The job is given as to 'grid job run': a job file (-f), or
one backend action with --target and its parameters.

--cron takes five fields (minute hour day-of-month month day-of-week), six
with a leading seconds field, or a descriptor: @hourly, @daily, @weekly,
@monthly, @yearly, @every 90s. --time-zone is the IANA zone the fields are
read in (default UTC).

--catch-up says what happens to ticks no controller fired in time (every
controller was down): skip (default) fires none of them, run_once fires one
job for them all. --overlap skip (default) fires nothing while the previous
tick's job has not finished; allow fires every tick.`,
		Example:            example,
		DisableFlagParsing: true,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			ra, help, err := parseJobCommandLine(cmd, o, args)
			if err != nil || help {
				return err
			}
			if len(ra.positional) == 0 {
				return usageErrorf("want the schedule's NAME first (grid schedule %s NAME --cron EXPR ...)", verb)
			}
			name := ra.positional[0]
			ra.positional = ra.positional[1:]
			if so.cron == "" {
				return usageErrorf("--cron is required (e.g. '0 3 * * *', '@hourly', '@every 10m')")
			}
			job, err := buildSpec(o, ra, cmd.Flags().Changed)
			if err != nil {
				return err
			}
			spec := &api.ScheduleSpec{Name: name, Cron: so.cron, TimeZone: so.timeZone, Job: *job, Paused: so.paused,
				CatchUp: api.CatchUp(so.catchUp), Overlap: api.Overlap(so.overlap)}
			if err := spec.Validate(); err != nil {
				return usageErrorf("%w", err)
			}
			if err := g.validate(); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if !update {
				s, err := c.CreateSchedule(cmd.Context(), spec)
				if err != nil {
					return fmt.Errorf("create schedule %s: %w", name, err)
				}
				return printSchedule(g, s)
			}
			if !cmd.Flags().Changed("paused") {
				cur, err := c.GetSchedule(cmd.Context(), name)
				if err != nil {
					return fmt.Errorf("update schedule %s: %w", name, err)
				}
				spec.Paused = cur.Paused
			}
			s, err := c.UpdateSchedule(cmd.Context(), name, spec)
			if err != nil {
				return fmt.Errorf("update schedule %s: %w", name, err)
			}
			return printSchedule(g, s)
		}),
	}
	addJobSpecFlags(cmd.Flags(), o)
	f := cmd.Flags()
	f.StringVar(&so.cron, "cron", "", "cron expression: 5 fields, 6 with seconds first, or @hourly, @daily, @every 10m ...")
	f.StringVar(&so.timeZone, "time-zone", "", "IANA time zone of the cron fields (default UTC)")
	f.StringVar(&so.catchUp, "catch-up", "", "ticks missed while no controller ran: skip (default) or run_once")
	f.StringVar(&so.overlap, "overlap", "", "tick while the previous job runs: skip (default) or allow")
	f.BoolVar(&so.paused, "paused", false, "create it paused (update: set it paused or, with --paused=false, running; without the flag update keeps its state)")
	return cmd
}

func newScheduleListCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List schedules with their next and last runs",
		Args:  cobra.NoArgs,
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListSchedules(cmd.Context())
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			if g.json() {
				return writeJSON(g.stdout, list)
			}
			return printScheduleList(g.stdout, list)
		}),
	}
}

func newScheduleShowCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "show NAME",
		Short: "Show a schedule: its cron, job, next and last run, last job and skips",
		Args:  exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			s, err := c.GetSchedule(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("show schedule %s: %w", args[0], err)
			}
			return printSchedule(g, s)
		}),
	}
}

func newSchedulePauseCommand(g *globals, pause bool) *cobra.Command {
	use, short := "pause", "Stop a schedule firing until it is resumed"
	if !pause {
		use, short = "resume", "Make a paused schedule fire again from its next tick (missed ticks are not caught up)"
	}
	return &cobra.Command{
		Use:   use + " NAME",
		Short: short,
		Args:  exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			call := c.PauseSchedule
			if !pause {
				call = c.ResumeSchedule
			}
			s, err := call(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("%s schedule %s: %w", use, args[0], err)
			}
			return printSchedule(g, s)
		}),
	}
}

func newScheduleDeleteCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (the jobs it submitted stay)",
		Args:  exactArgs("NAME"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSchedule(cmd.Context(), args[0]); err != nil {
				return fmt.Errorf("delete schedule %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, map[string]string{"id": args[0], "status": "deleted"})
			}
			_, err = fmt.Fprintf(g.stdout, "schedule %s deleted\n", args[0])
			return err
		}),
	}
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.Local().Format(time.RFC3339)
}

func printScheduleList(w io.Writer, list []api.Schedule) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "NAME\tCRON\tTIME ZONE\tSTATE\tNEXT RUN\tLAST RUN\tLAST JOB\tFIRED\tSKIPPED")
	for _, s := range list {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		last := s.LastJobID
		if last == "" {
			last = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", s.ID, s.Cron, s.TimeZone, state,
			fmtTime(s.NextRun), fmtTime(s.LastRun), last, s.Fired, s.Skipped)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

func printSchedule(g *globals, s *api.Schedule) error {
	if g.json() {
		return writeJSON(g.stdout, s)
	}
	tw := newTable(g.stdout)
	state := "active"
	if s.Paused {
		state = "paused"
	}
	var tasks []string
	for _, st := range api.Flatten(s.Job.Tasks) {
		tasks = append(tasks, st.Task.Name())
	}
	rows := [][2]string{
		{"schedule", s.ID}, {"cron", s.Cron}, {"time zone", s.TimeZone}, {"state", state},
		{"catch up", string(s.CatchUp)}, {"overlap", string(s.Overlap)},
		{"job", fmt.Sprintf("%s on %s", strings.Join(tasks, ", "), s.Job.Target)},
		{"next run", fmtTime(s.NextRun)}, {"last run", fmtTime(s.LastRun)},
		{"last job", s.LastJobID}, {"fired", fmt.Sprint(s.Fired)}, {"skipped", fmt.Sprint(s.Skipped)},
	}
	if s.LastSkipReason != "" {
		rows = append(rows, [2]string{"last skip", fmtTime(s.LastSkip) + ": " + s.LastSkipReason})
	}
	rows = append(rows, [2]string{"created by", s.CreatedBy})
	for _, r := range rows {
		if r[1] == "" {
			r[1] = "-"
		}
		_, _ = fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}
