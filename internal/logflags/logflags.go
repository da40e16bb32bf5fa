// Package logflags holds the --log-level and --log-format flags of GRID's
// long-running commands and the slog logger they ask for. It is shared by
// the grid binary and the slim grid-agent binary, so it imports nothing but
// the standard library and pflag.
package logflags

import (
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// Options are the values of the two flags.
type Options struct {
	Level  string
	Format string
}

// Register adds --log-level (defaulting to defaultLevel) and --log-format to
// fs.
func (o *Options) Register(fs *pflag.FlagSet, defaultLevel string) {
	fs.StringVar(&o.Level, "log-level", defaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&o.Format, "log-format", "text", "log format: text or json")
}

// Logger builds the slog logger the flags ask for, writing to w. The error
// names the flag whose value was rejected.
func (o *Options) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(o.Level) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.Level)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", o.Format)
}
