package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// readmePath is the README, from the cli package's directory (its paths,
// of job files, are relative to the repository's root, its directory);
// readmeFile names it in messages.
const (
	readmePath = "../README.md"
	readmeFile = "README.md"
)

// mdBlock is one fenced block of a Markdown file.
type mdBlock struct {
	lang string
	// line is the file's line number of the block's first line of content.
	line int
	// section is the title of the "## " section the block is in.
	section string
	lines   []string
}

// readmeBlocks returns the fenced blocks of README.md.
func readmeBlocks(t *testing.T) []mdBlock {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	var (
		blocks  []mdBlock
		cur     *mdBlock
		section string
	)
	for i, l := range strings.Split(string(data), "\n") {
		switch {
		case cur != nil && strings.TrimSpace(l) == "```":
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		case strings.HasPrefix(l, "```"):
			cur = &mdBlock{lang: strings.TrimSpace(strings.TrimPrefix(l, "```")), line: i + 2, section: section}
		case strings.HasPrefix(l, "## "):
			section = strings.TrimSpace(strings.TrimPrefix(l, "## "))
		}
	}
	if cur != nil {
		t.Fatalf("%s:%d: a fenced block is never closed", readmeFile, cur.line-1)
	}
	return blocks
}

// shWord is a word of a shell command line. lit is how many bytes of s
// precede its first quote (len(s) when nothing is quoted): a quoted word
// has no alternatives, and is an assignment only by its unquoted start.
type shWord struct {
	s   string
	lit int
}

func (w shWord) quoted() bool { return w.lit < len(w.s) }

// shCommand is one simple command of a README shell block.
type shCommand struct {
	line  int
	words []shWord
}

// text is the command as a line, for messages.
func (c shCommand) text() string {
	var ws []string
	for _, w := range c.words {
		ws = append(ws, w.s)
	}
	return strings.Join(ws, " ")
}

