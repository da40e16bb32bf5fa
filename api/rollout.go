package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Limit is a number of nodes, given as a count (3) or as a percentage of
// the nodes a step runs on ("10%"). It bounds how many nodes run a step at
// once (max_concurrency) and how many may fail before no new node starts
// (max_errors). Percentages round down: 10% of 15 nodes is 1.
type Limit struct {
	Value   int
	Percent bool
	// bad holds text that did not parse (invalid is set), so that
	// validation can name the field at fault (a decoder's error would not).
	bad     string
	invalid bool
}

// ParseLimit reads "3" or "10%".
func ParseLimit(s string) (Limit, error) {
	l := parseLimit(s)
	if err := l.check(); err != nil {
		return Limit{}, err
	}
	return l, nil
}

func (l Limit) check() error {
	if l.invalid {
		return fmt.Errorf("%q is not a count or a percentage (examples: 3, 10%%)", l.bad)
	}
	if l.Value < 0 {
		return fmt.Errorf("%s must not be negative", l)
	}
	if l.Percent && l.Value > 100 {
		return fmt.Errorf("%s is more than 100%%", l)
	}
	return nil
}

// String renders the limit as ParseLimit reads it.
func (l Limit) String() string {
	if l.Percent {
		return strconv.Itoa(l.Value) + "%"
	}
	return strconv.Itoa(l.Value)
}

// Of is the limit applied to a step on n nodes: the count itself, or the
// percentage of n rounded down.
func (l Limit) Of(n int) int {
	if l.Percent {
		return l.Value * n / 100
	}
	return l.Value
}

// MarshalJSON writes a count as a number and a percentage as a string.
func (l Limit) MarshalJSON() ([]byte, error) {
	if l.invalid {
		return json.Marshal(l.bad)
	}
	if l.Percent {
		return []byte(`"` + l.String() + `"`), nil
	}
	return []byte(strconv.Itoa(l.Value)), nil
}

// UnmarshalJSON accepts 3, "3" or "10%". Anything else is kept for
// validation to report with the field's name.
func (l *Limit) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if strings.HasPrefix(s, `"`) {
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
	}
	l.set(s)
	return nil
}

// parseLimit reads the syntax of a limit; text that is neither a count nor
// a percentage is kept as bad, for check to report.
func parseLimit(s string) Limit {
	s = strings.TrimSpace(s)
	num, pct := strings.CutSuffix(s, "%")
	v, err := strconv.Atoi(num)
	if err != nil {
		return Limit{bad: s, invalid: true}
	}
	return Limit{Value: v, Percent: pct}
}

func (l *Limit) set(s string) { *l = parseLimit(s) }

// MarshalYAML writes a count as a number and a percentage as a string.
func (l Limit) MarshalYAML() (any, error) {
	if l.invalid {
		return l.bad, nil
	}
	if l.Percent {
		return l.String(), nil
	}
	return l.Value, nil
}

// UnmarshalYAML accepts 3 or 10%. Anything else is kept for validation to
// report with the field's name.
func (l *Limit) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		*l = Limit{bad: fmt.Sprintf("<%s on line %d>", kindName(n.Kind), n.Line), invalid: true}
		return nil
	}
	l.set(n.Value)
	return nil
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "a map"
	case yaml.SequenceNode:
		return "a list"
	}
	return "not a scalar"
}

// validateLimits checks max_concurrency and max_errors at path ("" for the
// job, "tasks[1]." for a phase).
func validateLimits(conc, errs *Limit, path string) error {
	if conc != nil {
		if err := conc.check(); err != nil {
			return invalid(path+"max_concurrency", "%v", err)
		}
		if conc.Value == 0 {
			return invalid(path+"max_concurrency", "must be at least 1 (or 1%%); leave it out for no limit")
		}
	}
	if errs != nil {
		if err := errs.check(); err != nil {
			return invalid(path+"max_errors", "%v", err)
		}
	}
	return nil
}

// Rollout is the effective limits of one top-level phase: its own, else the
// job's. Nil fields mean no limit.
type Rollout struct {
	MaxConcurrency *Limit
	MaxErrors      *Limit
}

// RolloutFor returns the limits that apply to the top-level phase p of job j.
func RolloutFor(j *Job, p Phase) Rollout {
	r := Rollout{MaxConcurrency: j.MaxConcurrency, MaxErrors: j.MaxErrors}
	if p.MaxConcurrency != nil {
		r.MaxConcurrency = p.MaxConcurrency
	}
	if p.MaxErrors != nil {
		r.MaxErrors = p.MaxErrors
	}
	return r
}

// Slots is how many of n nodes may run at once; n when there is no limit.
// A percentage that rounds to 0 still lets one node run.
func (r Rollout) Slots(n int) int {
	if r.MaxConcurrency == nil {
		return n
	}
	return min(max(r.MaxConcurrency.Of(n), 1), n)
}

// ErrorBudget is how many of n nodes may fail (or become unreachable)
// before no new node starts, and whether there is a budget at all.
func (r Rollout) ErrorBudget(n int) (int, bool) {
	if r.MaxErrors == nil {
		return 0, false
	}
	return r.MaxErrors.Of(n), true
}

// JobSummary counts a job's nodes by outcome. Every node the target
// matched is counted once in Targeted and in at most one of Succeeded,
// Failed, Unreachable and NotStarted (a node still running, or cancelled,
// is in none).
type JobSummary struct {
	// Targeted counts the nodes the target matched, online or not.
	Targeted int `json:"targeted"`
	// Reached counts the nodes that started at least one step (a step
	// cancelled while it ran counts: the node was reached).
	Reached   int `json:"reached"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	// Unreachable counts nodes offline when the target was resolved or
	// that went away during a step.
	Unreachable int `json:"unreachable"`
	// NotStarted counts nodes a rollout never started because max_errors
	// was exceeded.
	NotStarted int `json:"not_started"`
	// Cancelled counts nodes whose step was cancelled (running or not yet
	// started) and that neither failed nor went away.
	Cancelled int `json:"cancelled,omitempty"`
}

// Summarize counts the job's nodes by outcome from its results.
func (j *Job) Summarize() JobSummary {
	s := JobSummary{Targeted: len(j.Expected) + len(j.Unreachable), Unreachable: len(j.Unreachable)}
	for _, id := range j.Expected {
		var reached, failed, unreachable, notStarted, open, cancelled bool
		for _, m := range j.Results {
			res := m[id]
			if res == nil {
				continue
			}
			switch res.Status {
			case StepSuccess:
				reached = true
			case StepFailed:
				reached, failed = true, true
			case StepUnreachable:
				unreachable = true
			case StepNotStarted:
				notStarted = true
			case StepCancelled:
				cancelled = true
				reached = reached || startedBefore(res)
			case StepSkipped:
			default:
				open = true
			}
		}
		if reached {
			s.Reached++
		}
		switch {
		case unreachable:
			s.Unreachable++
		case failed:
			s.Failed++
		case notStarted:
			s.NotStarted++
		case cancelled:
			s.Cancelled++
		case open || len(j.Results) == 0:
		default:
			s.Succeeded++
		}
	}
	return s
}

// startedBefore reports whether a node's timeline for a step shows it
// running (or done) before the step ended otherwise.
func startedBefore(r *NodeResult) bool {
	for _, e := range r.Events {
		switch e.Status {
		case StepRunning, StepSuccess, StepFailed:
			return true
		}
	}
	return false
}
