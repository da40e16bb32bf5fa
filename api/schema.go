package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ParamType is the type of one action parameter. Values travel as strings
// and are checked against the type.
type ParamType string

// Parameter types.
const (
	TypeString   ParamType = "string"
	TypeInt      ParamType = "int"
	TypeBool     ParamType = "bool"
	TypeDuration ParamType = "duration"
	// TypeList is a comma-separated list of strings.
	TypeList ParamType = "list"
)

// ParamSchema declares one parameter of an action.
type ParamSchema struct {
	Name        string    `json:"name"`
	Type        ParamType `json:"type"`
	Required    bool      `json:"required,omitempty"`
	Default     string    `json:"default,omitempty"`
	Pattern     string    `json:"pattern,omitempty"`
	Enum        []string  `json:"enum,omitempty"`
	Description string    `json:"description,omitempty"`
	// Sensitive values (passwords, tokens) are never stored or shown in
	// clear: jobs hold SensitiveValue in their place, the controller keeps
	// them encrypted until the job ends, and each agent receives them
	// sealed for it alone.
	Sensitive bool `json:"sensitive,omitempty"`
}

// SensitiveValue stands for a sensitive param's value wherever a job is
// stored or shown.
const SensitiveValue = "(sensitive)"

// ActionSchema declares one action of a backend.
type ActionSchema struct {
	Name        string        `json:"name"`
	Description string        `json:"description,omitempty"`
	Params      []ParamSchema `json:"params,omitempty"`
	// ReadOnly actions query state and change nothing.
	ReadOnly bool `json:"read_only,omitempty"`
	// Idempotent actions are safe to retry and to re-run after recovery.
	Idempotent bool `json:"idempotent,omitempty"`
	// CheckMode actions can report what they would change without changing it.
	CheckMode bool `json:"check_mode,omitempty"`
	// Dangerous actions are disabled unless an allowlist names them.
	Dangerous bool `json:"dangerous,omitempty"`
}

// BackendSchema declares a backend and its actions.
type BackendSchema struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	Actions     []ActionSchema `json:"actions"`
	// Off names the backend's actions that are not enabled here (dangerous
	// ones, off by default, or any an allow list leaves out), so a job that
	// asks for one is told it is off and how to enable it, not that it
	// does not exist.
	Off []OffAction `json:"off,omitempty"`
}

// OffAction is an action a node has but does not enable.
type OffAction struct {
	Name      string `json:"name"`
	Dangerous bool   `json:"dangerous,omitempty"`
}

// offAction finds an action the backend has but does not enable.
func (b BackendSchema) offAction(name string) (OffAction, bool) {
	for _, o := range b.Off {
		if o.Name == name {
			return o, true
		}
	}
	return OffAction{}, false
}

// Action finds an action by name.
func (b BackendSchema) Action(name string) (ActionSchema, bool) {
	for _, a := range b.Actions {
		if a.Name == name {
			return a, true
		}
	}
	return ActionSchema{}, false
}

// ActionNames lists the backend's action names, sorted.
func (b BackendSchema) ActionNames() []string {
	names := make([]string, 0, len(b.Actions))
	for _, a := range b.Actions {
		names = append(names, a.Name)
	}
	sort.Strings(names)
	return names
}

// Param finds a parameter by name.
func (a ActionSchema) Param(name string) (ParamSchema, bool) {
	for _, p := range a.Params {
		if p.Name == name {
			return p, true
		}
	}
	return ParamSchema{}, false
}

// Check verifies that a schema is well formed: names are tokens, types are
// known, defaults and enums satisfy their own type, patterns compile.
func (b BackendSchema) Check() error {
	if !ValidToken(b.Name) {
		return fmt.Errorf("backend name %q is not a valid token", b.Name)
	}
	if len(b.Actions) == 0 {
		return fmt.Errorf("backend %s declares no actions", b.Name)
	}
	seen := map[string]bool{}
	for _, a := range b.Actions {
		if !ValidToken(a.Name) {
			return fmt.Errorf("backend %s: action name %q is not a valid token", b.Name, a.Name)
		}
		if seen[a.Name] {
			return fmt.Errorf("backend %s: action %s declared twice", b.Name, a.Name)
		}
		seen[a.Name] = true
		params := map[string]bool{}
		for _, p := range a.Params {
			if !ValidToken(p.Name) {
				return fmt.Errorf("%s.%s: param name %q is not a valid token", b.Name, a.Name, p.Name)
			}
			if params[p.Name] {
				return fmt.Errorf("%s.%s: param %s declared twice", b.Name, a.Name, p.Name)
			}
			params[p.Name] = true
			switch p.Type {
			case TypeString, TypeInt, TypeBool, TypeDuration, TypeList:
			default:
				return fmt.Errorf("%s.%s: param %s has unknown type %q", b.Name, a.Name, p.Name, p.Type)
			}
			if p.Pattern != "" {
				if _, err := regexp.Compile(p.Pattern); err != nil {
					return fmt.Errorf("%s.%s: param %s pattern: %w", b.Name, a.Name, p.Name, err)
				}
			}
			if p.Default != "" {
				if err := p.CheckValue(p.Default); err != nil {
					return fmt.Errorf("%s.%s: param %s default: %w", b.Name, a.Name, p.Name, err)
				}
			}
		}
	}
	return nil
}

