package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// isTerminal reports whether w is a character device, without a terminal
// library: enough to decide whether cursor movement makes sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// terminalWidth is $COLUMNS or 100. Lines of the progress view are cut to
// it, because a wrapped line would throw off the redraw.
func terminalWidth() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 20 {
		return n
	}
	return 100
}

// truncate cuts s to its first line and at most n runes, marking the cut.
func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	cut := false
	if i := strings.IndexAny(s, "\r\n"); i >= 0 {
		s, cut = strings.TrimSpace(s[:i]), true
	}
	if r := []rune(s); len(r) > n {
		s, cut = string(r[:n-1]), true
	}
	if cut {
		s += "…"
	}
	return s
}

// cutLine cuts a line to n runes, keeping its indentation.
func cutLine(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// fmtDuration rounds a duration for people: 1.23s, 45ms, 2m3s.
func fmtDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// fmtAge renders how long ago t was: 5s, 3m, 2h, 4d.
func fmtAge(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// orDash is s, or "-" when empty, with control characters escaped: the
// text comes from the controller, and from nodes through it, and must not
// drive the terminal (ANSI escapes).
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return api.EscapeControl(s)
}

// jobElapsed is how long the job has run, or ran.
func jobElapsed(j *api.Job, now time.Time) time.Duration {
	if j.CreatedAt.IsZero() {
		return 0
	}
	end := now
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	} else if j.Status.Terminal() {
		end = j.UpdatedAt
	}
	return end.Sub(j.CreatedAt)
}

// printJob prints a job: a header, then one row per step and node.
func printJob(g *globals, j *api.Job) error {
	if g.json() {
		return writeJSON(g.stdout, j)
	}
	return writeJobTable(g.stdout, j, time.Now())
}

