// Package proc is the proc backend: list, rank, find and count the
// host's processes from /proc, and send one a signal. Everything but
// signal is read-only; signal is dangerous (off unless the allow list
// names it), since it can stop any service on the node.
package proc

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/procfs"
)

// NamePattern is a process name: a short name or a program's base name.
const NamePattern = `^[A-Za-z0-9._:@+-]{1,64}$`

// MaxInterval bounds top's CPU sampling interval.
const MaxInterval = time.Minute

// ErrOutOfRange is what count's error wraps when the count is outside
// min..max.
var ErrOutOfRange = errors.New("process count out of range")

// Options configure the backend.
type Options struct {
	// Root is where procfs is mounted; default /proc.
	Root string
}

// Backend is the proc backend.
type Backend struct {
	root string
}

// New returns the proc backend.
func New(opts Options) *Backend {
	if opts.Root == "" {
		opts.Root = procfs.Root
	}
	return &Backend{root: opts.Root}
}

// Schema declares the actions.
func (*Backend) Schema() api.BackendSchema {
	q := func(name, desc string, params ...api.ParamSchema) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
	}
	limit := func(def string) api.ParamSchema {
		return api.ParamSchema{Name: "limit", Type: api.TypeInt, Default: def, Pattern: `^[1-9][0-9]{0,3}$`, Description: "Most processes reported (1-9999)."}
	}
	name := api.ParamSchema{Name: "name", Type: api.TypeString, Pattern: NamePattern, Description: "Process name (short name or program base name). Give name or pattern."}
	pattern := api.ParamSchema{Name: "pattern", Type: api.TypeString, Description: "Regular expression (RE2) matched against the command line. Give name or pattern."}
	return api.BackendSchema{
		Name:        "proc",
		Description: "Processes from /proc: list, top, find, count; and signal (dangerous).",
		Actions: []api.ActionSchema{
			q("list", "Processes by pid: pid, ppid, name, state, uid, command, threads, RSS, CPU seconds.", limit("100")),
			q("top", "The processes using the most CPU (sampled over interval) or memory (RSS).",
				api.ParamSchema{Name: "by", Type: api.TypeString, Default: "cpu", Enum: []string{"cpu", "memory"}, Description: "Rank by cpu or memory."},
				api.ParamSchema{Name: "interval", Type: api.TypeDuration, Default: "1s", Description: "CPU sampling interval (at most 1m)."},
				limit("10")),
			q("find", "Processes matching name or pattern.", name, pattern, limit("100")),
			q("count", "Count processes matching name or pattern; fails outside min..max.", name, pattern,
				api.ParamSchema{Name: "min", Type: api.TypeInt, Default: "1", Pattern: `^[0-9]{1,6}$`, Description: "Fewest processes for a pass."},
				api.ParamSchema{Name: "max", Type: api.TypeInt, Pattern: `^[0-9]{1,6}$`, Description: "Most processes for a pass; no limit when omitted."}),
			{Name: "signal", Description: "Send a signal to a pid or to every process called name (never pid 1 or the agent itself).",
				Idempotent: false, CheckMode: true, Dangerous: true, Params: []api.ParamSchema{
					{Name: "pid", Type: api.TypeInt, Pattern: `^[1-9][0-9]{0,9}$`, Description: "Process id. Give pid or name."},
					{Name: "name", Type: api.TypeString, Pattern: NamePattern, Description: "Process name: every process called so. Give pid or name."},
					{Name: "signal", Type: api.TypeString, Default: "TERM", Enum: []string{"TERM", "KILL", "HUP", "INT", "QUIT", "USR1", "USR2"}, Description: "Signal to send."},
				}},
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("proc: %w", context.Cause(ctx))
	}
	p := req.Params
	limit, _ := strconv.Atoi(p["limit"])
	switch req.Action {
	case "list":
		ps, err := procfs.List(b.root)
		if err != nil {
			return nil, err
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].PID < ps[j].PID })
		return report(fmt.Sprintf("%d processes", len(ps)), ps, limit, nil), nil
	case "top":
		return b.top(ctx, p["by"], p["interval"], limit)
	case "find", "count":
		match, what, err := matcher(p)
		if err != nil {
			return nil, err
		}
		ps, err := b.find(match)
		if err != nil {
			return nil, err
		}
		if req.Action == "find" {
			return report(fmt.Sprintf("%d processes match %s", len(ps), what), ps, limit, map[string]any{"match": what}), nil
		}
		return count(ps, what, p)
	case "signal":
		return b.signal(p, req.CheckMode)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// report is a result listing ps (at most limit of them) with their facts.
func report(line string, ps []procfs.Process, limit int, extra map[string]any) *backends.Result {
	facts := map[string]any{"count": len(ps), "truncated": len(ps) > limit}
	for k, v := range extra {
		facts[k] = v
	}
	if len(ps) > limit {
		ps = ps[:limit]
	}
	list := make([]any, len(ps))
	var out strings.Builder
	out.WriteString(line)
	for i, pr := range ps {
		list[i] = pr.Facts()
		fmt.Fprintf(&out, "\n%7d %-15s %s", pr.PID, pr.Name, pr.Command())
	}
	facts["processes"] = list
	return &backends.Result{Output: out.String(), Facts: facts}
}

// matcher builds the test of find, count: name or pattern, one of them.
func matcher(p api.Params) (func(procfs.Process) bool, string, error) {
	name, pat := p["name"], p["pattern"]
	switch {
	case name != "" && pat != "":
		return nil, "", errors.New("give name or pattern, not both")
	case name != "":
		return func(pr procfs.Process) bool { return pr.Matches(name) }, "name " + name, nil
	case pat != "":
		re, err := regexp.Compile(pat)
		if err != nil {
			return nil, "", fmt.Errorf("pattern: %w", err)
		}
		return func(pr procfs.Process) bool { return re.MatchString(pr.Command()) }, "pattern " + pat, nil
	}
	return nil, "", errors.New("give name (a process name) or pattern (a regular expression of the command line)")
}

