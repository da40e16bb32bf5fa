// Package journald is the journald backend: read a node's systemd journal
// — entries of a unit, boots, disk usage — by running journalctl with an
// argument vector (never a shell) and reading its JSON output
// (`journalctl -o json`), one entry per line. Everything is read-only.
package journald

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
	"github.com/gridfleet/terraform-provider-grid/backends/systemd"
)

// Patterns of the params. A time is what journalctl's --since takes: a
// date and time, a relative "-1h", or "today"; it is passed as one
// --since=VALUE argument, so a leading dash is harmless.
const (
	TimePattern = `^[0-9A-Za-z][0-9A-Za-z :.+-]{0,39}$|^-[0-9]{1,6}[a-z]{1,7}$`
	BootPattern = `^(-?[0-9]{1,4}|[0-9a-f]{32})$`
)

// MaxLineBytes is the longest journal line (one JSON entry) read.
const MaxLineBytes = 1 << 20

// Priorities are the syslog levels, in order.
var Priorities = []string{"emerg", "alert", "crit", "err", "warning", "notice", "info", "debug"}

// Options configure the backend.
type Options struct {
	// JournalctlPath is the journalctl binary; default "journalctl" from
	// PATH.
	JournalctlPath string
}

// Backend is the journald backend.
type Backend struct {
	journalctl string
}

// New returns the journald backend.
func New(opts Options) *Backend {
	if opts.JournalctlPath == "" {
		opts.JournalctlPath = "journalctl"
	}
	return &Backend{journalctl: opts.JournalctlPath}
}

// Schema declares logs, boots and disk_usage.
func (*Backend) Schema() api.BackendSchema {
	q := func(name, desc string, params ...api.ParamSchema) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
	}
	return api.BackendSchema{
		Name:        "journald",
		Description: "Read the systemd journal with journalctl -o json: a unit's logs, boots, disk usage.",
		Actions: []api.ActionSchema{
			q("logs", "The last entries of the journal (of a unit, a time range, a priority, matching a pattern).",
				api.ParamSchema{Name: "unit", Type: api.TypeString, Pattern: systemd.UnitPattern, Description: "Only this unit's entries."},
				api.ParamSchema{Name: "since", Type: api.TypeString, Pattern: TimePattern, Description: "Entries from this time: \"2026-01-02 15:04:05\", \"-1h\", \"today\"."},
				api.ParamSchema{Name: "until", Type: api.TypeString, Pattern: TimePattern, Description: "Entries up to this time, as since."},
				api.ParamSchema{Name: "priority", Type: api.TypeString, Enum: Priorities, Description: "Only entries of this priority or more urgent."},
				api.ParamSchema{Name: "boot", Type: api.TypeString, Pattern: BootPattern, Description: "Only this boot: 0 the current, -1 the one before, or a boot id."},
				api.ParamSchema{Name: "grep", Type: api.TypeString, Description: "Regular expression (RE2) the message must match."},
				api.ParamSchema{Name: "lines", Type: api.TypeInt, Default: "100", Pattern: `^([1-9][0-9]{0,3}|10000)$`, Description: "Most entries returned (the last ones), 1-10000."},
				api.ParamSchema{Name: "max_output_bytes", Type: api.TypeInt, Default: "32768", Pattern: `^[0-9]{1,7}$`, Description: "Most bytes of output, and of entries in facts, each; the last entries that fit are kept. Keep it under the agent's max_output_bytes."}),
			q("boots", "The boots the journal holds: index, id, first and last entry."),
			q("disk_usage", "Bytes the journal files take."),
		},
	}
}

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("journald: %w", context.Cause(ctx))
	}
	switch req.Action {
	case "logs":
		return b.logs(ctx, req.Params)
	case "boots":
		return b.boots(ctx)
	case "disk_usage":
		return b.diskUsage(ctx)
	}
	return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
}

// Entry is one journal entry.
type Entry struct {
	Time      time.Time
	Priority  int
	Unit, Tag string
	PID       string
	Message   string
	Hostname  string
	BootID    string
}

func (e Entry) line() string {
	who := e.Tag
	if who == "" {
		who = e.Unit
	}
	if e.PID != "" {
		who += "[" + e.PID + "]"
	}
	return fmt.Sprintf("%s %s: %s", e.Time.UTC().Format(time.RFC3339), who, e.Message)
}

