// Package cli holds the cobra commands of the grid binary. Commands stay
// thin: they parse flags, call the api client or the controller, agent and
// fleet packages, and print the result.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/controller"
)

// Exit codes of the grid binary.
const (
	ExitOK = 0
	// ExitFailed: a job failed, was cancelled or partially failed, or the
	// command could not do its work (controller unreachable, server error).
	ExitFailed = 1
	// ExitUsage: the input was rejected (bad flags, malformed job file, or
	// a 400 from the controller).
	ExitUsage = 2
	// ExitUnreachable: the job did not complete, and the only nodes that
	// kept it from completing were unreachable (offline when the target
	// was resolved, or went away during a step); no node failed.
	ExitUnreachable = 3
)

// exitError carries an exit code up to Execute. Commands return it so that
// cobra's own errors (unknown command, bad flags), which never pass through
// a command's RunE, can be told apart and mapped to ExitUsage.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf reports rejected input: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error a command returned to an exit code.
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		switch ae.StatusCode {
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			return ExitUsage
		}
	}
	var ve *api.ValidationError
	if errors.As(err, &ve) {
		return ExitUsage
	}
	return ExitFailed
}

// globals are the flags every command shares.
type globals struct {
	addr   string
	output string
	token  string
	cacert string
	// cert and key are a client certificate (mTLS).
	cert, key string
	timeout   time.Duration

	// version is the binary's version, set by -ldflags in main.
	version string

	stdout io.Writer
	stderr io.Writer
}

func (g *globals) json() bool { return g.output == "json" }

// apiToken is --token, else GRID_TOKEN.
func (g *globals) apiToken() string {
	if g.token != "" {
		return g.token
	}
	return api.DefaultClientConfig().Token
}

// envState says whether a secret's environment variable is set, for help
// texts that must not print its value.
func envState(v string) string {
	if v == "" {
		return "not set"
	}
	return "set"
}

func (g *globals) validate() error {
	switch g.output {
	case "table", "json":
	default:
		return usageErrorf("-o %q: want table or json", g.output)
	}
	if g.timeout <= 0 {
		return usageErrorf("--timeout must be positive")
	}
	return nil
}

// client builds the API client from the global flags.
func (g *globals) client() (*api.Client, error) {
	if err := g.validate(); err != nil {
		return nil, err
	}
	cc := api.ClientConfig{Address: g.addr, Token: g.apiToken(), CAFile: g.cacert, CertFile: g.cert, KeyFile: g.key, Timeout: g.timeout}
	if err := cc.Validate(); err != nil {
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("--addr: %w", err)}
	}
	c, err := api.NewClient(cc)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("TLS settings (--cacert, --client-cert, --client-key): %w", err)}
	}
	return c, nil
}

// NewRootCommand builds the grid command tree. stdout and stderr are where
// commands print; tests pass buffers.
func NewRootCommand(version string, stdout, stderr io.Writer) *cobra.Command {
	def := api.DefaultClientConfig()
	g := &globals{version: version, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:   "grid",
		Short: "GRID: run typed backend actions across a fleet of nodes",
		Long: `GRID runs jobs — trees of typed backend actions — across a fleet of agents
through a controller with an embedded NATS JetStream server.

Started by Terraform, the same binary serves the Terraform provider.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// A bare "grid" prints help rather than failing.
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", def.Address, "controller API address, or several of a cluster comma-separated (env GRID_ADDR)")
	pf.StringVarP(&g.output, "output", "o", "table", "output format: table or json")
	// The token's value is a secret: help shows whether GRID_TOKEN is set,
	// never what it holds, and the flag's default stays empty (the
	// environment is read when the flag is not given).
	pf.StringVar(&g.token, "token", "", "bearer token for the controller API (env GRID_TOKEN, "+envState(def.Token)+")")
	pf.StringVar(&g.cert, "client-cert", def.CertFile, "client certificate (PEM) for a controller that requires one (api_client_ca) (env GRID_CLIENT_CERT)")
	pf.StringVar(&g.key, "client-key", def.KeyFile, "key of --client-cert (PEM) (env GRID_CLIENT_KEY)")
	pf.StringVar(&g.cacert, "cacert", def.CAFile, "CA certificate (PEM) the controller's HTTPS certificate must chain to: its DATA_DIR/ca.pem (env GRID_CACERT)")
	pf.DurationVar(&g.timeout, "timeout", def.Timeout, "timeout of each API request (for 'job run': the job's timeout)")

	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})

	root.AddCommand(
		newJobCommand(g),
		newScheduleCommand(g),
		newNodeCommand(g),
		newStatusCommand(g),
		newBackendsCommand(g),
		newTokenCommand(g),
		newJoinTokenCommand(g),
		newSiteCommand(g),
		newAuditCommand(g),
		newVersionCommand(g),
		serverCommand(newControllerCommand(g), "The controller writes its admin token to DATA_DIR/"+controller.AdminTokenFile+
			" at first start; make more with \"grid token create\"."),
		serverCommand(newAgentCommand(g), "An agent talks to NATS (--nats), not to the API."),
		serverCommand(newDevCommand(g), "grid dev prints the GRID_ADDR, GRID_TOKEN and GRID_CACERT to use with it."),
		newBenchCommand(g),
		serverCommand(newProviderCommand(g), "Terraform configures the provider (address, token, ca_file) or it reads GRID_ADDR, GRID_TOKEN and GRID_CACERT."),
	)
	requireSubcommands(root)
	return root
}

// Execute runs the grid command line with os.Args and returns the exit code.
func Execute(version string) int {
	return run(context.Background(), version, os.Args[1:], os.Stdout, os.Stderr)
}

// run executes one command line; ctx ending stops long-running commands
// as a signal would.
func run(ctx context.Context, version string, args []string, stdout, stderr io.Writer) int {
	root := NewRootCommand(version, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			printError(stderr, ee.err)
		}
		return ee.code
	}
	// Errors that did not come through a command's RunE are cobra's own:
	// unknown commands and flags, wrong argument counts.
	printError(stderr, err)
	if cmd != nil {
		_, _ = fmt.Fprintf(stderr, "run '%s --help' for usage\n", cmd.CommandPath())
	}
	return ExitUsage
}

func printError(w io.Writer, err error) {
	// An unreachable controller says what to do about it; the context the
	// command wrapped around it would only bury that.
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		err = ue
	}
	_, _ = fmt.Fprintf(w, "error: %v\n", err)
}

// runE wraps a command body so its errors carry an exit code; see exitError.
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		if err == nil {
			return nil
		}
		var ee *exitError
		if errors.As(err, &ee) {
			return err
		}
		return &exitError{code: exitCode(err), err: err}
	}
}

// exactArgs is cobra.ExactArgs with a usage exit code and a message that
// names what is missing.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != len(names) {
			if len(names) == 0 {
				return usageErrorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
			}
			return usageErrorf("%s wants %d argument(s): %v, got %d", cmd.CommandPath(), len(names), names, len(args))
		}
		return nil
	}
}
