package agent

import (
	"os"
	"runtime"
)

// ApplyProcessSettings applies the settings that belong to the whole
// process rather than to one agent, for a process that runs one agent (grid
// agent): GOMAXPROCS (cfg.GOMAXPROCS, else DefaultGOMAXPROCS), unless the
// GOMAXPROCS environment variable is set. Setting it also stops the runtime
// from re-reading the CPU limit every second. Programs that run agents in
// process (tests, grid bench) do not call it. It returns GOMAXPROCS in
// effect.
func ApplyProcessSettings(cfg Config) int {
	if os.Getenv("GOMAXPROCS") != "" {
		return runtime.GOMAXPROCS(0)
	}
	n := cfg.GOMAXPROCS
	if n <= 0 {
		n = DefaultGOMAXPROCS
	}
	runtime.GOMAXPROCS(n)
	return n
}
