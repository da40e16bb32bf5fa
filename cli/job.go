package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func newJobCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "job",
		Short: "Run, inspect, cancel, retry and delete jobs",
	}
	cmd.AddCommand(newJobRunCommand(g), newJobStatusCommand(g), newJobListCommand(g), newJobCancelCommand(g),
		newJobRetryCommand(g), newJobDeleteCommand(g), newJobDLQCommand(g))
	return cmd
}

// runOptions are the flags of "job run" that are GRID's own; everything
// else of the form --name value becomes a task parameter.
type runOptions struct {
	file     string
	target   string
	strategy string
	timeout  string
	wait     bool
	check    bool
	params   []string // --param name=value, for names that collide with a flag
	// maxConcurrency and maxErrors are the job's rollout limits ("10%", "1").
	maxConcurrency string
	maxErrors      string
	// priority and notBefore say in which order and from when the job runs.
	priority  int
	notBefore string
}

func newJobRunCommand(g *globals) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run (-f FILE | --target TARGET BACKEND ACTION [--PARAM VALUE]...)",
		Short: "Submit a job from a file or a single backend action",
		Long: `Submit a job, either from a job file (YAML or JSON, "-" reads stdin) or as a
single backend action given on the command line. Any --name value (or
--name=value) that is not one of the flags below becomes a parameter of the
action; a --name with no value is "true". Use --param name=value, or put
parameters after "--", for a parameter whose name is one of grid's flags.

TARGET is all, any, group:NAME, node:ID or site:NAME (every node of a site);
group:NAME@SITE, node:ID@SITE and any@SITE narrow to one site's nodes.

Without --wait the job id is printed (with -o json, the job). With --wait the
command follows the job to its end and prints per-node results; the exit code
is 0 when the job completed, 1 when it failed, was cancelled or partially
failed, and 3 when unreachable nodes alone kept it from completing (no node
failed). --max-concurrency and --max-errors roll the job out a slot at a
time: a count (3) or a percentage of the nodes (10%, rounded down); once
more than --max-errors nodes failed or were unreachable, no new node starts.`,
		Example: `  grid job run --target group:web ping echo --message hi --wait
  grid job run --target all ping sleep --duration=2s --timeout 1m
  grid job run -f deploy.yaml --max-concurrency 10% --max-errors 1 --wait
  grid job run -f examples/jobs/pipeline-then-barrier.yaml --wait
  grid job run --target node:web-1 apt install --check -- --package curl
  grid job run --target group:web@paris ping echo --message hi --wait`,
		// Parameters are arbitrary --name value pairs, which pflag would
		// reject or drop; the arguments are split by hand in parseRunArgs.
		DisableFlagParsing: true,
		RunE:               runE(func(cmd *cobra.Command, args []string) error { return runJob(cmd, g, o, args) }),
	}
	addJobSpecFlags(cmd.Flags(), o)
	cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the job to finish and print its results")
	return cmd
}

// addJobSpecFlags registers the flags that make a job spec (job run and
// schedule create share them).
func addJobSpecFlags(f *pflag.FlagSet, o *runOptions) {
	f.StringVarP(&o.file, "file", "f", "", "job file (YAML or JSON); - reads stdin")
	f.StringVar(&o.target, "target", "", "target: all, any, group:NAME, node:ID, site:NAME; @SITE narrows group, node and any (overrides the file's)")
	f.StringVar(&o.strategy, "strategy", "", "fail-fast or continue (overrides the file's)")
	// This --timeout shadows the global request timeout: for a job run the
	// useful timeout is the job's.
	f.StringVar(&o.timeout, "timeout", "", "job timeout, e.g. 10m (overrides the file's)")
	f.BoolVar(&o.check, "check", false, "check mode: report what would change without changing it")
	f.StringVar(&o.maxConcurrency, "max-concurrency", "", "most nodes running a step at once: a count or a percentage, e.g. 10% (overrides the file's)")
	f.StringVar(&o.maxErrors, "max-errors", "", "failed or unreachable nodes tolerated before no new node starts: a count or a percentage (overrides the file's)")
	f.StringArrayVarP(&o.params, "param", "p", nil, "task parameter name=value (repeatable)")
	f.IntVar(&o.priority, "priority", api.DefaultPriority, "priority from 0 (lowest) to 9 (highest) among jobs waiting for a free slot")
	f.StringVar(&o.notBefore, "not-before", "", "start no earlier than this RFC 3339 time or duration from now (e.g. 10m)")
}

