package cli

import (
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/pflag"
)

// logOptions are the --log-level and --log-format flags of the long-running
// commands (controller, agent, dev).
type logOptions struct {
	level  string
	format string
}

func (o *logOptions) register(fs *pflag.FlagSet, defaultLevel string) {
	fs.StringVar(&o.level, "log-level", defaultLevel, "log level: debug, info, warn or error")
	fs.StringVar(&o.format, "log-format", "text", "log format: text or json")
}

// logger builds the slog logger the flags ask for, writing to w.
func (o *logOptions) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	switch strings.ToLower(o.level) {
	case "debug":
		level = slog.LevelDebug
	case "info":
		level = slog.LevelInfo
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", o.level)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(o.format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", o.format)
}