func (e Entry) facts() map[string]any {
	prio := ""
	if e.Priority >= 0 && e.Priority < len(Priorities) {
		prio = Priorities[e.Priority]
	}
	return map[string]any{"time": e.Time.UTC().Format(time.RFC3339Nano), "priority": prio, "unit": e.Unit,
		"identifier": e.Tag, "pid": e.PID, "message": e.Message, "boot_id": e.BootID}
}

// parseEntry reads one line of journalctl -o json. Field values are
// strings, or arrays of bytes when they are not valid UTF-8 text.
func parseEntry(line []byte) (Entry, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(line, &raw); err != nil {
		return Entry{}, err
	}
	field := func(k string) string {
		v, ok := raw[k]
		if !ok {
			return ""
		}
		var s string
		if json.Unmarshal(v, &s) == nil {
			return s
		}
		var bs []byte
		var nums []int
		if json.Unmarshal(v, &nums) == nil {
			for _, n := range nums {
				bs = append(bs, byte(n))
			}
			return strings.ToValidUTF8(string(bs), "\uFFFD")
		}
		return ""
	}
	e := Entry{Unit: field("_SYSTEMD_UNIT"), Tag: field("SYSLOG_IDENTIFIER"), PID: field("_PID"),
		Message: field("MESSAGE"), Hostname: field("_HOSTNAME"), BootID: field("_BOOT_ID"), Priority: -1}
	if p, err := strconv.Atoi(field("PRIORITY")); err == nil {
		e.Priority = p
	}
	if us, err := strconv.ParseInt(field("__REALTIME_TIMESTAMP"), 10, 64); err == nil {
		e.Time = time.UnixMicro(us)
	}
	return e, nil
}

func (b *Backend) logs(ctx context.Context, p api.Params) (*backends.Result, error) {
	lines, _ := strconv.Atoi(p["lines"])
	maxBytes, _ := strconv.Atoi(p["max_output_bytes"])
	var re *regexp.Regexp
	if g := p["grep"]; g != "" {
		var err error
		if re, err = regexp.Compile(g); err != nil {
			return nil, fmt.Errorf("grep: %w", err)
		}
	}
	args := []string{"--output=json", "--no-pager", "--quiet"}
	for _, k := range []string{"unit", "since", "until", "priority", "boot"} {
		if v := p[k]; v != "" {
			args = append(args, "--"+k+"="+v)
		}
	}
	// Without a pattern journalctl keeps the last entries itself; with
	// one, every entry of the range is read and the last matches kept.
	if re == nil {
		args = append(args, "--lines="+strconv.Itoa(lines))
	}
	var kept []Entry
	total := 0
	err := b.stream(ctx, args, func(line []byte) error {
		e, err := parseEntry(line)
		if err != nil {
			return fmt.Errorf("journalctl output: %w", err)
		}
		if re != nil && !re.MatchString(e.Message) {
			return nil
		}
		total++
		kept = append(kept, e)
		if len(kept) > lines {
			kept = kept[1:]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// The last entries that fit in max_output_bytes, as output lines and
	// as facts each: the agent drops facts larger than its own cap.
	outSize, factSize, first := 0, 0, len(kept)
	for first > 0 {
		e := kept[first-1]
		fb, _ := json.Marshal(e.facts())
		n, m := len(e.line())+1, len(fb)+1
		if outSize+n > maxBytes || factSize+m > maxBytes {
			break
		}
		outSize, factSize = outSize+n, factSize+m
		first--
	}
	truncated := first > 0 || total > len(kept)
	kept = kept[first:]
	out := make([]string, len(kept))
	entries := make([]any, len(kept))
	for i, e := range kept {
		out[i] = e.line()
		entries[i] = e.facts()
	}
	facts := map[string]any{"entries": entries, "count": len(kept), "matched": total, "truncated": truncated}
	return &backends.Result{Output: strings.Join(out, "\n"), Facts: facts}, nil
}

// stream runs journalctl and hands each line of its standard output to
// each, as it comes: output can be far larger than what is kept.
func (b *Backend) stream(ctx context.Context, args []string, each func([]byte) error) error {
	cmd := exec.CommandContext(ctx, b.journalctl, args...)
	stderr := proc.NewTail(4 << 10)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return fmt.Errorf("journalctl: %w", err)
	}
	proc.Configure(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run journalctl: %w", err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), MaxLineBytes)
	var perr error
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		if perr = each(sc.Bytes()); perr != nil {
			break
		}
	}
	if perr == nil {
		perr = sc.Err()
	}
	if perr != nil {
		proc.KillGroup(cmd.Process, 0)
	}
	werr := cmd.Wait()
	if ctx.Err() != nil {
		return fmt.Errorf("journalctl: %w", context.Cause(ctx))
	}
	if perr != nil {
		return perr
	}
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		return &proc.ExitError{Path: b.journalctl, ExitCode: ee.ExitCode(), Stderr: stderr.String()}
	}
	if werr != nil {
		return fmt.Errorf("journalctl: %w", werr)
	}
	return nil
}

// Boot is one boot the journal knows.
type Boot struct {
	Index        int    `json:"index"`
	ID           string `json:"boot_id"`
	First, Last  string
	FirstEntryUS int64 `json:"first_entry"`
	LastEntryUS  int64 `json:"last_entry"`
}

func (b *Backend) boots(ctx context.Context) (*backends.Result, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: b.journalctl, Args: []string{"--list-boots", "--output=json", "--no-pager", "--quiet"}})
	if err != nil {
		return nil, fmt.Errorf("journalctl --list-boots: %w", err)
	}
	boots, err := parseBoots(out.Stdout)
	if err != nil {
		return nil, err
	}
	list := make([]any, len(boots))
	lines := make([]string, len(boots))
	for i, bt := range boots {
		list[i] = map[string]any{"index": bt.Index, "boot_id": bt.ID, "first_entry": bt.First, "last_entry": bt.Last}
		lines[i] = fmt.Sprintf("%3d %s %s — %s", bt.Index, bt.ID, bt.First, bt.Last)
	}
	return &backends.Result{Output: strings.Join(lines, "\n"), Facts: map[string]any{"boots": list, "count": len(boots)}}, nil
}

