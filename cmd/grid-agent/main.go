// Command grid-agent is GRID's agent alone: the same agent, backends, flags,
// config file and environment as "grid agent", in a binary that holds
// nothing else (no controller, embedded NATS server, Terraform provider or
// trace exporters), so an idle agent stays small in memory. The grid-agent
// package ships it.
//
//	grid-agent --config /etc/grid/agent.yaml [flags]
//	grid-agent version
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"

	"github.com/gridfleet/terraform-provider-grid/agent"
	"github.com/gridfleet/terraform-provider-grid/agent/agentcmd"
)

// version is set at build time: go build -ldflags "-X main.version=1.2.3".
var version = "dev"

// gcPercent is the garbage collector's target when GOGC is not set. An
// idle agent's live heap is well under a MiB; at Go's default of 100 the
// heap it keeps between collections is most of its memory. 25 keeps an
// idle agent near 12 MiB of RSS; the collections it adds cost little CPU
// at an agent's load (a task's output is capped at max_output_bytes).
const gcPercent = 25

// Exit codes, as the grid binary's.
const (
	exitOK     = 0
	exitFailed = 1
	exitUsage  = 2
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if agent.Version == "dev" {
		agent.Version = version
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if len(args) == 1 && (args[0] == "version" || args[0] == "--version") {
		_, _ = fmt.Fprintf(stdout, "grid-agent %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		return exitOK
	}
	fs := pflag.NewFlagSet("grid-agent", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, `Usage: grid-agent [flags]
       grid-agent version

Run a GRID agent: register with the fleet and run backend actions. Settings
come from the defaults, then the --config YAML file, then the flags, each
overriding the one before; GRID_JOIN_TOKEN gives the join token when nothing
else does. SIGINT or SIGTERM stops taking commands, lets running tasks finish
and deregisters.

Flags:
%s`, fs.FlagUsages())
	}
	var opts agentcmd.Options
	opts.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return exitOK
		}
		_, _ = fmt.Fprintf(stderr, "error: %v\nrun 'grid-agent --help' for usage\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "error: unexpected argument %q (the only command is \"version\")\n", fs.Arg(0))
		return exitUsage
	}
	logger, err := opts.Logs.Logger(stderr)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	cfg, err := opts.Config(fs, os.Getenv)
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		return exitUsage
	}
	// No trace exporter here: that is what keeps the binary slim. An
	// operator who set OTEL_TRACES_EXPORTER is told so rather than left
	// wondering; "grid agent" exports traces.
	if v := os.Getenv("OTEL_TRACES_EXPORTER"); v != "" && v != "none" {
		logger.Warn("grid-agent exports no traces; run \"grid agent\" for OTEL_TRACES_EXPORTER", "OTEL_TRACES_EXPORTER", v)
	}
	// Once registered, the start-up's garbage (TLS handshakes, enrollment,
	// the schemas sent) is collected and its pages handed back at once
	// rather than over minutes by the runtime's background scavenger.
	if err := agentcmd.Run(ctx, cfg, logger, stderr, agentcmd.Hooks{Registered: debug.FreeOSMemory}); err != nil {
		_, _ = fmt.Fprintf(stderr, "error: %v\n", err)
		var ue *agentcmd.ErrUsage
		if errors.As(err, &ue) {
			return exitUsage
		}
		return exitFailed
	}
	return exitOK
}
