// Package backends defines the Backend interface that agents run, and the
// Registry that checks every request against the backend's schema before a
// backend sees it.
package backends

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Backend runs a closed set of typed actions. It never runs a shell.
type Backend interface {
	// Schema declares the backend's actions and their params.
	Schema() api.BackendSchema
	// Run executes one action. Params have been checked against the schema
	// and carry defaults. ctx carries the task timeout and cancellation.
	Run(ctx context.Context, req *Request) (*Result, error)
}

// Request is one action to run.
type Request struct {
	Action string
	Params api.Params
	// CheckMode asks for a report of what would change, changing nothing.
	CheckMode bool
	// ForcedCheck says the registry set CheckMode because the node runs
	// the action only in check mode (see Registry.SetCheckOnly).
	ForcedCheck bool
	// Progress reports progress of a long action (pct 0..100); never nil
	// when a backend is called through a Registry.
	Progress func(pct int, message string)
	// JobID, Step, Node and Attempt name the task being run (the agent
	// sets them; empty when a backend is called outside a job).
	JobID   string
	Step    int
	Node    string
	Attempt int
}

// Result is what an action produced.
type Result struct {
	Output  string
	Changed bool
	Facts   map[string]any
}

// Errors a Registry returns before running anything.
var (
	ErrUnknownBackend = errors.New("unknown backend")
	ErrUnknownAction  = errors.New("unknown action")
	ErrNotAllowed     = errors.New("not allowed")
	ErrCheckMode      = errors.New("check mode not supported")
	ErrInvalidParams  = errors.New("invalid params")
)

// Registry holds the backends an agent offers and the allowlist that
// enables their actions.
type Registry struct {
	mu       sync.RWMutex
	backends map[string]Backend
	// schemas are the backends' schemas as registered: a backend's schema
	// is fixed once it is made, and Prepare reads it for every request.
	schemas map[string]api.BackendSchema
	allow   *Allowlist
	// checkOnly names actions that always run in check mode here.
	checkOnly *Allowlist
}

// NewRegistry returns an empty registry with the default allowlist
// (every action not marked dangerous).
func NewRegistry() *Registry {
	return &Registry{backends: map[string]Backend{}, schemas: map[string]api.BackendSchema{}}
}

// Register adds a backend; its schema must be well formed.
func (r *Registry) Register(b Backend) error {
	s := b.Schema()
	if err := s.Check(); err != nil {
		return fmt.Errorf("register backend: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.backends[s.Name]; dup {
		return fmt.Errorf("register backend: %s registered twice", s.Name)
	}
	r.backends[s.Name] = b
	r.schemas[s.Name] = s
	return nil
}

// MustRegister is Register for built-in sets that cannot be malformed.
func (r *Registry) MustRegister(bs ...Backend) *Registry {
	for _, b := range bs {
		if err := r.Register(b); err != nil {
			panic(err)
		}
	}
	return r
}

// SetAllowlist replaces the allowlist; nil restores the default.
func (r *Registry) SetAllowlist(a *Allowlist) {
	r.mu.Lock()
	r.allow = a
	r.mu.Unlock()
}

// SetCheckOnly names actions (entries as in an allowlist) that this node
// runs only in check mode: they report what they would change and change
// nothing, whatever the job asks. Read-only actions run as usual; one that
// has no check mode is refused. nil runs everything as asked.
func (r *Registry) SetCheckOnly(a *Allowlist) {
	r.mu.Lock()
	r.checkOnly = a
	r.mu.Unlock()
}

// Get returns a backend by name.
func (r *Registry) Get(name string) (Backend, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	b, ok := r.backends[name]
	return b, ok
}

// List returns the names of backends with at least one enabled action.
func (r *Registry) List() []string {
	schemas := r.Schemas()
	names := make([]string, 0, len(schemas))
	for _, s := range schemas {
		names = append(names, s.Name)
	}
	return names
}

// Schemas returns the schemas of the enabled actions, sorted by backend.
func (r *Registry) Schemas() []api.BackendSchema {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]api.BackendSchema, 0, len(r.backends))
	for _, b := range r.backends {
		s := b.Schema()
		enabled := s
		enabled.Actions, enabled.Off = nil, nil
		for _, a := range s.Actions {
			if r.allow.Allows(s.Name, a) {
				enabled.Actions = append(enabled.Actions, a)
			} else {
				enabled.Off = append(enabled.Off, api.OffAction{Name: a.Name, Dangerous: a.Dangerous})
			}
		}
		out = append(out, enabled)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Prepare resolves and checks a request without running it: the backend
// exists, the action exists and is allowed, params match the schema (with
// defaults filled in), and check mode is supported.
func (r *Registry) Prepare(backend string, req *Request) (Backend, error) {
	r.mu.RLock()
	b, ok := r.backends[backend]
	s := r.schemas[backend]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownBackend, backend)
	}
	a, ok := s.Action(req.Action)
	if !ok {
		return nil, fmt.Errorf("%w %q for backend %s (available: %s)", ErrUnknownAction, req.Action, backend, strings.Join(s.ActionNames(), ", "))
	}
	r.mu.RLock()
	allowed := r.allow.Allows(backend, a)
	forced := !a.ReadOnly && r.checkOnly.Names(backend, a.Name)
	r.mu.RUnlock()
	if !allowed {
		return nil, fmt.Errorf("%s.%s is %w on this node (enable it in the agent's allow list)", backend, a.Name, ErrNotAllowed)
	}
	params, err := a.Apply(backend, req.Params)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidParams, err)
	}
	if forced && !a.CheckMode {
		return nil, fmt.Errorf("%s.%s runs only in check mode on this node, and it has none: %w", backend, a.Name, ErrNotAllowed)
	}
	if forced && !req.CheckMode {
		req.CheckMode, req.ForcedCheck = true, true
	}
	if req.CheckMode && !a.CheckMode && !a.ReadOnly {
		return nil, fmt.Errorf("%s.%s: %w", backend, a.Name, ErrCheckMode)
	}
	req.Params = params
	if req.Progress == nil {
		req.Progress = func(int, string) {}
	}
	return b, nil
}

// Run checks a request with Prepare and runs it. A read-only action in check
// mode simply runs, since it changes nothing.
func (r *Registry) Run(ctx context.Context, backend string, req *Request) (*Result, error) {
	b, err := r.Prepare(backend, req)
	if err != nil {
		return nil, err
	}
	res, err := b.Run(ctx, req)
	if res == nil {
		res = &Result{}
	}
	if req.ForcedCheck {
		res.Output = "check mode only on this node, nothing was changed: " + res.Output
	}
	return res, err
}