// listBootsText matches a line of --list-boots in text form, from a
// journalctl that ignores --output there (before systemd 251): index, boot
// id, first and last entry, the two times apart by "—" or by spaces.
var listBootsText = regexp.MustCompile(`^\s*(-?\d+)\s+([0-9a-f]{32})\s+(.+?)\s*(?:—|\s)\s*(\w{3} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \S+)\s*$`)

func parseBoots(s string) ([]Boot, error) {
	s = strings.TrimSpace(s)
	var boots []Boot
	if strings.HasPrefix(s, "[") {
		if err := json.Unmarshal([]byte(s), &boots); err != nil {
			return nil, fmt.Errorf("journalctl --list-boots output: %w", err)
		}
		for i := range boots {
			boots[i].First = time.UnixMicro(boots[i].FirstEntryUS).UTC().Format(time.RFC3339)
			boots[i].Last = time.UnixMicro(boots[i].LastEntryUS).UTC().Format(time.RFC3339)
		}
		return boots, nil
	}
	for _, line := range strings.Split(s, "\n") {
		m := listBootsText.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		idx, _ := strconv.Atoi(m[1])
		boots = append(boots, Boot{Index: idx, ID: m[2], First: m[3], Last: m[4]})
	}
	if len(boots) == 0 && s != "" {
		return nil, fmt.Errorf("journalctl --list-boots output not understood: %q", firstLine(s))
	}
	return boots, nil
}

var diskUsageRE = regexp.MustCompile(`take up ([0-9.]+)\s*([KMGTPE]?)(i?B?)?\b`)

func (b *Backend) diskUsage(ctx context.Context) (*backends.Result, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: b.journalctl, Args: []string{"--disk-usage", "--no-pager"}})
	if err != nil {
		return nil, fmt.Errorf("journalctl --disk-usage: %w", err)
	}
	bytes, err := parseDiskUsage(out.Stdout)
	if err != nil {
		return nil, err
	}
	return &backends.Result{Output: strings.TrimSpace(out.Stdout), Facts: map[string]any{"bytes": bytes}}, nil
}

// parseDiskUsage reads "Archived and active journals take up 24.0M in the
// file system." (sizes in powers of 1024, as journalctl formats them).
func parseDiskUsage(s string) (uint64, error) {
	m := diskUsageRE.FindStringSubmatch(s)
	if m == nil {
		return 0, fmt.Errorf("journalctl --disk-usage output not understood: %q", firstLine(s))
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("journalctl --disk-usage: %w", err)
	}
	mult := 1.0
	if m[2] != "" {
		mult = float64(uint64(1) << (10 * (strings.Index("KMGTPE", m[2]) + 1)))
	}
	return uint64(n * mult), nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