// CheckValue verifies one value against the parameter's type, pattern and
// enum.
func (p ParamSchema) CheckValue(v string) error {
	switch p.Type {
	case TypeInt:
		if _, err := strconv.ParseInt(v, 10, 64); err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
	case TypeBool:
		if _, err := strconv.ParseBool(v); err != nil {
			return fmt.Errorf("%q is not a boolean (true or false)", v)
		}
	case TypeDuration:
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (examples: 500ms, 30s, 5m)", v)
		}
		// No action has a use for a negative duration; a sleep or a
		// timeout of -5s is a typo that must not pass as "at once".
		if d < 0 {
			return fmt.Errorf("%q is negative; want a duration of zero or more", v)
		}
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("value contains a NUL byte")
	}
	if len(p.Enum) > 0 && !slices.Contains(p.Enum, v) {
		return fmt.Errorf("%q is not one of %s", v, strings.Join(p.Enum, ", "))
	}
	if p.Pattern != "" {
		re, err := regexp.Compile(p.Pattern)
		if err != nil {
			return fmt.Errorf("schema pattern does not compile: %w", err)
		}
		values := []string{v}
		if p.Type == TypeList {
			values = SplitList(v)
		}
		for _, item := range values {
			if !re.MatchString(item) {
				return fmt.Errorf("%q does not match %s", item, p.Pattern)
			}
		}
	}
	return nil
}

// SplitList splits a list parameter on commas, trimming blanks.
func SplitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// ParamError names the parameter at fault.
type ParamError struct {
	Backend, Action, Param string
	Msg                    string
}

func (e *ParamError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("%s.%s: %s", e.Backend, e.Action, e.Msg)
	}
	return fmt.Sprintf("%s.%s: param %q: %s", e.Backend, e.Action, e.Param, e.Msg)
}

// Apply checks params against the action's schema and returns them with
// defaults filled in. Unknown params, missing required params and malformed
// values are errors naming the param.
func (a ActionSchema) Apply(backend string, params Params) (Params, error) {
	out := make(Params, len(a.Params))
	for k, v := range params {
		ps, ok := a.Param(k)
		if !ok {
			known := make([]string, 0, len(a.Params))
			for _, p := range a.Params {
				known = append(known, p.Name)
			}
			hint := "it takes no params"
			if len(known) > 0 {
				hint = "known: " + strings.Join(known, ", ")
			}
			return nil, &ParamError{backend, a.Name, k, "unknown param (" + hint + ")"}
		}
		if err := ps.CheckValue(v); err != nil {
			return nil, &ParamError{backend, a.Name, k, err.Error()}
		}
		out[k] = v
	}
	for _, ps := range a.Params {
		if _, ok := out[ps.Name]; ok {
			continue
		}
		if ps.Required {
			return nil, &ParamError{backend, a.Name, ps.Name, "missing required param"}
		}
		if ps.Default != "" {
			out[ps.Name] = ps.Default
		}
	}
	return out, nil
}

// SchemaDigest is a short stable hash of a set of backend schemas.
func SchemaDigest(schemas []BackendSchema) string {
	b, _ := json.Marshal(schemas)
	return SchemaDigestOf(b)
}

// SchemaDigestOf is the digest of a schema set as stored (its JSON).
func SchemaDigestOf(stored []byte) string {
	sum := sha256.Sum256(stored)
	return hex.EncodeToString(sum[:8])
}

// Catalog is the merged view of the backend schemas that nodes offer.
type Catalog struct {
	Backends []BackendSchema `json:"backends"`
	// Nodes maps backend name to the number of online nodes offering it.
	Nodes map[string]int `json:"nodes,omitempty"`
}