// shellCommands splits a shell block into simple commands: lines ending in
// "\" are joined with the next, "# comments" dropped, and command lines
// split at "&&", ";" and a trailing "&" (a background job). Leading
// VAR=value assignments are dropped. Pipes are not split: the README
// writes alternatives as "pause|resume|delete", which grid commands expand.
func shellCommands(b mdBlock) ([]shCommand, error) {
	var out []shCommand
	for i := 0; i < len(b.lines); i++ {
		line, start := b.lines[i], b.line+i
		for strings.HasSuffix(strings.TrimRight(line, " \t"), `\`) && i+1 < len(b.lines) {
			line = strings.TrimSuffix(strings.TrimRight(line, " \t"), `\`) + " " + b.lines[i+1]
			i++
		}
		segs, err := splitShell(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", readmeFile, start, err)
		}
		for _, words := range segs {
			for len(words) > 0 && isAssignment(words[0].s[:words[0].lit]) {
				words = words[1:]
			}
			if len(words) > 0 {
				out = append(out, shCommand{line: start, words: words})
			}
		}
	}
	return out, nil
}

var assignmentRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

func isAssignment(s string) bool { return assignmentRE.MatchString(s) }

// splitShell splits one logical shell line into the words of its simple
// commands, honouring single and double quotes and backslashes.
func splitShell(line string) ([][]shWord, error) {
	var (
		segs    [][]shWord
		words   []shWord
		cur     strings.Builder
		inWord  bool
		lit     = -1
		endWord = func() {
			if inWord {
				w := shWord{s: cur.String(), lit: lit}
				if lit < 0 {
					w.lit = len(w.s)
				}
				words = append(words, w)
			}
			cur.Reset()
			inWord, lit = false, -1
		}
		quote = func() {
			if lit < 0 {
				lit = cur.Len()
			}
		}
		endSeg = func() {
			endWord()
			if len(words) > 0 {
				segs = append(segs, words)
			}
			words = nil
		}
	)
	r := []rune(line)
	for i := 0; i < len(r); i++ {
		c := r[i]
		switch {
		case c == ' ' || c == '\t':
			endWord()
		case c == '#' && !inWord:
			i = len(r)
		case c == '\'':
			quote()
			j := i + 1
			for j < len(r) && r[j] != '\'' {
				j++
			}
			if j == len(r) {
				return nil, fmt.Errorf("unterminated ' in %q", line)
			}
			cur.WriteString(string(r[i+1 : j]))
			inWord, i = true, j
		case c == '"':
			quote()
			j := i + 1
			for ; j < len(r) && r[j] != '"'; j++ {
				if r[j] == '\\' && j+1 < len(r) {
					j++
				}
				cur.WriteRune(r[j])
			}
			if j == len(r) {
				return nil, fmt.Errorf("unterminated \" in %q", line)
			}
			inWord, i = true, j
		case c == '\\' && i+1 < len(r):
			quote()
			i++
			cur.WriteRune(r[i])
			inWord = true
		case c == ';':
			endSeg()
		case c == '&':
			// "&&" ends a command as "&" (a background job) does.
			if i+1 < len(r) && r[i+1] == '&' {
				i++
			}
			endSeg()
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	endSeg()
	return segs, nil
}

// gridArgs reports whether a command runs grid (grid, ./bin/grid,
// bin/grid) and returns its argument lists: one per alternative when a
// word is written "a|b|c".
func (c shCommand) gridArgs() ([][]string, bool) {
	switch c.words[0].s {
	case "grid", "./bin/grid", "bin/grid":
	default:
		return nil, false
	}
	lists := [][]string{nil}
	words := c.words[1:]
	// An output redirection (grid audit export > file) is the shell's, not
	// the command's.
	for i, w := range words {
		if !w.quoted() && (w.s == ">" || w.s == ">>") {
			words = words[:i]
			break
		}
	}
	for _, w := range words {
		alts := []string{w.s}
		if !w.quoted() && strings.Contains(w.s, "|") {
			alts = strings.Split(w.s, "|")
		}
		var next [][]string
		for _, l := range lists {
			for _, a := range alts {
				next = append(next, append(append([]string(nil), l...), a))
			}
		}
		lists = next
	}
	return lists, true
}

// readmeGridCommand is one grid command line of the README.
type readmeGridCommand struct {
	line int
	text string
	args []string // without the program name
}

func (c readmeGridCommand) String() string {
	return fmt.Sprintf("%s:%d: grid %s", readmeFile, c.line, strings.Join(c.args, " "))
}

// readmeGridCommands returns the grid commands of the README's sh blocks
// (of one section when section is not empty), in order.
func readmeGridCommands(t *testing.T, section string) []readmeGridCommand {
	t.Helper()
	var out []readmeGridCommand
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" || (section != "" && b.section != section) {
			continue
		}
		cmds, err := shellCommands(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			lists, ok := c.gridArgs()
			if !ok {
				continue
			}
			for _, args := range lists {
				out = append(out, readmeGridCommand{line: c.line, text: c.text(), args: args})
			}
		}
	}
	return out
}

// builtinCatalog offers every action of every built-in backend, dangerous
// ones included, and exec with one program ("inventory", as in the
// README's agent.yaml).
func builtinCatalog(t *testing.T) *api.Catalog {
	t.Helper()
	reg, err := builtin.New(builtin.Options{Sandbox: t.TempDir(),
		Programs: map[string]builtin.ProgramSpec{"inventory": {Path: "/usr/local/libexec/inventory"}}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := backends.ParseAllowlist([]string{"*"})
	if err != nil {
		t.Fatal(err)
	}
	reg.SetAllowlist(all)
	return &api.Catalog{Backends: api.MergeSchemas(reg.Schemas())}
}

// validateJobAt checks a job against the catalog; an error names the
// README line of the task at fault when it can be found in lines (the
// block's, from line first).
func validateJobAt(cat *api.Catalog, spec *api.JobSpec, lines []string, first int) error {
	j := spec.Job()
	from := 0
	for _, s := range api.Flatten(j.Tasks) {
		// The task's line: the next one naming its action.
		at := first
		for i := from; i < len(lines); i++ {
			if regexp.MustCompile(`\baction:\s*"?` + regexp.QuoteMeta(s.Task.Action) + `\b`).MatchString(lines[i]) {
				at, from = first+i, i+1
				break
			}
		}
		if err := cat.ValidateTask(s.Path, s.Task, j.CheckMode); err != nil {
			return fmt.Errorf("%s:%d: %w", readmeFile, at, err)
		}
	}
	return nil
}

