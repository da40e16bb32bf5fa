package backends

import (
	"fmt"
	"strings"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Allowlist enables backend actions. Entries are "backend" (every action of
// it, dangerous ones included), "backend.action", or "*" (every action).
// An empty or nil allowlist enables every action not marked dangerous.
type Allowlist struct {
	entries map[string]bool
}

// ParseAllowlist reads entries such as "apt", "systemd.restart", "*".
func ParseAllowlist(entries []string) (*Allowlist, error) {
	if len(entries) == 0 {
		return nil, nil
	}
	a := &Allowlist{entries: map[string]bool{}}
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		b, act, hasAct := strings.Cut(e, ".")
		if e != "*" && (!api.ValidToken(b) || (hasAct && !api.ValidToken(act))) {
			return nil, fmt.Errorf("allowlist entry %q: want backend, backend.action or *", e)
		}
		a.entries[e] = true
	}
	return a, nil
}

// Names reports whether an entry names the action: "*", its backend, or
// backend.action. Unlike Allows, an empty list names nothing.
func (a *Allowlist) Names(backend, action string) bool {
	if a == nil {
		return false
	}
	return a.entries["*"] || a.entries[backend] || a.entries[backend+"."+action]
}

// Allows reports whether the action of backend is enabled.
func (a *Allowlist) Allows(backend string, action api.ActionSchema) bool {
	if a == nil || len(a.entries) == 0 {
		return !action.Dangerous
	}
	return a.entries["*"] || a.entries[backend] || a.entries[backend+"."+action.Name]
}
