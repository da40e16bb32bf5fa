package api

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// MaxDepth is the deepest a phase tree may go: top-level barrier steps and
// one level of nested per-node pipelines.
const MaxDepth = 2

// MaxRetries bounds max_retries so a typo cannot keep a job alive for hours.
const MaxRetries = 10

// Phase is one node of a job's tree: a leaf (backend/action) or a branch
// (a nested tasks list, run as a per-node pipeline).
type Phase struct {
	Backend    string    `json:"backend,omitempty" yaml:"backend,omitempty"`
	Action     string    `json:"action,omitempty" yaml:"action,omitempty"`
	Params     Params    `json:"params,omitempty" yaml:"params,omitempty"`
	Timeout    string    `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	MaxRetries int       `json:"max_retries,omitempty" yaml:"max_retries,omitempty"`
	Tasks      []Phase   `json:"tasks,omitempty" yaml:"tasks,omitempty"`
	Condition  Condition `json:"condition,omitempty" yaml:"condition,omitempty"`
	// MaxConcurrency and MaxErrors roll a top-level phase (a barrier step
	// or a whole pipeline) out in slots; they override the job's.
	MaxConcurrency *Limit `json:"max_concurrency,omitempty" yaml:"max_concurrency,omitempty"`
	MaxErrors      *Limit `json:"max_errors,omitempty" yaml:"max_errors,omitempty"`
}

// IsLeaf reports whether the phase runs a single backend action.
func (p Phase) IsLeaf() bool { return len(p.Tasks) == 0 }

// IsBranch reports whether the phase is a nested pipeline.
func (p Phase) IsBranch() bool { return len(p.Tasks) > 0 }

// ToTask returns the leaf's task.
func (p Phase) ToTask() Task {
	return Task{Backend: p.Backend, Action: p.Action, Params: p.Params, Timeout: p.Timeout,
		MaxRetries: p.MaxRetries, Condition: p.Condition}
}

// LeafCount is the number of leaf tasks in the phase.
func (p Phase) LeafCount() int {
	if p.IsLeaf() {
		return 1
	}
	return LeafCount(p.Tasks)
}

// LeafCount is the number of leaf tasks in a list of phases: the number of
// flat steps.
func LeafCount(phases []Phase) int {
	n := 0
	for _, p := range phases {
		n += p.LeafCount()
	}
	return n
}

// FlatStep is one leaf with its depth-first flat index.
type FlatStep struct {
	Index int
	Task  Task
	// Path is the attribute path of the leaf in the job ("tasks[1].tasks[0]").
	Path string
}

// Flatten numbers the leaves depth-first, as results are indexed.
func Flatten(phases []Phase) []FlatStep {
	var out []FlatStep
	var walk func(ps []Phase, prefix string)
	walk = func(ps []Phase, prefix string) {
		for i, p := range ps {
			path := fmt.Sprintf("%stasks[%d]", prefix, i)
			if p.IsLeaf() {
				out = append(out, FlatStep{Index: len(out), Task: p.ToTask(), Path: path})
				continue
			}
			walk(p.Tasks, path+".")
		}
	}
	walk(phases, "")
	return out
}

// ValidationError names the field of a job that is wrong.
type ValidationError struct {
	Field string
	Msg   string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// ValidToken reports whether s can stand as one NATS subject token built
// from user input: 1 to 128 of A-Z, a-z, 0-9, _ and -. Every agent checks
// every command's job id with it, so it is a loop over bytes, not a regexp.
func ValidToken(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}

// ValidGroup reports whether s is a dot-separated hierarchical group name
// (web, web.dev, web.dev.us-east).
func ValidGroup(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for _, seg := range strings.Split(s, ".") {
		if !ValidToken(seg) {
			return false
		}
	}
	return true
}

// Validate checks the phase at depth (1 = top level) and names the field at
// fault.
func (p Phase) Validate(depth int) error { return p.validate(depth, "tasks[0]") }

func (p Phase) validate(depth int, path string) error {
	if depth > MaxDepth {
		return invalid(path, "nesting deeper than %d levels (a pipeline cannot contain another pipeline)", MaxDepth)
	}
	if err := validateCondition(p.Condition, path); err != nil {
		return err
	}
	if depth > 1 && (p.MaxConcurrency != nil || p.MaxErrors != nil) {
		return invalid(path, "max_concurrency and max_errors apply to a whole pipeline; set them on the pipeline, not on a step inside it")
	}
	if err := validateLimits(p.MaxConcurrency, p.MaxErrors, path+"."); err != nil {
		return err
	}
	if p.IsBranch() {
		if p.Backend != "" || p.Action != "" || len(p.Params) > 0 || p.Timeout != "" || p.MaxRetries != 0 {
			return invalid(path, "a phase has either backend/action/params/timeout/max_retries or nested tasks, not both")
		}
		return validatePhases(p.Tasks, depth+1, path+".")
	}
	if p.Backend == "" {
		return invalid(path+".backend", "required")
	}
	if !ValidToken(p.Backend) {
		return invalid(path+".backend", "%q is not a valid backend name", p.Backend)
	}
	if p.Action == "" {
		return invalid(path+".action", "required")
	}
	if !ValidToken(p.Action) {
		return invalid(path+".action", "%q is not a valid action name", p.Action)
	}
	if p.Timeout != "" {
		if _, err := ParsePositiveDuration(p.Timeout); err != nil {
			return invalid(path+".timeout", "%v", err)
		}
	}
	if p.MaxRetries < 0 || p.MaxRetries > MaxRetries {
		return invalid(path+".max_retries", "must be between 0 and %d, got %d", MaxRetries, p.MaxRetries)
	}
	for k := range p.Params {
		if !ValidToken(k) {
			return invalid(path+".params", "%q is not a valid parameter name", k)
		}
	}
	return nil
}

func validatePhases(phases []Phase, depth int, prefix string) error {
	if len(phases) == 0 {
		return invalid(strings.TrimSuffix(prefix, ".")+"tasks", "at least one task is required")
	}
	for i, p := range phases {
		if err := p.validate(depth, fmt.Sprintf("%stasks[%d]", prefix, i)); err != nil {
			return err
		}
	}
	return nil
}

func validateCondition(c Condition, path string) error {
	switch c {
	case "", ConditionAlways, ConditionOnSuccess, ConditionOnFailure:
		return nil
	}
	return invalid(path+".condition", "unknown condition %q (want always, on_success or on_failure)", c)
}

// ParsePositiveDuration parses a Go duration that must be above zero.
func ParsePositiveDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration (examples: 30s, 5m, 1h)", s)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	return d, nil
}

// MaxSteps bounds the number of flat steps in one job.
const MaxSteps = 1000

// Validate checks the parts of a job a client supplies: target, strategy,
// timeout and the phase tree. It does not check backends against schemas;
// see Catalog.ValidateJob.
func (j *Job) Validate() error {
	if err := j.validateOverTime(); err != nil {
		return err
	}
	if err := j.Target.Validate(); err != nil {
		return err
	}
	switch j.Strategy {
	case "", StrategyFailFast, StrategyContinue:
	default:
		return invalid("strategy", "unknown strategy %q (want fail-fast or continue)", j.Strategy)
	}
	if j.Timeout != "" {
		if _, err := ParsePositiveDuration(j.Timeout); err != nil {
			return invalid("timeout", "%v", err)
		}
	}
	if err := validateLimits(j.MaxConcurrency, j.MaxErrors, ""); err != nil {
		return err
	}
	if err := validatePhases(j.Tasks, 1, ""); err != nil {
		return err
	}
	if n := LeafCount(j.Tasks); n > MaxSteps {
		return invalid("tasks", "%d steps is more than the limit of %d", n, MaxSteps)
	}
	return nil
}

// Validate checks a target's scope, value and site.
func (t Target) Validate() error {
	switch t.Scope {
	case ScopeAll, ScopeAny:
		if t.Value != "" {
			return invalid("target.value", "must be empty for scope %q", t.Scope)
		}
	case ScopeGroup:
		if !ValidGroup(t.Value) {
			return invalid("target.value", "group %q is not valid: dot-separated segments of letters, digits, '_' and '-'", t.Value)
		}
	case ScopeNode:
		if !ValidToken(t.Value) {
			return invalid("target.value", "node id %q is not valid: letters, digits, '_' and '-'", t.Value)
		}
	case ScopeSite:
		if !ValidToken(t.Value) {
			return invalid("target.value", "site %q is not valid: letters, digits, '_' and '-'", t.Value)
		}
		if t.Site != "" {
			return invalid("target.site", "must be empty for scope site (the value names the site)")
		}
	case "":
		return invalid("target.scope", "required (all, group, node, any or site)")
	default:
		return invalid("target.scope", "unknown scope %q (want all, group, node, any or site)", t.Scope)
	}
	if t.Site != "" && !ValidToken(t.Site) {
		return invalid("target.site", "site %q is not valid: letters, digits, '_' and '-'", t.Site)
	}
	if t.Scope == ScopeAll && t.Site != "" {
		return invalid("target.site", "all@%s is written site:%s", t.Site, t.Site)
	}
	return nil
}

// ParseTarget reads the CLI form: all, any, group:NAME, node:ID,
// site:NAME, and group:NAME@SITE, node:ID@SITE or any@SITE for a group,
// node or any node of one site (all@SITE reads as site:SITE).
func ParseTarget(s string) (Target, error) {
	rest, site, _ := strings.Cut(s, "@")
	scope, value, _ := strings.Cut(rest, ":")
	t := Target{Scope: Scope(scope), Value: value, Site: site}
	if t.Scope == ScopeAll && site != "" && value == "" {
		t = Target{Scope: ScopeSite, Value: site}
	}
	if err := t.Validate(); err != nil {
		return Target{}, fmt.Errorf("target %q: %w", s, err)
	}
	return t, nil
}

// InGroup reports whether membership in group grants membership in target:
// the target is the group itself or one of its ancestors
// (web.dev.us-east is in web and web.dev, not in web.d or webx).
func InGroup(group, target string) bool {
	return group == target || strings.HasPrefix(group, target+".")
}

// Matches reports whether a node with the given id, site and groups is
// selected by the target (an empty site is DefaultSite). ScopeAny matches
// every node; the controller picks one.
func (t Target) Matches(id, site string, groups []string) bool {
	if t.Site != "" && SiteOf(site) != t.Site {
		return false
	}
	switch t.Scope {
	case ScopeSite:
		return SiteOf(site) == t.Value
	case ScopeAll, ScopeAny:
		return true
	case ScopeNode:
		return id == t.Value
	case ScopeGroup:
		for _, g := range groups {
			if InGroup(g, t.Value) {
				return true
			}
		}
	}
	return false
}

// ErrNotFound is returned by lookups of a missing job or node.
var ErrNotFound = errors.New("not found")