// Every YAML block of the README that is a job (it has tasks) parses as a
// job file and each of its tasks is an action of a built-in backend with
// valid params. A block that names its file in its first line ("#
// examples/jobs/x.yaml") is that file's job.
func TestReadmeJobsAreValid(t *testing.T) {
	cat := builtinCatalog(t)
	var jobs int
	for _, b := range readmeBlocks(t) {
		if b.lang != "yaml" {
			continue
		}
		text := strings.Join(b.lines, "\n")
		var top map[string]any
		if err := yaml.Unmarshal([]byte(text), &top); err != nil {
			t.Errorf("%s:%d: YAML block does not parse: %v", readmeFile, b.line, err)
			continue
		}
		if _, ok := top["tasks"]; !ok {
			continue
		}
		jobs++
		spec, err := api.ParseJobSpec([]byte(text))
		if err != nil {
			t.Errorf("%s:%d: job does not parse: %v", readmeFile, b.line, err)
			continue
		}
		if err := validateJobAt(cat, spec, b.lines, b.line); err != nil {
			t.Errorf("%v (checked against the actions of every built-in backend)", err)
		}
		if name, ok := strings.CutPrefix(strings.TrimSpace(b.lines[0]), "# "); ok && strings.HasPrefix(name, "examples/") {
			data, err := os.ReadFile(filepath.Join(filepath.Dir(readmePath), name))
			if err != nil {
				t.Errorf("%s:%d: the block names %s: %v", readmeFile, b.line, name, err)
				continue
			}
			fileSpec, err := api.ParseJobSpec(data)
			if err != nil || !reflect.DeepEqual(fileSpec, spec) {
				t.Errorf("%s:%d: the block is not the job of %s (%v)", readmeFile, b.line, name, err)
			}
		}
	}
	if jobs < 2 {
		t.Errorf("found %d jobs in the README's YAML blocks; the extraction is broken", jobs)
	}
}

// jobCapture reads back what the README's job-making commands (job run,
// schedule create and update) made on a real dev fleet: the jobs and
// schedule jobs that are new or changed since the last take.
type jobCapture struct {
	cl     *api.Client
	jobs   map[string]bool
	scheds map[string]string // name → its spec, as JSON
}

// newJobCapture starts a dev fleet (grid dev's agents: apt and systemd in
// check mode, file in a sandbox) and points the client commands at it.
func newJobCapture(t *testing.T) *jobCapture {
	t.Helper()
	f := fleettest.Start(t, fleet.Options{Agents: 3, Agent: fleet.DevAgent})
	t.Setenv("GRID_ADDR", f.APIURL())
	t.Setenv("GRID_TOKEN", f.AdminToken())
	t.Setenv("GRID_CACERT", f.CAFile())
	c := &jobCapture{cl: f.Client(), jobs: map[string]bool{}, scheds: map[string]string{}}
	c.take(t)
	return c
}

func (c *jobCapture) take(t *testing.T) []*api.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs, err := c.cl.ListJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []*api.Job
	for _, j := range jobs {
		if !c.jobs[j.ID] {
			c.jobs[j.ID] = true
			full, err := c.cl.GetJob(ctx, j.ID)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, full)
		}
	}
	scheds, err := c.cl.ListSchedules(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sc := range scheds {
		b, _ := json.Marshal(sc.ScheduleSpec)
		if c.scheds[sc.Name] != string(b) {
			c.scheds[sc.Name] = string(b)
			out = append(out, sc.Job.Job())
		}
	}
	return out
}