// MergeSchemas merges schema sets: a backend offered by several nodes is
// listed once, with the union of its actions (the first declaration of an
// action wins, except that an action one node marks dangerous is dangerous,
// an action some node does not mark read-only is not read-only (grid_facts
// runs only read-only actions at plan time) and a param one node marks
// sensitive is sensitive: the controller's policy, what runs at plan time,
// and whether a value is stored in clear, must not depend on which
// node registered first).
func MergeSchemas(sets ...[]BackendSchema) []BackendSchema {
	byName := map[string]*BackendSchema{}
	var order []string
	for _, set := range sets {
		for _, b := range set {
			m, ok := byName[b.Name]
			if !ok {
				cp := BackendSchema{Name: b.Name, Description: b.Description}
				byName[b.Name] = &cp
				m = &cp
				order = append(order, b.Name)
			}
			for _, a := range b.Actions {
				i := slices.IndexFunc(m.Actions, func(x ActionSchema) bool { return x.Name == a.Name })
				if i < 0 {
					// A copy of the params: flags are raised on it below,
					// never on a node's own set.
					a.Params = slices.Clone(a.Params)
					m.Actions = append(m.Actions, a)
					continue
				}
				m.Actions[i].Dangerous = m.Actions[i].Dangerous || a.Dangerous
				m.Actions[i].ReadOnly = m.Actions[i].ReadOnly && a.ReadOnly
				for _, p := range a.Params {
					if !p.Sensitive {
						continue
					}
					j := slices.IndexFunc(m.Actions[i].Params, func(x ParamSchema) bool { return x.Name == p.Name })
					if j >= 0 {
						m.Actions[i].Params[j].Sensitive = true
					}
				}
			}
		}
	}
	// An action off on one node and enabled on another is offered; one
	// off everywhere is off, dangerous if any node says so.
	for _, set := range sets {
		for _, b := range set {
			m := byName[b.Name]
			for _, o := range b.Off {
				if _, on := m.Action(o.Name); on {
					continue
				}
				if i := slices.IndexFunc(m.Off, func(x OffAction) bool { return x.Name == o.Name }); i >= 0 {
					m.Off[i].Dangerous = m.Off[i].Dangerous || o.Dangerous
					continue
				}
				m.Off = append(m.Off, o)
			}
		}
	}
	sort.Strings(order)
	out := make([]BackendSchema, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out
}

// Backend finds a backend by name.
func (c *Catalog) Backend(name string) (BackendSchema, bool) {
	for _, b := range c.Backends {
		if b.Name == name {
			return b, true
		}
	}
	return BackendSchema{}, false
}

// ValidateTask checks one task against the catalog. field prefixes the error
// ("tasks[1]").
func (c *Catalog) ValidateTask(field string, t Task, checkMode bool) error {
	b, ok := c.Backend(t.Backend)
	if !ok {
		names := make([]string, 0, len(c.Backends))
		for _, b := range c.Backends {
			names = append(names, b.Name)
		}
		avail := "no online node offers any backend"
		if len(names) > 0 {
			avail = "available: " + strings.Join(names, ", ")
		}
		return invalid(field+".backend", "unknown backend %q (%s)", t.Backend, avail)
	}
	a, ok := b.Action(t.Action)
	if off, isOff := b.offAction(t.Action); !ok && isOff {
		why := "the allow list of the agents that offer " + t.Backend + " leaves it out"
		if off.Dangerous {
			why = "it is a dangerous action, off unless an agent's allow list names it"
		}
		return invalid(field+".action", "%s.%s is off on every node that offers %s (%s): add %s.%s to allow in the config of the agents that should run it (grid agent --allow)",
			t.Backend, t.Action, t.Backend, why, t.Backend, t.Action)
	}
	if !ok {
		return invalid(field+".action", "unknown action %q for backend %s (available: %s)",
			t.Action, t.Backend, strings.Join(b.ActionNames(), ", "))
	}
	if _, err := a.Apply(b.Name, t.Params); err != nil {
		var pe *ParamError
		if errors.As(err, &pe) {
			return invalid(field+".params."+pe.Param, "%s (%s.%s)", pe.Msg, pe.Backend, pe.Action)
		}
		return invalid(field+".params", "%v", err)
	}
	if checkMode && !a.CheckMode && !a.ReadOnly {
		return invalid(field, "%s.%s does not support check mode", t.Backend, t.Action)
	}
	return nil
}

// ValidateJob checks every leaf of the job against the catalog.
func (c *Catalog) ValidateJob(j *Job) error {
	for _, s := range Flatten(j.Tasks) {
		if err := c.ValidateTask(s.Path, s.Task, j.CheckMode); err != nil {
			return err
		}
	}
	return nil
}
