package controller

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// RateLimit bounds how many tasks of some backend actions start in any
// window of Per, across every controller of the cluster (rate_limits in the
// controller's config). Every controller of a cluster is expected to have
// the same limits: each enforces its own list against the shared count.
type RateLimit struct {
	// Action is "backend.action", "backend.*" (every action of the
	// backend) or "*" (every task). A task is counted by the most specific
	// limit that matches it, and by that one only.
	Action string `yaml:"action"`
	// Starts is how many task starts any window of Per holds at most.
	Starts int `yaml:"starts"`
	// Per is the window (at least 1s, at most 24h).
	Per config.Duration `yaml:"per"`
}

// RateLimits is the rate_limits list of the config.
type RateLimits []RateLimit

// UnmarshalYAML reads the list, saying what it wants when given something
// else (a map of action to count is a likely guess).
func (ls *RateLimits) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: rate_limits: want a list of {action: backend.action, starts: N, per: DURATION}", n.Line)
	}
	// Node.Decode does not refuse unknown keys as the file's decoder does.
	for i, item := range n.Content {
		if item.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: rate_limits[%d]: want {action: backend.action, starts: N, per: DURATION}", item.Line, i)
		}
		for k := 0; k+1 < len(item.Content); k += 2 {
			switch key := item.Content[k]; key.Value {
			case "action", "starts", "per":
			default:
				return fmt.Errorf("line %d: rate_limits[%d]: field %s not found (want action, starts, per)", key.Line, i, key.Value)
			}
		}
	}
	var list []RateLimit
	if err := n.Decode(&list); err != nil {
		return err
	}
	*ls = list
	return nil
}

// Bounds of a rate limit.
const (
	// minRateWindow keeps the shared count from being written for every
	// start: a window shorter than a second limits little a max_concurrency
	// would not.
	minRateWindow = time.Second
	maxRateWindow = 24 * time.Hour
	maxRateStarts = 1_000_000
)

// String is how messages name a limit: "apt.install 20 per 1m".
func (l RateLimit) String() string {
	return fmt.Sprintf("%s %d per %s", l.Action, l.Starts, shortDuration(l.Per.D()))
}

// validateRateLimits checks rate_limits and says what to fix.
func validateRateLimits(ls []RateLimit) error {
	var errs []error
	seen := map[string]bool{}
	for i, l := range ls {
		field := fmt.Sprintf("rate_limits[%d]", i)
		if err := validRateAction(l.Action); err != nil {
			errs = append(errs, fmt.Errorf("%s.action: %w", field, err))
		} else if seen[l.Action] {
			errs = append(errs, fmt.Errorf("%s.action %q: listed twice; keep one limit per action", field, l.Action))
		}
		seen[l.Action] = true
		if l.Starts < 1 || l.Starts > maxRateStarts {
			errs = append(errs, fmt.Errorf("%s.starts must be between 1 and %d, got %d", field, maxRateStarts, l.Starts))
		}
		if d := l.Per.D(); d < minRateWindow || d > maxRateWindow {
			errs = append(errs, fmt.Errorf("%s.per must be between %s and %s, got %s", field, minRateWindow, maxRateWindow, d))
		}
	}
	return errors.Join(errs...)
}

func validRateAction(a string) error {
	if a == "*" {
		return nil
	}
	backend, action, ok := strings.Cut(a, ".")
	if !ok || !api.ValidToken(backend) || (action != "*" && !api.ValidToken(action)) {
		return fmt.Errorf("%q: want \"backend.action\", \"backend.*\" or \"*\"", a)
	}
	return nil
}

// rateLimit is one configured limit and its key in the rate limits bucket.
type rateLimit struct {
	RateLimit
	key string
}

// rateLimits finds the limit of a task.
type rateLimits struct {
	exact   map[string]*rateLimit // by "backend.action"
	backend map[string]*rateLimit // by backend, for "backend.*"
	all     *rateLimit
}

// newRateLimits indexes validated limits (nil when there are none).
func newRateLimits(ls []RateLimit) *rateLimits {
	if len(ls) == 0 {
		return nil
	}
	rl := &rateLimits{exact: map[string]*rateLimit{}, backend: map[string]*rateLimit{}}
	for _, l := range ls {
		lim := &rateLimit{RateLimit: l, key: rateKey(l.Action)}
		switch backend, action, _ := strings.Cut(l.Action, "."); {
		case l.Action == "*":
			rl.all = lim
		case action == "*":
			rl.backend[backend] = lim
		default:
			rl.exact[l.Action] = lim
		}
	}
	return rl
}

// match returns the most specific limit on t, or nil.
func (rl *rateLimits) match(t api.Task) *rateLimit {
	if rl == nil {
		return nil
	}
	if l := rl.exact[t.Name()]; l != nil {
		return l
	}
	if l := rl.backend[t.Backend]; l != nil {
		return l
	}
	return rl.all
}

// rateKey is a limit's key in the bucket: KV keys take no '*'.
func rateKey(action string) string {
	return strings.ReplaceAll(action, "*", "_any_")
}

// shortDuration writes 1m rather than 1m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
