package controller

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/config"
)

// rate_limits as an operator writes them: accepted forms, and each wrong
// one refused at start with the field named.
func TestRateLimitsConfig(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		wantErr string // empty: valid
	}{
		{name: "one action", yaml: "rate_limits: [{action: apt.install, starts: 20, per: 1m}]"},
		{name: "a backend and everything", yaml: "rate_limits:\n  - {action: systemd.*, starts: 5, per: 10s}\n  - {action: \"*\", starts: 1000, per: 1h}"},
		{name: "no limits", yaml: "rate_limits: []"},
		{name: "unknown key", yaml: "rate_limits: [{action: apt.install, starts: 20, per: 1m, group: web}]", wantErr: "field group not found"},
		{name: "not a duration", yaml: "rate_limits: [{action: apt.install, starts: 20, per: often}]", wantErr: "is not a duration"},
		{name: "a bare backend", yaml: "rate_limits: [{action: apt, starts: 20, per: 1m}]", wantErr: `rate_limits[0].action: "apt": want "backend.action"`},
		{name: "no action", yaml: "rate_limits: [{starts: 20, per: 1m}]", wantErr: "rate_limits[0].action"},
		{name: "a pattern inside a name", yaml: "rate_limits: [{action: apt.inst*, starts: 20, per: 1m}]", wantErr: "rate_limits[0].action"},
		{name: "no starts", yaml: "rate_limits: [{action: apt.install, per: 1m}]", wantErr: "rate_limits[0].starts must be between 1 and"},
		{name: "negative starts", yaml: "rate_limits: [{action: apt.install, starts: -1, per: 1m}]", wantErr: "rate_limits[0].starts"},
		{name: "no window", yaml: "rate_limits: [{action: apt.install, starts: 20}]", wantErr: "rate_limits[0].per must be between 1s and 24h0m0s, got 0s"},
		{name: "too short a window", yaml: "rate_limits: [{action: apt.install, starts: 20, per: 100ms}]", wantErr: "rate_limits[0].per"},
		{name: "too long a window", yaml: "rate_limits: [{action: apt.install, starts: 20, per: 48h}]", wantErr: "rate_limits[0].per"},
		{name: "listed twice", yaml: "rate_limits:\n  - {action: apt.install, starts: 20, per: 1m}\n  - {action: apt.install, starts: 5, per: 1s}", wantErr: `rate_limits[1].action "apt.install": listed twice`},
		{name: "a map, not a list", yaml: "rate_limits: {apt.install: 20}", wantErr: "rate_limits"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "controller.yaml")
			if err := os.WriteFile(path, []byte(tt.yaml+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg := DefaultConfig()
			err := LoadConfig(path, &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			if err == nil {
				_, err = New(cfg)
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("accepted, want an error with %q", tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("error %q, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

// The most specific limit counts a task, and only it.
func TestRateLimitMatch(t *testing.T) {
	rl := newRateLimits([]RateLimit{
		{Action: "apt.install", Starts: 1, Per: config.Duration(time.Minute)},
		{Action: "apt.*", Starts: 2, Per: config.Duration(time.Minute)},
		{Action: "*", Starts: 3, Per: config.Duration(time.Minute)},
	})
	for task, want := range map[string]string{"apt.install": "apt.install", "apt.remove": "apt.*", "systemd.restart": "*"} {
		b, a, _ := strings.Cut(task, ".")
		l := rl.match(api.Task{Backend: b, Action: a})
		if l == nil || l.Action != want {
			t.Errorf("%s: limit %+v, want %s", task, l, want)
		}
	}
	if l := newRateLimits(nil).match(api.Task{Backend: "apt", Action: "install"}); l != nil {
		t.Errorf("no limits configured, got %+v", l)
	}
	if k := rateKey("apt.*"); strings.Contains(k, "*") {
		t.Errorf("key %q holds '*'", k)
	}
}

// The sliding window: grants up to the limit, then none until the oldest
// grant leaves the window, whatever window one looks at.
func TestRateWindowAdmit(t *testing.T) {
	l := RateLimit{Action: "apt.install", Starts: 3, Per: config.Duration(10 * time.Second)}
	t0 := time.UnixMilli(1_000_000)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var w rateWindow
	steps := []struct {
		now         time.Duration
		want        int
		wantGranted int
		wantNext    time.Duration // from t0; only when fewer were granted
	}{
		{now: 0, want: 2, wantGranted: 2},
		{now: 4 * time.Second, want: 5, wantGranted: 1, wantNext: 10 * time.Second},
		{now: 9 * time.Second, want: 4, wantGranted: 0, wantNext: 10 * time.Second},
		// The first two leave the window at 10s; the one of 4s stays.
		{now: 10 * time.Second, want: 4, wantGranted: 2, wantNext: 14 * time.Second},
		{now: 14 * time.Second, want: 4, wantGranted: 1, wantNext: 20 * time.Second},
		{now: 31 * time.Second, want: 1, wantGranted: 1},
	}
	for i, s := range steps {
		got, next := w.admit(l, at(s.now), s.want)
		if got != s.wantGranted {
			t.Fatalf("step %d: granted %d, want %d (log %+v)", i, got, s.wantGranted, w.Log)
		}
		if got < s.want && !next.Equal(at(s.wantNext)) {
			t.Fatalf("step %d: next %s, want %s", i, next.Sub(t0), s.wantNext)
		}
	}
	if w.Starts != 3 || w.PerMS != 10_000 {
		t.Fatalf("window records %d per %dms", w.Starts, w.PerMS)
	}
}

// Grants close together share one log entry, so the log stays short even
// for a limit of many starts taken one at a time; joining never lets more
// through.
func TestRateWindowStaysShort(t *testing.T) {
	l := RateLimit{Action: "apt.install", Starts: 10_000, Per: config.Duration(time.Minute)}
	var w rateWindow
	t0 := time.UnixMilli(5_000_000)
	total := 0
	for i := range 20_000 {
		g, _ := w.admit(l, t0.Add(time.Duration(i)*time.Millisecond), 1)
		total += g
	}
	if total != 10_000 {
		t.Fatalf("granted %d within one window, want 10000", total)
	}
	if len(w.Log) > 2*mergeFraction {
		t.Fatalf("log holds %d entries", len(w.Log))
	}
}
