// Package systemd is the systemd backend: start, stop, restart, reload,
// enable, disable and query units through systemctl, run with an argument
// vector. Each action reads the unit's state first, so that starting a
// running unit or enabling an enabled one reports no change, and check mode
// can say what would change without touching anything.
package systemd

import (
	"bufio"
	"context"
	"fmt"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/internal/proc"
)

// UnitPattern is what a unit name may look like: systemd's unit-name
// characters (including \ for escapes such as \x2d), never starting with a
// dash so it cannot pass for an option.
const UnitPattern = `^[A-Za-z0-9:_.@\\][A-Za-z0-9:_.@\\-]{0,255}$`

// Options configure the backend.
type Options struct {
	// SystemctlPath is the systemctl binary; default "systemctl" from PATH.
	SystemctlPath string
}

// Backend is the systemd backend.
type Backend struct {
	systemctl string
}

// New returns the systemd backend.
func New(opts Options) *Backend {
	if opts.SystemctlPath == "" {
		opts.SystemctlPath = "systemctl"
	}
	return &Backend{systemctl: opts.SystemctlPath}
}

// Schema declares the unit actions.
func (*Backend) Schema() api.BackendSchema {
	unit := []api.ParamSchema{{Name: "unit", Type: api.TypeString, Required: true, Pattern: UnitPattern,
		Description: "Unit name, e.g. nginx.service (no suffix means .service)."}}
	act := func(name, desc string) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, Params: unit, Idempotent: true, CheckMode: true}
	}
	status := act("status", "Report the unit's active state, sub state and enablement.")
	status.ReadOnly = true
	// Stopping or disabling a unit (sshd, the network) can cut a node off.
	dangerous := func(a api.ActionSchema) api.ActionSchema { a.Dangerous = true; return a }
	return api.BackendSchema{
		Name:        "systemd",
		Description: "Manage systemd units with systemctl.",
		Actions: []api.ActionSchema{
			act("start", "Start the unit; no change when it is already active."),
			dangerous(act("stop", "Stop the unit; no change when it is already inactive.")),
			act("restart", "Restart the unit (starts it when stopped); always a change."),
			act("reload", "Reload the unit's configuration; fails when the unit is not active."),
			act("enable", "Enable the unit at boot; no change when already enabled."),
			dangerous(act("disable", "Disable the unit at boot; no change when already disabled.")),
			status,
		},
	}
}

// State is what systemctl show reports about a unit.
type State struct {
	Load, Active, Sub, UnitFile string
}

func (s State) facts(unit string) map[string]any {
	return map[string]any{
		"unit":         unit,
		"load_state":   s.Load,
		"active_state": s.Active,
		"sub_state":    s.Sub,
		"enabled":      s.UnitFile,
	}
}

// running covers the states in which starting again would do nothing.
func (s State) running() bool {
	switch s.Active {
	case "active", "activating", "reloading", "refreshing":
		return true
	}
	return false
}

func (s State) stopped() bool { return s.Active == "inactive" || s.Active == "failed" }

// Run executes one action.
func (b *Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	unit := req.Params["unit"]
	var verb string
	// wanted reports whether the verb has something to do in state s.
	var wanted func(s State) bool
	switch req.Action {
	case "status":
		st, err := b.State(ctx, unit)
		if err != nil {
			return nil, err
		}
		return &backends.Result{
			Output: fmt.Sprintf("%s: %s (%s), %s", unit, st.Active, st.Sub, orDash(st.UnitFile)),
			Facts:  st.facts(unit),
		}, nil
	case "start":
		verb, wanted = "start", func(s State) bool { return !s.running() }
	case "stop":
		verb, wanted = "stop", func(s State) bool { return !s.stopped() }
	case "restart":
		verb, wanted = "restart", func(State) bool { return true }
	case "reload":
		verb, wanted = "reload", func(State) bool { return true }
	case "enable":
		verb, wanted = "enable", func(s State) bool { return s.UnitFile != "enabled" && s.UnitFile != "static" }
	case "disable":
		verb, wanted = "disable", func(s State) bool { return s.UnitFile != "disabled" && s.UnitFile != "static" }
	default:
		return nil, fmt.Errorf("%w %q", backends.ErrUnknownAction, req.Action)
	}

	before, err := b.State(ctx, unit)
	if err != nil {
		return nil, err
	}
	if verb == "reload" && !before.running() {
		return &backends.Result{Facts: before.facts(unit)},
			fmt.Errorf("cannot reload %s: unit is %s", unit, before.Active)
	}
	if !wanted(before) {
		return &backends.Result{
			Output: fmt.Sprintf("%s: nothing to do (%s, %s)", unit, before.Active, orDash(before.UnitFile)),
			Facts:  before.facts(unit),
		}, nil
	}
	if req.CheckMode {
		return &backends.Result{
			Output:  fmt.Sprintf("check mode: would %s %s (now %s, %s)", verb, unit, before.Active, orDash(before.UnitFile)),
			Changed: true,
			Facts:   before.facts(unit),
		}, nil
	}
	out, err := proc.Run(ctx, proc.Cmd{Path: b.systemctl, Args: []string{"--no-ask-password", verb, "--", unit}})
	if err != nil {
		return &backends.Result{Output: out.Stdout + out.Stderr, Facts: before.facts(unit)},
			fmt.Errorf("systemctl %s %s: %w", verb, unit, err)
	}
	after, err := b.State(ctx, unit)
	if err != nil {
		return &backends.Result{Changed: true}, err
	}
	return &backends.Result{
		Output:  fmt.Sprintf("%s %s: %s → %s", verb, unit, before.Active, after.Active),
		Changed: true,
		Facts:   after.facts(unit),
	}, nil
}

// State reads the unit's state with systemctl show. A unit systemd does
// not know is an error: every action on it would fail or mean nothing.
func (b *Backend) State(ctx context.Context, unit string) (State, error) {
	out, err := proc.Run(ctx, proc.Cmd{Path: b.systemctl,
		Args: []string{"show", "--property=LoadState,ActiveState,SubState,UnitFileState", "--", unit}})
	if err != nil {
		return State{}, fmt.Errorf("systemctl show %s: %w", unit, err)
	}
	var s State
	sc := bufio.NewScanner(strings.NewReader(out.Stdout))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "LoadState":
			s.Load = v
		case "ActiveState":
			s.Active = v
		case "SubState":
			s.Sub = v
		case "UnitFileState":
			s.UnitFile = v
		}
	}
	if s.Load == "" || s.Active == "" {
		return s, fmt.Errorf("systemctl show %s: unexpected output %q", unit, out.Stdout)
	}
	if s.Load == "not-found" {
		return s, fmt.Errorf("unit %s not found", unit)
	}
	return s, nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
