package cli

import (
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/gridfleet/terraform-provider-grid/internal/logflags"
)

// logOptions are the --log-level and --log-format flags of the long-running
// commands (controller, agent, dev), shared with the grid-agent binary.
type logOptions struct {
	logflags.Options
}

func (o *logOptions) register(fs *pflag.FlagSet, defaultLevel string) {
	o.Register(fs, defaultLevel)
}

// logger builds the slog logger the flags ask for, writing to w; a rejected
// value is a usage error.
func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	l, err := o.Logger(w)
	if err != nil {
		return nil, usageErrorf("%w", err)
	}
	return l, nil
}