// runArgs is the command line of "job run" split into GRID's own flags,
// positional arguments and inline task parameters.
type runArgs struct {
	flags      []string
	positional []string
	params     api.Params
}

// parseRunArgs splits args. lookup reports whether --name (or -n for a
// one-letter name) is a flag of the command and whether it takes no value.
// Known flags may appear anywhere; "--" ends them, after which every
// --name value is a parameter.
func parseRunArgs(args []string, lookup func(name string, short bool) (known, isBool bool)) (runArgs, error) {
	var out runArgs
	addParam := func(name, value string) error {
		if name == "" {
			return usageErrorf("empty parameter name")
		}
		if out.params == nil {
			out.params = api.Params{}
		}
		if _, dup := out.params[name]; dup {
			return usageErrorf("parameter --%s given twice", name)
		}
		out.params[name] = value
		return nil
	}
	paramsOnly := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" && !paramsOnly:
			paramsOnly = true
		case strings.HasPrefix(a, "--") && len(a) > 2:
			name, value, hasValue := strings.Cut(a[2:], "=")
			if !paramsOnly {
				if known, isBool := lookup(name, false); known {
					out.flags = append(out.flags, a)
					if !hasValue && !isBool && i+1 < len(args) {
						i++
						out.flags = append(out.flags, args[i])
					}
					continue
				}
			}
			// An inline parameter. Its value is the next argument unless
			// that looks like another flag, so "--force --wait" reads as
			// force=true.
			if !hasValue {
				value = "true"
				if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
					i++
					value = args[i]
				}
			}
			if err := addParam(name, value); err != nil {
				return runArgs{}, err
			}
		case strings.HasPrefix(a, "-") && len(a) > 1 && !paramsOnly:
			// Shorthand flags (-f FILE, -o json, -fFILE, -h). Parameters are
			// always long, so an unknown shorthand is a mistake.
			known, isBool := lookup(a[1:2], true)
			if !known {
				return runArgs{}, usageErrorf("unknown shorthand flag %q (task parameters are written --name value)", a)
			}
			out.flags = append(out.flags, a)
			if len(a) == 2 && !isBool && i+1 < len(args) {
				i++
				out.flags = append(out.flags, args[i])
			}
		default:
			out.positional = append(out.positional, a)
		}
	}
	return out, nil
}

// flagLookup adapts a pflag set to parseRunArgs.
func flagLookup(fs *pflag.FlagSet) func(string, bool) (bool, bool) {
	return func(name string, short bool) (bool, bool) {
		var f *pflag.Flag
		if short {
			f = fs.ShorthandLookup(name)
		} else {
			f = fs.Lookup(name)
		}
		if f == nil {
			return false, false
		}
		return true, f.NoOptDefVal != ""
	}
}