// checkGridCommand checks one README command line: it names a command,
// its flags parse and its arguments fit. The commands that parse their own
// arguments (job run, schedule create and update) run against capture's
// dev fleet, whose controller checks them against its agents' schemas, and
// the job each made must also be one of built-in actions (cat).
func checkGridCommand(t *testing.T, c readmeGridCommand, capture *jobCapture, cat *api.Catalog) error {
	t.Helper()
	root := NewRootCommand("test", io.Discard, io.Discard)
	cmd, rest, err := root.Find(c.args)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("names no grid command")
	}
	if cmd.HasSubCommands() {
		if len(rest) > 0 {
			return fmt.Errorf("%q has no command %q", cmd.CommandPath(), rest[0])
		}
		return fmt.Errorf("%q needs a command", cmd.CommandPath())
	}
	if !cmd.DisableFlagParsing {
		if err := cmd.ParseFlags(rest); err != nil {
			return err
		}
		if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
			return err
		}
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return err
		}
		if err := cmd.ValidateFlagGroups(); err != nil {
			return err
		}
		if cmd.PreRunE != nil {
			return cmd.PreRunE(cmd, cmd.Flags().Args())
		}
		return nil
	}
	// job run and schedule create|update: their job spec is built from
	// their arguments and submitted.
	code, out, errOut := runCLI(t, c.args...)
	jobs := capture.take(t)
	if code != ExitOK {
		return fmt.Errorf("exit code %d: %s%s", code, out, errOut)
	}
	if len(jobs) != 1 {
		return fmt.Errorf("submitted %d jobs, want 1", len(jobs))
	}
	if err := cat.ValidateJob(jobs[0]); err != nil {
		return fmt.Errorf("the job it submits: %w (checked against the actions of every built-in backend)", err)
	}
	return nil
}

// Every grid command in the README's sh blocks exists with the flags and
// arguments it is given; those that submit a job submit one of built-in
// actions, and the job files they name (-f) exist in the repository.
func TestReadmeCommandsParse(t *testing.T) {
	cat := builtinCatalog(t)
	cmds := readmeGridCommands(t, "")
	if len(cmds) < 20 {
		t.Fatalf("found %d grid commands in the README; the extraction is broken", len(cmds))
	}
	capture := newJobCapture(t)
	// The README's paths are relative to the repository's root.
	t.Chdir(filepath.Dir(readmePath))
	for _, c := range cmds {
		if err := checkGridCommand(t, c, capture, cat); err != nil {
			t.Errorf("%v\n\t%v", c, err)
		}
	}
}

