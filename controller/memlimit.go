package controller

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DefaultMemoryLimit is the controller's soft memory limit unless the
// config, or GOMEMLIMIT or GOGC in the environment, say otherwise (see
// Config.MemoryLimit). With 10,000 agents the memory the Go runtime cannot
// give back is about 250 MiB (the embedded NATS server's state for 10,000
// client connections, about 140 MiB of live heap, and its two goroutines per
// connection, at least 4 KiB of stack each), and the process's RSS also
// counts 20-30 MiB of the binary's mapped code and data, which the limit
// does not: 280 MiB keeps the RSS under 300 MiB there, and a small fleet
// never comes near it.
const DefaultMemoryLimit = 280 << 20

// minMemoryLimit is the smallest memory_limit accepted other than 0: below
// it the garbage collector would run nearly all the time even for a small
// fleet, which is a typo ("300" meant as MiB) more often than an intent.
const minMemoryLimit = 32 << 20

// ByteSize is a size in bytes, written in YAML and on the command line as
// the Go runtime writes GOMEMLIMIT: an integer with an optional unit B,
// KiB, MiB, GiB or TiB ("300MiB"); "0" or "off" is none.
type ByteSize int64

var byteUnits = []struct {
	suffix string
	mult   int64
}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}}

// ParseByteSize reads "300MiB", "1GiB", "1048576", "0" or "off".
func ParseByteSize(s string) (ByteSize, error) {
	v := strings.TrimSpace(s)
	if v == "off" {
		return 0, nil
	}
	mult := int64(1)
	for _, u := range byteUnits {
		if num, ok := strings.CutSuffix(v, u.suffix); ok {
			v, mult = strings.TrimSpace(num), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is not a size (examples: 300MiB, 1GiB, 0 or off for none)", s)
	}
	return ByteSize(n * mult), nil
}

// String writes the size with the largest unit that divides it.
func (b ByteSize) String() string {
	if b == 0 {
		return "0"
	}
	for _, u := range byteUnits {
		if int64(b)%u.mult == 0 {
			return strconv.FormatInt(int64(b)/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10) + "B"
}

// Set parses a flag value.
func (b *ByteSize) Set(s string) error {
	v, err := ParseByteSize(s)
	if err != nil {
		return err
	}
	*b = v
	return nil
}

// Type names the flag's value in help output.
func (b *ByteSize) Type() string { return "size" }

// UnmarshalYAML reads a size such as 300MiB.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// MarshalYAML writes the size with its unit.
func (b ByteSize) MarshalYAML() (any, error) { return b.String(), nil }

// memoryLimit decides the soft memory limit to set: the config's, unless
// the environment already tunes the collector (GOMEMLIMIT or GOGC, which the
// runtime applies itself) or the config turns it off. It returns the limit
// (0: leave the runtime alone) and why.
func (c Config) memoryLimit(getenv func(string) string) (int64, string) {
	for _, env := range []string{"GOMEMLIMIT", "GOGC"} {
		if v := getenv(env); v != "" {
			return 0, fmt.Sprintf("%s=%s is set in the environment", env, v)
		}
	}
	if c.MemoryLimit <= 0 {
		return 0, "memory_limit is 0"
	}
	return int64(c.MemoryLimit), "memory_limit"
}

// memoryLimitFloorEvery is how often RunMemoryLimit looks at the live heap
// and whether the controller is running jobs.
const memoryLimitFloorEvery = 100 * time.Millisecond

// effectiveMemoryLimit is the limit to set for a live heap (bytes marked by
// the last collection): the configured one, but never below twice the live
// heap. Without a limit the collector lets the heap grow to about twice the
// live heap (GOGC=100) before the next cycle; keeping the limit above that
// means it only adds cycles for memory outside the heap's growth — goroutine
// stacks that grew and are idle, freed pages not yet returned to the OS —
// and never makes the collector run back to back because a fleet or a burst
// of jobs outgrew the configured figure.
//
// While the controller runs jobs (busy) there is no limit: a fan-out to
// 10,000 nodes allocates megabytes of results and JSON in a burst, and with
// the limit the collector would run back to back through it (a 10,000-node
// round took six times as long). The limit is for the long idle stretches in
// which agents only heartbeat; it takes effect again once the jobs are done.
func effectiveMemoryLimit(limit, live int64, busy bool) int64 {
	if busy || live > math.MaxInt64/2 {
		return math.MaxInt64
	}
	return max(limit, 2*live)
}

// RunMemoryLimit sets the process's soft memory limit
// (runtime/debug.SetMemoryLimit) from the config and keeps it at least
// twice the live heap and lifted while busy reports running jobs (see
// effectiveMemoryLimit), checking every 100ms until ctx ends, when it puts
// back the limit it found. busy may be nil (never busy). Nothing is set when
// GOMEMLIMIT or GOGC is in the environment (getenv, normally os.Getenv) or
// memory_limit is 0. It is for a process that is a controller above all
// (grid controller): the limit holds for everything in the process. It
// returns the configured limit, or 0 and the reason none is set.
func (c Config) RunMemoryLimit(ctx context.Context, getenv func(string) string, log *slog.Logger, busy func() bool) (int64, string) {
	limit, why := c.memoryLimit(getenv)
	if limit <= 0 {
		return 0, why
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	live := []rtmetrics.Sample{{Name: "/gc/heap/live:bytes"}}
	current := func() int64 {
		rtmetrics.Read(live)
		if live[0].Value.Kind() != rtmetrics.KindUint64 {
			return limit
		}
		return effectiveMemoryLimit(limit, int64(min(live[0].Value.Uint64(), math.MaxInt64)), busy != nil && busy())
	}
	set := current()
	prev := debug.SetMemoryLimit(set)
	go func() {
		t := time.NewTicker(memoryLimitFloorEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				debug.SetMemoryLimit(prev)
				return
			case <-t.C:
			}
			if next := current(); next != set {
				log.Debug("soft memory limit", "limit", ByteSize(next).String(), "configured", ByteSize(limit).String())
				debug.SetMemoryLimit(next)
				set = next
			}
		}
	}()
	return limit, why
}