func writeJobTable(w io.Writer, j *api.Job, now time.Time) error {
	tw := newTable(w)
	strategy := j.Strategy
	if strategy == "" {
		strategy = api.StrategyFailFast
	}
	steps := api.Flatten(j.Tasks)
	_, _ = fmt.Fprintf(tw, "job:\t%s\n", j.ID)
	_, _ = fmt.Fprintf(tw, "status:\t%s\n", j.Status)
	if j.StatusReason != "" {
		_, _ = fmt.Fprintf(tw, "waiting:\t%s\n", j.StatusReason)
	}
	_, _ = fmt.Fprintf(tw, "target:\t%s\n", j.Target)
	_, _ = fmt.Fprintf(tw, "strategy:\t%s\n", strategy)
	if j.Timeout != "" {
		_, _ = fmt.Fprintf(tw, "timeout:\t%s\n", j.Timeout)
	}
	if j.CheckMode {
		_, _ = fmt.Fprintf(tw, "check mode:\tyes\n")
	}
	if j.MaxConcurrency != nil {
		_, _ = fmt.Fprintf(tw, "max concurrency:\t%s\n", j.MaxConcurrency)
	}
	if j.MaxErrors != nil {
		_, _ = fmt.Fprintf(tw, "max errors:\t%s\n", j.MaxErrors)
	}
	_, _ = fmt.Fprintf(tw, "nodes:\t%d\n", len(j.Expected))
	if len(j.NodeSites) > 0 {
		_, _ = fmt.Fprintf(tw, "sites:\t%s\n", siteCounts(j))
	}
	if len(j.Unreachable) > 0 {
		names := make([]string, len(j.Unreachable))
		for i, id := range j.Unreachable {
			names[i] = nodeAtSite(j, id)
		}
		_, _ = fmt.Fprintf(tw, "unreachable:\t%s (offline when the target was resolved)\n", truncate(strings.Join(names, ", "), 120))
	}
	if sum := j.Summary; sum != nil {
		cancelled := ""
		if sum.Cancelled > 0 {
			cancelled = fmt.Sprintf(", %d cancelled", sum.Cancelled)
		}
		_, _ = fmt.Fprintf(tw, "summary:\t%d targeted, %d reached, %d succeeded, %d failed, %d unreachable, %d not started%s\n",
			sum.Targeted, sum.Reached, sum.Succeeded, sum.Failed, sum.Unreachable, sum.NotStarted, cancelled)
	}
	_, _ = fmt.Fprintf(tw, "steps:\t%d\n", len(steps))
	if j.SubmittedBy != "" {
		_, _ = fmt.Fprintf(tw, "submitted by:\t%s\n", j.SubmittedBy)
	}
	if j.ScheduleID != "" {
		_, _ = fmt.Fprintf(tw, "schedule:\t%s\n", j.ScheduleID)
	}
	if !j.CreatedAt.IsZero() {
		_, _ = fmt.Fprintf(tw, "created:\t%s\n", j.CreatedAt.Local().Format(time.RFC3339))
		_, _ = fmt.Fprintf(tw, "duration:\t%s\n", fmtDuration(jobElapsed(j, now)))
	}
	if j.Error != "" {
		_, _ = fmt.Fprintf(tw, "error:\t%s\n", j.Error)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if len(steps) == 0 {
		return nil
	}
	_, _ = fmt.Fprintln(w)
	tw = newTable(w)
	_, _ = fmt.Fprintln(tw, "STEP\tTASK\tNODE\tSTATUS\tDURATION\tCHANGED\tOUTPUT/ERROR")
	for _, s := range steps {
		res := j.Results[s.Index]
		if len(res) == 0 {
			_, _ = fmt.Fprintf(tw, "%d\t%s\t-\t%s\t-\t-\t\n", s.Index, s.Task.Name(), notRun(j))
			continue
		}
		for _, node := range sortedKeys(res) {
			r := res[node]
			if r == nil {
				continue
			}
			text := r.Output
			switch {
			case r.Error != "":
				text = "error: " + r.Error
			case r.StatusReason != "":
				text = r.StatusReason
			}
			status := r.Status
			if r.Attempts > 1 {
				status += fmt.Sprintf(" (%d attempts)", r.Attempts)
			}
			_, _ = fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Index, s.Task.Name(), nodeAtSite(j, node), status,
				fmtDuration(time.Duration(r.Duration)), yesNo(r.Changed), truncate(text, 60))
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// nodeAtSite names a node of the job as node@site when it is in a site
// other than the default one, so a fleet without sites reads as before.
func nodeAtSite(j *api.Job, id string) string {
	if site := j.NodeSite(id); site != api.DefaultSite {
		return id + "@" + site
	}
	return id
}

// siteCounts says how many of the job's nodes each site holds (default
// first, then by name): "default 3, paris 2".
func siteCounts(j *api.Job) string {
	counts := map[string]int{}
	for _, ids := range [][]string{j.Expected, j.Unreachable} {
		for _, id := range ids {
			counts[j.NodeSite(id)]++
		}
	}
	sites := sortedKeys(counts)
	parts := make([]string, 0, len(sites))
	if n := counts[api.DefaultSite]; n > 0 {
		parts = append(parts, fmt.Sprintf("%s %d", api.DefaultSite, n))
	}
	for _, s := range sites {
		if s != api.DefaultSite {
			parts = append(parts, fmt.Sprintf("%s %d", s, counts[s]))
		}
	}
	return strings.Join(parts, ", ")
}

// notRun names the state of a step no node has a result for.
func notRun(j *api.Job) string {
	if j.Status.Terminal() {
		return "not run"
	}
	return api.StepPending
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func printJobList(w io.Writer, jobs []api.Job, now time.Time) error {
	tw := newTable(w)
	_, _ = fmt.Fprintln(tw, "ID\tSTATUS\tTARGET\tSTEP\tNODES\tAGE\tDURATION\tTASKS")
	for i := range jobs {
		j := &jobs[i]
		steps := api.Flatten(j.Tasks)
		step := "-"
		if len(steps) > 0 {
			step = fmt.Sprintf("%d/%d", min(j.Step+1, len(steps)), len(steps))
		}
		_, _ = fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.ID, j.Status, j.Target, step, len(j.Expected),
			fmtAge(j.CreatedAt, now), fmtDuration(jobElapsed(j, now)), truncate(taskSummary(steps), 40))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	return nil
}

// taskSummary lists the distinct task names of a job in order.
func taskSummary(steps []api.FlatStep) string {
	seen := map[string]bool{}
	var names []string
	for _, s := range steps {
		if n := s.Task.Name(); !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	return strings.Join(names, ",")
}

// progress draws a live view of a running job and redraws it in place.
type progress struct {
	w     io.Writer
	width int
	start time.Time
	lines int // lines drawn last time, to move back over
}

// maxProgressSteps bounds the view so a long job does not scroll.
const maxProgressSteps = 12

// maxProgressNodes is how many nodes a step line names individually.
const maxProgressNodes = 6

func (p *progress) draw(j *api.Job) {
	lines := progressLines(j, time.Since(p.start))
	var b strings.Builder
	if p.lines > 0 {
		// Up to the first line drawn last time, then erase to the end.
		fmt.Fprintf(&b, "\x1b[%dA\r\x1b[J", p.lines)
	}
	for _, l := range lines {
		b.WriteString(cutLine(l, p.width-1))
		b.WriteByte('\n')
	}
	_, _ = io.WriteString(p.w, b.String())
	p.lines = len(lines)
}

func (p *progress) clear() {
	if p.lines > 0 {
		_, _ = fmt.Fprintf(p.w, "\x1b[%dA\r\x1b[J", p.lines)
		p.lines = 0
	}
}

// progressLines renders a job in progress: a header and one line per step
// with per-state counts (and node names when there are few nodes).
func progressLines(j *api.Job, elapsed time.Duration) []string {
	steps := api.Flatten(j.Tasks)
	lines := []string{fmt.Sprintf("job %s %s  step %d/%d  nodes %d  %s",
		j.ID, j.Status, min(j.Step+1, len(steps)), len(steps), len(j.Expected), fmtDuration(elapsed.Round(100*time.Millisecond)))}
	first := 0
	if len(steps) > maxProgressSteps {
		// Keep the current step in view, with a little context before it.
		first = min(max(j.Step-2, 0), len(steps)-maxProgressSteps)
		if first > 0 {
			lines = append(lines, fmt.Sprintf("  … %d earlier steps", first))
		}
	}
	last := min(first+maxProgressSteps, len(steps))
	for _, s := range steps[first:last] {
		lines = append(lines, stepLine(s, j))
	}
	if last < len(steps) {
		lines = append(lines, fmt.Sprintf("  … %d more steps", len(steps)-last))
	}
	if j.StatusReason != "" {
		lines = append(lines, "  "+j.StatusReason)
	}
	return lines
}

func stepLine(s api.FlatStep, j *api.Job) string {
	res := j.Results[s.Index]
	counts := map[string]int{}
	for _, r := range res {
		if r != nil {
			counts[r.Status]++
		}
	}
	pending := max(len(j.Expected)-len(res), 0) + counts[api.StepPending]
	active := counts[api.StepDispatched] + counts[api.StepRunning]
	var b strings.Builder
	fmt.Fprintf(&b, "  [%d] %-20s ok %-4d failed %-4d running %-4d pending %-4d", s.Index, s.Task.Name(),
		counts[api.StepSuccess], counts[api.StepFailed], active, pending)
	if n := counts[api.StepSkipped]; n > 0 {
		fmt.Fprintf(&b, " skipped %d", n)
	}
	if n := counts[api.StepUnreachable]; n > 0 {
		fmt.Fprintf(&b, " unreachable %d", n)
	}
	if n := counts[api.StepNotStarted]; n > 0 {
		fmt.Fprintf(&b, " not started %d", n)
	}
	if len(j.Expected) <= maxProgressNodes {
		b.WriteString(" |")
		for _, node := range j.Expected {
			st := api.StepPending
			if r := res[node]; r != nil {
				st = r.Status
				if r.Progress != nil && !api.StepTerminal(st) {
					st += fmt.Sprintf(" %d%%", *r.Progress)
					if r.ProgressMessage != "" {
						st += " " + strconv.Quote(truncate(r.ProgressMessage, 30))
					}
				}
			}
			fmt.Fprintf(&b, " %s:%s", node, st)
		}
	}
	return b.String()
}