// The extraction itself: continuations, comments, &&, assignments, a
// background &, quotes and alternatives.
func TestReadmeShellSplitting(t *testing.T) {
	b := mdBlock{lang: "sh", line: 10, lines: []string{
		`make fleet-up && . .fleet/fleet.env && grid node list   # then look`,
		`A=1 B="x y" grid controller \`,
		`  --name ctl-1 # the first`,
		`grid dev &`,
		`grid schedule pause|resume nightly --note 'a|b # c'`,
		`grid audit export --since 24h > 'audit.jsonl'`,
		`# grid not-a-command`,
	}}
	cmds, err := shellCommands(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range cmds {
		lists, ok := c.gridArgs()
		if !ok {
			continue
		}
		for _, args := range lists {
			got = append(got, fmt.Sprintf("%d:%q", c.line, args))
		}
	}
	want := []string{
		`10:["node" "list"]`,
		`11:["controller" "--name" "ctl-1"]`,
		`13:["dev"]`,
		`14:["schedule" "pause" "nightly" "--note" "a|b # c"]`,
		`14:["schedule" "resume" "nightly" "--note" "a|b # c"]`,
		`15:["audit" "export" "--since" "24h"]`,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := splitShell(`grid 'open`); err == nil {
		t.Error("an unterminated quote is not an error")
	}
}

// A command the README must not show is refused: the check is not
// vacuous.
func TestReadmeCheckRefusesWrongCommands(t *testing.T) {
	cat := builtinCatalog(t)
	capture := newJobCapture(t)
	t.Chdir(filepath.Dir(readmePath))
	for _, args := range [][]string{
		{"nodes", "list"},
		{"node", "lst"},
		{"node", "list", "--bogus"},
		{"job", "status"},
		{"controller", "--token", "x"},
		{"job", "run", "--target", "all", "net", "http_check", "--url", "http://localhost/"},
		{"job", "run", "--target", "all", "ping", "echo", "--mesage", "hi"},
		{"job", "run", "-f", "update.yaml"},
		{"schedule", "create", "n", "--cron", "@daily", "--target", "all", "systemd", "is-active", "--unit", "x"},
	} {
		c := readmeGridCommand{line: 1, args: args}
		if err := checkGridCommand(t, c, capture, cat); err == nil {
			t.Errorf("%v: accepted", c)
		}
	}
	if err := checkGridCommand(t, readmeGridCommand{line: 1, args: []string{"job", "run", "--target", "all", "ping", "echo", "--message", "hi"}}, capture, cat); err != nil {
		t.Errorf("a good command is refused: %v", err)
	}
	for _, span := range []string{"nodes", "node lst", "job list --bogus N", "job run -z", "node list --pending --cursr C"} {
		for _, args := range inlineAlternatives(strings.Fields(span)) {
			if err := checkInlineCommand(args); err == nil {
				t.Errorf("inline `grid %s`: accepted", span)
			}
		}
	}
	alts := inlineAlternatives(strings.Fields("job dlq list|replay JOB|drop JOB"))
	if want := [][]string{{"job", "dlq", "list"}, {"job", "dlq", "replay", "JOB"}, {"job", "dlq", "drop", "JOB"}}; !reflect.DeepEqual(alts, want) {
		t.Errorf("alternatives %q, want %q", alts, want)
	}
	for _, args := range append(alts, []string{"job", "run", "--max-concurrency/--max-errors", "-f", "FILE", "[--PARAM", "VALUE]…"}) {
		if err := checkInlineCommand(args); err != nil {
			t.Errorf("inline %q: %v", args, err)
		}
	}
	var ve *api.ValidationError
	spec := &api.JobSpec{Target: api.Target{Scope: api.ScopeAll}, Tasks: []api.Phase{{Backend: "ping", Action: "echo"}, {Backend: "net", Action: "http_check"}}}
	err := validateJobAt(cat, spec, []string{"tasks:", "  - {backend: ping, action: echo}", "  - {backend: net, action: http_check}"}, 20)
	if !errors.As(err, &ve) || !strings.HasPrefix(err.Error(), readmeFile+":22: ") {
		t.Errorf("the error of a bad task does not name its line: %v", err)
	}
}

// readmeQuickStart is the README's quick start: its grid dev command, the
// names its export line sets (as grid dev prints it), and the client
// commands run after it, in order.
type readmeQuickStart struct {
	dev        readmeGridCommand
	exportVars []string
	clients    []readmeGridCommand
}

const quickStartSection = "Quick start"

func quickStartFromReadme(t *testing.T) readmeQuickStart {
	t.Helper()
	var qs readmeQuickStart
	for _, b := range readmeBlocks(t) {
		if b.lang != "sh" || b.section != quickStartSection {
			continue
		}
		cmds, err := shellCommands(b)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			if c.words[0].s == "export" {
				for _, w := range c.words[1:] {
					if name, _, ok := strings.Cut(w.s[:w.lit], "="); ok {
						qs.exportVars = append(qs.exportVars, name)
					}
				}
			}
		}
	}
	for _, c := range readmeGridCommands(t, quickStartSection) {
		switch {
		case c.args[0] == "dev" && qs.dev.args == nil:
			qs.dev = c
		case qs.dev.args == nil:
			t.Fatalf("%v: the quick start runs a client command before grid dev", c)
		default:
			qs.clients = append(qs.clients, c)
		}
	}
	if qs.dev.args == nil || len(qs.clients) == 0 {
		t.Fatalf("%s: no grid dev and client commands found in the quick start", readmeFile)
	}
	return qs
}

// readmeProse is the README without its fenced blocks (their lines left
// empty, so offsets keep their line numbers).
func readmeProse(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	in := false
	for i, l := range lines {
		fence := strings.HasPrefix(l, "```") || (in && strings.TrimSpace(l) == "```")
		if in || fence {
			lines[i] = ""
		}
		if fence {
			in = !in
		}
	}
	return strings.Join(lines, "\n")
}

var inlineGridRE = regexp.MustCompile("`(grid\\s+[a-z][^`]*)`")

// The grid commands the README's text and tables name in `code` (`grid
// node list --pending`, `grid job dlq list|replay JOB|drop JOB`) exist,
// with the flags they are written with; upper-case words are
// placeholders.
func TestReadmeInlineCommandsExist(t *testing.T) {
	prose := readmeProse(t)
	spans := inlineGridRE.FindAllStringSubmatchIndex(prose, -1)
	if len(spans) < 20 {
		t.Fatalf("found %d inline grid commands in the README; the extraction is broken", len(spans))
	}
	for _, m := range spans {
		line := strings.Count(prose[:m[0]], "\n") + 1
		span := strings.ReplaceAll(prose[m[2]:m[3]], `\|`, "|")
		for _, args := range inlineAlternatives(strings.Fields(span)[1:]) {
			if err := checkInlineCommand(args); err != nil {
				t.Errorf("%s:%d: `%s`: %v", readmeFile, line, span, err)
			}
		}
	}
}

// inlineAlternatives expands "a|b X|c X" written among a command's words
// (before any flag) into one word list per alternative.
func inlineAlternatives(words []string) [][]string {
	for i, w := range words {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") {
			break
		}
		if strings.Contains(w, "|") {
			var out [][]string
			for _, alt := range strings.Split(strings.Join(words[i:], " "), "|") {
				out = append(out, append(slices.Clone(words[:i]), strings.Fields(alt)...))
			}
			return out
		}
	}
	return [][]string{words}
}