func runJob(cmd *cobra.Command, g *globals, o *runOptions, args []string) error {
	ra, help, err := parseJobCommandLine(cmd, o, args)
	if err != nil || help {
		return err
	}
	spec, err := buildSpec(o, ra, cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if err := g.validate(); err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	job, err := c.SubmitJob(ctx, spec)
	if err != nil {
		return fmt.Errorf("submit job: %w", err)
	}
	if !o.wait {
		if g.json() {
			return writeJSON(g.stdout, job)
		}
		_, err := fmt.Fprintln(g.stdout, job.ID)
		return err
	}
	// Ctrl-C stops waiting; the job itself keeps running on the fleet.
	wctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var final *api.Job
	if !g.json() && isTerminal(g.stdout) {
		final, err = followJob(wctx, c, job.ID, g.stdout)
	} else {
		final, err = c.WaitJob(wctx, job.ID)
	}
	if err != nil {
		if wctx.Err() != nil && ctx.Err() == nil {
			return &exitError{code: ExitFailed, err: fmt.Errorf("stopped waiting; job %s is still running (grid job status %s)", job.ID, job.ID)}
		}
		return fmt.Errorf("wait for job %s: %w", job.ID, err)
	}
	if err := printJob(g, final); err != nil {
		return err
	}
	return jobOutcome(final)
}

// parseJobCommandLine parses a command line of job spec flags, positional
// arguments and inline task parameters (see parseRunArgs). help is true
// when --help was given and answered.
func parseJobCommandLine(cmd *cobra.Command, o *runOptions, args []string) (ra runArgs, help bool, err error) {
	// With flag parsing disabled cobra neither merges the global flags into
	// the command's set nor parses them; do both here.
	_ = cmd.InheritedFlags()
	fs := cmd.Flags()
	ra, err = parseRunArgs(args, flagLookup(fs))
	if err != nil {
		return runArgs{}, false, err
	}
	if err := fs.Parse(ra.flags); err != nil {
		return runArgs{}, false, usageErrorf("%w", err)
	}
	if h, _ := fs.GetBool("help"); h {
		return runArgs{}, true, cmd.Help()
	}
	for _, p := range o.params {
		name, value, ok := strings.Cut(p, "=")
		if !ok {
			return runArgs{}, false, usageErrorf("--param %q: want name=value", p)
		}
		if ra.params == nil {
			ra.params = api.Params{}
		}
		if _, dup := ra.params[name]; dup {
			return runArgs{}, false, usageErrorf("parameter %s given twice", name)
		}
		ra.params[name] = value
	}
	return ra, false, nil
}

// buildSpec turns the parsed command line into a validated job spec.
// changed reports whether a flag was given, so a file's values are only
// overridden by flags the user actually set.
func buildSpec(o *runOptions, ra runArgs, changed func(string) bool) (*api.JobSpec, error) {
	var spec *api.JobSpec
	if o.file != "" {
		if len(ra.positional) > 0 || len(ra.params) > 0 {
			return nil, usageErrorf("-f takes the whole job from the file; drop BACKEND ACTION and parameters (got %q)", append(ra.positional, ra.params.Keys()...))
		}
		data, err := readJobFile(o.file)
		if err != nil {
			return nil, usageErrorf("%w", err)
		}
		spec, err = api.ParseJobSpec(data)
		if err != nil {
			return nil, usageErrorf("job file %s: %w", o.file, err)
		}
	} else {
		switch {
		case len(ra.positional) < 2:
			return nil, usageErrorf("want -f FILE, or BACKEND ACTION with --target (e.g. grid job run --target all ping echo --message hi)")
		case len(ra.positional) > 2:
			return nil, usageErrorf("unexpected argument %q after BACKEND ACTION (parameters are written --name value)", ra.positional[2])
		case o.target == "":
			return nil, usageErrorf("--target is required: all, any, group:NAME, node:ID or site:NAME (group:NAME@SITE for a group's nodes at one site)")
		}
		spec = &api.JobSpec{Tasks: []api.Phase{{Backend: ra.positional[0], Action: ra.positional[1], Params: ra.params}}}
	}
	if changed("target") {
		t, err := api.ParseTarget(o.target)
		if err != nil {
			return nil, usageErrorf("--target: %w", err)
		}
		spec.Target = t
	}
	if changed("strategy") {
		spec.Strategy = api.Strategy(o.strategy)
	}
	if changed("timeout") {
		spec.Timeout = o.timeout
	}
	if changed("check") {
		spec.CheckMode = o.check
	}
	if changed("priority") {
		spec.Priority = &o.priority
	}
	if changed("not-before") {
		if _, err := api.ParseNotBefore(o.notBefore, time.Now()); err != nil {
			return nil, usageErrorf("--not-before: %w", err)
		}
		spec.NotBefore = o.notBefore
	}
	for _, lf := range []struct {
		flag, value string
		dst         **api.Limit
	}{{"max-concurrency", o.maxConcurrency, &spec.MaxConcurrency}, {"max-errors", o.maxErrors, &spec.MaxErrors}} {
		if !changed(lf.flag) {
			continue
		}
		l, err := api.ParseLimit(lf.value)
		if err != nil {
			return nil, usageErrorf("--%s: %w", lf.flag, err)
		}
		*lf.dst = &l
	}
	if err := spec.Job().Validate(); err != nil {
		return nil, usageErrorf("%w", err)
	}
	return spec, nil
}

func readJobFile(path string) ([]byte, error) {
	var r io.Reader
	if path == "-" {
		r = os.Stdin
	} else {
		f, err := os.Open(path) //nolint:gosec // reading the job file the user named is the point
		if err != nil {
			return nil, fmt.Errorf("job file: %w", err)
		}
		defer func() { _ = f.Close() }()
		r = f
	}
	// Read one byte past the limit so ParseJobSpec reports an oversized
	// file instead of parsing a truncated one.
	data, err := io.ReadAll(io.LimitReader(r, api.MaxJobFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read job file %s: %w", path, err)
	}
	return data, nil
}

// jobOutcome maps a finished job to the command's result: nil when it
// completed (or is not finished), ExitUnreachable when unreachable nodes
// alone kept it from completing, else ExitFailed.
func jobOutcome(j *api.Job) error {
	if j.Status == api.JobCompleted || !j.Status.Terminal() {
		return nil
	}
	msg := fmt.Sprintf("job %s %s", j.ID, j.Status)
	if j.Error != "" {
		msg += ": " + j.Error
	}
	code := ExitFailed
	sum := j.Summary
	if sum == nil {
		s := j.Summarize()
		sum = &s
	}
	if j.Status != api.JobCancelled && sum.Unreachable > 0 && sum.Failed == 0 {
		code = ExitUnreachable
	}
	return &exitError{code: code, err: errors.New(msg)}
}

// followJob polls the job and redraws a compact progress view until the job
// is terminal; the view is erased before returning so the final table
// stands alone.
func followJob(ctx context.Context, c *api.Client, id string, w io.Writer) (*api.Job, error) {
	const interval = 300 * time.Millisecond
	const maxConsecutiveErrors = 10
	p := &progress{w: w, width: terminalWidth(), start: time.Now()}
	defer p.clear()
	var errs int
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		j, err := c.GetJob(ctx, id)
		switch {
		case err == nil:
			errs = 0
			if j.Status.Terminal() {
				return j, nil
			}
			p.draw(j)
		case ctx.Err() != nil:
			return nil, ctx.Err()
		default:
			// A controller restart or a dropped connection should not end
			// the wait at once.
			errs++
			if errs >= maxConsecutiveErrors {
				return nil, err
			}
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func newJobStatusCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status ID",
		Short: "Show a job with its per-node results",
		Long: `Show a job with its per-node results. The exit code is the job's, as with
job run --wait: 0 completed (or still running), 1 failed, cancelled or
partially failed, 3 unreachable nodes alone kept it from completing.`,
		Args: exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			j, err := c.GetJob(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("job %s: %w", args[0], err)
			}
			if err := printJob(g, j); err != nil {
				return err
			}
			// The exit code is the job's, as with job run --wait.
			return jobOutcome(j)
		}),
	}
}