// find lists the matching processes but never the agent itself, which
// a pattern would otherwise often catch.
func (b *Backend) find(match func(procfs.Process) bool) ([]procfs.Process, error) {
	all, err := procfs.List(b.root)
	if err != nil {
		return nil, err
	}
	self := os.Getpid()
	var out []procfs.Process
	for _, pr := range all {
		if pr.PID != self && match(pr) {
			out = append(out, pr)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

func count(ps []procfs.Process, what string, p api.Params) (*backends.Result, error) {
	min, _ := strconv.Atoi(p["min"])
	pids := make([]int, len(ps))
	for i, pr := range ps {
		pids[i] = pr.PID
	}
	facts := map[string]any{"count": len(ps), "pids": pids, "min": min, "match": what}
	ok := len(ps) >= min
	want := fmt.Sprintf("at least %d", min)
	if p["max"] != "" {
		max, _ := strconv.Atoi(p["max"])
		facts["max"] = max
		ok = ok && len(ps) <= max
		want = fmt.Sprintf("%d to %d", min, max)
	}
	facts["ok"] = ok
	res := &backends.Result{Output: fmt.Sprintf("%d processes match %s", len(ps), what), Facts: facts}
	if !ok {
		return res, fmt.Errorf("%d processes match %s, want %s: %w", len(ps), what, want, ErrOutOfRange)
	}
	return res, nil
}

func (b *Backend) top(ctx context.Context, by, interval string, limit int) (*backends.Result, error) {
	first, err := procfs.List(b.root)
	if err != nil {
		return nil, err
	}
	if by == "memory" {
		sort.SliceStable(first, func(i, j int) bool { return first[i].RSSBytes > first[j].RSSBytes })
		return report("top by memory (RSS)", first, limit, map[string]any{"by": by}), nil
	}
	d, _ := time.ParseDuration(interval)
	if d <= 0 || d > MaxInterval {
		return nil, fmt.Errorf("interval %s: want more than 0 and at most %s", interval, MaxInterval)
	}
	// CPU use is the CPU time a process spent over the interval: two
	// readings of /proc, d apart.
	start := time.Now()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("top: %w", context.Cause(ctx))
	case <-time.After(d):
	}
	second, err := procfs.List(b.root)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start).Seconds()
	before := map[int]procfs.Process{}
	for _, pr := range first {
		before[pr.PID] = pr
	}
	pct := map[int]float64{}
	for _, pr := range second {
		prev, ok := before[pr.PID]
		// A pid reused by a new process within the interval starts from 0.
		if !ok || prev.StartTicks != pr.StartTicks {
			prev.CPUTicks = 0
		}
		pct[pr.PID] = float64(pr.CPUTicks-min(prev.CPUTicks, pr.CPUTicks)) / procfs.ClockTicks / elapsed * 100
	}
	sort.SliceStable(second, func(i, j int) bool { return pct[second[i].PID] > pct[second[j].PID] })
	res := report(fmt.Sprintf("top by CPU over %s", d), second, limit, map[string]any{"by": by, "interval_seconds": elapsed})
	for _, f := range res.Facts["processes"].([]any) {
		m := f.(map[string]any)
		m["cpu_pct"] = float64(int64(pct[m["pid"].(int)]*10+0.5)) / 10
	}
	return res, nil
}

func (b *Backend) signal(p api.Params, check bool) (*backends.Result, error) {
	sig := Signals[p["signal"]]
	var targets []procfs.Process
	switch pidStr, name := p["pid"], p["name"]; {
	case pidStr != "" && name != "":
		return nil, errors.New("give pid or name, not both")
	case pidStr != "":
		pid, _ := strconv.Atoi(pidStr)
		pr, err := procfs.Read(b.root, pid)
		if err != nil {
			return nil, fmt.Errorf("no process %d: %w", pid, err)
		}
		targets = []procfs.Process{pr}
	case name != "":
		var err error
		if targets, err = b.find(func(pr procfs.Process) bool { return pr.Matches(name) }); err != nil {
			return nil, err
		}
		if len(targets) == 0 {
			return nil, fmt.Errorf("no process called %s", name)
		}
	default:
		return nil, errors.New("give pid or name")
	}
	pids := make([]int, len(targets))
	for i, pr := range targets {
		// init and the agent itself are never signalled: either would
		// take the node out of reach. A thread's id signals its whole
		// process, so a thread of either is refused too.
		if pr.PID == 1 || pr.PID == os.Getpid() || pr.Tgid == 1 || pr.Tgid == os.Getpid() {
			return nil, fmt.Errorf("refusing to signal pid %d (%s)", pr.PID, pr.Name)
		}
		pids[i] = pr.PID
	}
	facts := map[string]any{"pids": pids, "signal": "SIG" + p["signal"]}
	if check {
		return &backends.Result{Output: fmt.Sprintf("check mode: would send SIG%s to %v", p["signal"], pids), Changed: true, Facts: facts}, nil
	}
	var sent []int
	var errs []error
	for _, pid := range pids {
		if err := kill(pid, sig); err != nil {
			// One that exited meanwhile needs no signal.
			if !errors.Is(err, errGone) {
				errs = append(errs, fmt.Errorf("kill %d: %w", pid, err))
			}
			continue
		}
		sent = append(sent, pid)
	}
	facts["sent"] = sent
	res := &backends.Result{Output: fmt.Sprintf("sent SIG%s to %v", p["signal"], sent), Changed: len(sent) > 0, Facts: facts}
	return res, errors.Join(errs...)
}