// checkInlineCommand checks that the command the words name exists and
// has every flag they name.
func checkInlineCommand(words []string) error {
	root := NewRootCommand("test", io.Discard, io.Discard)
	var path, flags []string
	for _, w := range words {
		w = strings.Trim(w, "[]…,")
		if strings.HasPrefix(w, "-") {
			flags = append(flags, strings.Split(w, "/")...)
			continue
		}
		if len(flags) == 0 {
			path = append(path, w)
		}
	}
	cmd, rest, err := root.Find(path)
	if err != nil {
		return err
	}
	if cmd == root {
		return fmt.Errorf("names no grid command")
	}
	if cmd.HasSubCommands() && len(rest) > 0 {
		return fmt.Errorf("%q has no command %q", cmd.CommandPath(), rest[0])
	}
	cmd.InitDefaultHelpFlag()
	for _, f := range flags {
		name, _, _ := strings.Cut(strings.TrimLeft(f, "-"), "=")
		switch {
		case name == "" || strings.ToLower(name) != name:
			// A placeholder (--PARAM).
		case strings.HasPrefix(f, "--"):
			if cmd.Flag(name) == nil {
				return fmt.Errorf("%q has no flag --%s", cmd.CommandPath(), name)
			}
		case len(name) == 1:
			if cmd.Flags().ShorthandLookup(name) == nil && cmd.InheritedFlags().ShorthandLookup(name) == nil {
				return fmt.Errorf("%q has no flag -%s", cmd.CommandPath(), name)
			}
		default:
			return fmt.Errorf("flag %q: want --name or -n", f)
		}
	}
	return nil
}