func newJobListCommand(g *globals) *cobra.Command {
	var q api.JobQuery
	var status string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List jobs, newest first (one page; --cursor continues)",
		Args:  exactArgs(),
		RunE: runE(func(cmd *cobra.Command, _ []string) error {
			if status != "" && !api.KnownJobStatus(api.JobStatus(status)) {
				return usageErrorf("--status %q: want one of %s", status, strings.Join(api.JobStatusNames(), ", "))
			}
			if q.Limit < 1 || q.Limit > 1000 {
				return usageErrorf("--limit %d: want 1 to 1000 jobs per page", q.Limit)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			q.Status = api.JobStatus(status)
			jobs, err := c.ListJobsPage(cmd.Context(), q)
			if err != nil {
				return fmt.Errorf("list jobs: %w", err)
			}
			if !g.json() && len(jobs) == q.Limit && len(jobs) > 0 {
				defer func() {
					_, _ = fmt.Fprintf(g.stderr, "more jobs: grid job list --limit %d --cursor %s\n", q.Limit, api.JobCursor(&jobs[len(jobs)-1]))
				}()
			}
			if g.json() {
				if jobs == nil {
					jobs = []api.Job{}
				}
				return writeJSON(g.stdout, jobs)
			}
			return printJobList(g.stdout, jobs, time.Now())
		}),
	}
	cmd.Flags().IntVar(&q.Limit, "limit", 50, "jobs per page (1-1000)")
	cmd.Flags().StringVar(&q.Cursor, "cursor", "", "continue after this job (printed when there are more)")
	cmd.Flags().StringVar(&status, "status", "", "only jobs in this state: "+strings.Join(api.JobStatusNames(), ", "))
	cmd.Flags().StringVar(&q.SubmittedBy, "submitted-by", "", "only jobs submitted with this token name")
	cmd.Flags().StringVar(&q.ScheduleID, "schedule", "", "only jobs a schedule submitted")
	return cmd
}

func newJobCancelCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a pending or running job",
		Args:  exactArgs("ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			j, err := c.CancelJob(cmd.Context(), args[0])
			if err != nil {
				return fmt.Errorf("cancel job %s: %w", args[0], err)
			}
			if g.json() {
				return writeJSON(g.stdout, j)
			}
			_, err = fmt.Fprintf(g.stdout, "job %s: %s\n", j.ID, j.Status)
			return err
		}),
	}
}
