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

// busyHeadroom is what the limit leaves above the collector's own target
// while jobs run: room for the objects a fan-out round allocates between
// two looks at the live heap (a 10,000-node job's results and JSON are a
// few MiB) and for the heap's fragmentation, so that the limit never
// triggers a collection the collector would not have started itself.
const busyHeadroom = 64 << 20

// memStats are the runtime's figures the limit is computed from.
type memStats struct {
	// live is the heap the last collection marked.
	live int64
	// other is the memory the runtime holds outside heap objects and free
	// pages: goroutine stacks, the heap's unused span space, GC metadata,
	// buffers. The collector's GOGC target does not count it; the soft
	// memory limit does.
	other int64
}

// effectiveMemoryLimit is the soft memory limit to set, always (a
// controller behind a schedule that fires every minute or a busy CI runs
// jobs back to back, so a limit that holds only between jobs would not
// hold at all).
//
// Idle, it is the configured limit but never below twice the live heap.
// Without a limit the collector lets the heap grow to about twice the live
// heap (GOGC=100) before the next cycle; keeping the limit above that means
// it only adds cycles for memory outside the heap's growth — goroutine
// stacks that grew and are idle, freed pages not yet returned to the OS —
// which is what brings a 10,000-agent controller's heartbeating RSS down.
//
// Busy (jobs running), the floor is the collector's own target plus what it
// does not count: twice the live heap, plus the runtime's other memory
// (stacks above all, which a fan-out to 10,000 agents grows by a hundred
// MiB or more), plus busyHeadroom. With the idle floor a 10,000-node round
// took six times as long: stacks filled the limit and the collector ran
// back to back. With this one the limit never collects sooner than GOGC
// would, yet it still makes the runtime return freed pages above it, so
// the process holds at most max(memory_limit, 2×live + other + 64 MiB) of
// Go memory however long jobs keep running.
func effectiveMemoryLimit(limit int64, m memStats, busy bool) int64 {
	const most = math.MaxInt64
	live, other := max(m.live, 0), max(m.other, 0)
	if live > most/2 {
		return most
	}
	floor := 2 * live
	if busy {
		if other > most-floor-busyHeadroom {
			return most
		}
		floor += other + busyHeadroom
	}
	return max(limit, floor)
}

// readMemStats reads the figures effectiveMemoryLimit needs from
// runtime/metrics (cheap: no stop-the-world, unlike ReadMemStats).
func readMemStats(samples []rtmetrics.Sample) (memStats, bool) {
	rtmetrics.Read(samples)
	v := make([]int64, len(samples))
	for i, s := range samples {
		if s.Value.Kind() != rtmetrics.KindUint64 {
			return memStats{}, false
		}
		v[i] = int64(min(s.Value.Uint64(), math.MaxInt64))
	}
	// samples: live, total, heap objects, heap free, heap released.
	return memStats{live: v[0], other: max(v[1]-v[2]-v[3]-v[4], 0)}, true
}

func memStatsSamples() []rtmetrics.Sample {
	return []rtmetrics.Sample{
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/total:bytes"},
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
		{Name: "/memory/classes/heap/released:bytes"},
	}
}

// RunMemoryLimit sets the process's soft memory limit
// (runtime/debug.SetMemoryLimit) from the config and keeps it at least
// twice the live heap, with a higher floor while busy reports running jobs
// (see effectiveMemoryLimit), checking every 100ms until ctx ends, when it puts
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
	samples := memStatsSamples()
	current := func() int64 {
		m, ok := readMemStats(samples)
		if !ok {
			return limit
		}
		return effectiveMemoryLimit(limit, m, busy != nil && busy())
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