// The README's health gates run: each health.http task of its jobs, with
// its own params, passes against a server that answers as the task
// expects and fails, after its retries, against one that does not. Only
// the URL's host:port is moved to the test's server (and retry_delay
// shortened for the failing run), since nothing listens on the address a
// README example names.
func TestReadmeHealthGatesRun(t *testing.T) {
	reg, err := builtin.New(builtin.Options{Sandbox: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var ran int
	for _, b := range readmeBlocks(t) {
		if b.lang != "yaml" {
			continue
		}
		spec, err := api.ParseJobSpec([]byte(strings.Join(b.lines, "\n")))
		if err != nil || len(spec.Tasks) == 0 {
			continue
		}
		for _, s := range api.Flatten(spec.Job().Tasks) {
			if s.Task.Backend != "health" || s.Task.Action != "http" {
				continue
			}
			ran++
			u, err := url.Parse(s.Task.Params["url"])
			if err != nil {
				t.Fatalf("%s:%d: url: %v", readmeFile, b.line, err)
			}
			want, _ := strconv.Atoi(s.Task.Params["status"])
			if want == 0 {
				want = http.StatusOK
			}
			for _, healthy := range []bool{true, false} {
				var hits atomic.Int32
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					hits.Add(1)
					if !healthy || r.URL.Path != u.Path {
						w.WriteHeader(http.StatusServiceUnavailable)
						return
					}
					w.WriteHeader(want)
				}))
				p := maps.Clone(s.Task.Params)
				moved := *u
				moved.Host = strings.TrimPrefix(srv.URL, "http://")
				p["url"] = moved.String()
				if !healthy {
					p["retry_delay"] = "1ms"
				}
				res, err := reg.Run(context.Background(), "health", &backends.Request{Action: "http", Params: p})
				srv.Close()
				retries, _ := strconv.Atoi(p["retries"])
				switch {
				case healthy && err != nil:
					t.Errorf("%s:%d: health.http against a healthy server: %v", readmeFile, b.line, err)
				case !healthy && err == nil:
					t.Errorf("%s:%d: health.http against a failing server passed", readmeFile, b.line)
				case !healthy && int(hits.Load()) != retries+1:
					t.Errorf("%s:%d: %d requests to a failing server, want %d (retries %d): %v", readmeFile, b.line, hits.Load(), retries+1, retries, res.Facts)
				}
			}
		}
	}
	if ran == 0 {
		t.Errorf("the README's jobs have no health.http gate")
	}
}

// The README's table of read-only actions ("Looking at a host") has a row
// for every action of the backends that look at a host, and names no
// action that does not exist.
func TestReadmeLookTable(t *testing.T) {
	data, err := os.ReadFile(readmePath)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n### Looking at a host\n")
	if !ok {
		t.Fatalf("%s has no section \"Looking at a host\"", readmeFile)
	}
	section, _, _ := strings.Cut(rest, "\n#")
	rows := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z]+\\.[a-z_]+)` \\|").FindAllStringSubmatch(section, -1) {
		rows[m[1]] = true
	}
	cat := builtinCatalog(t)
	want := map[string]bool{}
	for _, b := range cat.Backends {
		for _, a := range b.Actions {
			name := b.Name + "." + a.Name
			switch b.Name {
			case "health", "cert", "proc", "dns", "journald":
				want[name] = true
			}
			if rows[name] {
				delete(rows, name)
				delete(want, name)
			}
		}
	}
	for name := range want {
		t.Errorf("%s: the table of \"Looking at a host\" has no row for %s", readmeFile, name)
	}
	for name := range rows {
		t.Errorf("%s: the table of \"Looking at a host\" names %s, which no built-in backend offers", readmeFile, name)
	}
}
