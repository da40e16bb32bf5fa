package api

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseJobSpecLimits(t *testing.T) {
	tests := []struct {
		name     string
		doc      string
		wantConc string // "" when unset
		wantErrs string
		wantErr  string // substring of the error; "" for none
	}{
		{name: "yaml count and percent", doc: "target: {scope: all}\nmax_concurrency: 10%\nmax_errors: 1\ntasks: [{backend: ping, action: echo}]",
			wantConc: "10%", wantErrs: "1"},
		{name: "json number and string", doc: `{"target":{"scope":"all"},"max_concurrency":2,"max_errors":"25%","tasks":[{"backend":"ping","action":"echo"}]}`,
			wantConc: "2", wantErrs: "25%"},
		{name: "max_errors zero is a limit", doc: "target: {scope: all}\nmax_errors: 0\ntasks: [{backend: ping, action: echo}]",
			wantErrs: "0"},
		{name: "zero concurrency", doc: "target: {scope: all}\nmax_concurrency: 0\ntasks: [{backend: ping, action: echo}]",
			wantErr: "max_concurrency: must be at least 1"},
		{name: "zero percent concurrency", doc: "target: {scope: all}\nmax_concurrency: 0%\ntasks: [{backend: ping, action: echo}]",
			wantErr: "max_concurrency: must be at least 1"},
		{name: "not a number", doc: "target: {scope: all}\nmax_errors: many\ntasks: [{backend: ping, action: echo}]",
			wantErr: `max_errors: "many" is not a count or a percentage`},
		{name: "json not a number", doc: `{"target":{"scope":"all"},"max_concurrency":"ten","tasks":[{"backend":"ping","action":"echo"}]}`,
			wantErr: `max_concurrency: "ten" is not a count`},
		{name: "negative", doc: "target: {scope: all}\nmax_errors: -1\ntasks: [{backend: ping, action: echo}]",
			wantErr: "max_errors: -1 must not be negative"},
		{name: "over 100%", doc: "target: {scope: all}\nmax_errors: 150%\ntasks: [{backend: ping, action: echo}]",
			wantErr: "max_errors: 150% is more than 100%"},
		{name: "a list", doc: "target: {scope: all}\nmax_errors: [1]\ntasks: [{backend: ping, action: echo}]",
			wantErr: "max_errors: \"<a list on line 2>\""},
		{name: "per step", doc: "target: {scope: all}\ntasks: [{backend: ping, action: echo, max_concurrency: 50%, max_errors: 2%}]"},
		{name: "per step bad", doc: "target: {scope: all}\ntasks: [{backend: ping, action: echo}, {backend: ping, action: echo, max_concurrency: x}]",
			wantErr: "tasks[1].max_concurrency:"},
		{name: "on a pipeline", doc: "target: {scope: all}\ntasks: [{max_errors: 1, tasks: [{backend: ping, action: echo}]}]"},
		{name: "inside a pipeline", doc: "target: {scope: all}\ntasks: [{tasks: [{backend: ping, action: echo, max_errors: 1}]}]",
			wantErr: "tasks[0].tasks[0]: max_concurrency and max_errors apply to a whole pipeline"},
		{name: "misspelt", doc: "target: {scope: all}\nmax_error: 1\ntasks: [{backend: ping, action: echo}]",
			wantErr: "field max_error not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec, err := ParseJobSpec([]byte(tt.doc))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := limitString(spec.MaxConcurrency); got != tt.wantConc {
				t.Errorf("max_concurrency %q, want %q", got, tt.wantConc)
			}
			if got := limitString(spec.MaxErrors); got != tt.wantErrs {
				t.Errorf("max_errors %q, want %q", got, tt.wantErrs)
			}
			// The spec survives a JSON round trip as the API sends it.
			b, err := json.Marshal(spec)
			if err != nil {
				t.Fatal(err)
			}
			again, err := ParseJobSpec(b)
			if err != nil {
				t.Fatalf("re-parse %s: %v", b, err)
			}
			if limitString(again.MaxConcurrency) != tt.wantConc || limitString(again.MaxErrors) != tt.wantErrs {
				t.Fatalf("round trip changed the limits: %s", b)
			}
		})
	}
}

func limitString(l *Limit) string {
	if l == nil {
		return ""
	}
	return l.String()
}

func TestRolloutRounding(t *testing.T) {
	pct := func(v int) *Limit { return &Limit{Value: v, Percent: true} }
	cnt := func(v int) *Limit { return &Limit{Value: v} }
	tests := []struct {
		name      string
		r         Rollout
		nodes     int
		slots     int
		budget    int
		hasBudget bool
	}{
		{name: "no limits", nodes: 7, slots: 7},
		{name: "count", r: Rollout{MaxConcurrency: cnt(2), MaxErrors: cnt(1)}, nodes: 7, slots: 2, budget: 1, hasBudget: true},
		{name: "count above the nodes", r: Rollout{MaxConcurrency: cnt(20)}, nodes: 7, slots: 7},
		{name: "10% of 15 rounds down", r: Rollout{MaxConcurrency: pct(10), MaxErrors: pct(10)}, nodes: 15, slots: 1, budget: 1, hasBudget: true},
		{name: "10% of 5 rounds to 0: one slot, no error allowed", r: Rollout{MaxConcurrency: pct(10), MaxErrors: pct(10)}, nodes: 5, slots: 1, budget: 0, hasBudget: true},
		{name: "50% of 5", r: Rollout{MaxConcurrency: pct(50), MaxErrors: pct(50)}, nodes: 5, slots: 2, budget: 2, hasBudget: true},
		{name: "100%", r: Rollout{MaxConcurrency: pct(100), MaxErrors: pct(100)}, nodes: 5, slots: 5, budget: 5, hasBudget: true},
		{name: "zero errors", r: Rollout{MaxErrors: cnt(0)}, nodes: 5, slots: 5, budget: 0, hasBudget: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Slots(tt.nodes); got != tt.slots {
				t.Errorf("slots %d, want %d", got, tt.slots)
			}
			budget, ok := tt.r.ErrorBudget(tt.nodes)
			if budget != tt.budget || ok != tt.hasBudget {
				t.Errorf("budget %d,%v, want %d,%v", budget, ok, tt.budget, tt.hasBudget)
			}
		})
	}
}

func TestRolloutForPhaseOverridesJob(t *testing.T) {
	j := &Job{MaxConcurrency: &Limit{Value: 5}, MaxErrors: &Limit{Value: 1}}
	r := RolloutFor(j, Phase{MaxErrors: &Limit{Value: 0}})
	if r.MaxConcurrency.String() != "5" || r.MaxErrors.String() != "0" {
		t.Fatalf("rollout %v %v, want 5 and 0", r.MaxConcurrency, r.MaxErrors)
	}
}
