// Package sysinfo is the read-only sysinfo backend: hostname, uptime, OS
// release, disk usage, memory and load, read from /proc, /etc/os-release
// and statfs(2). Facts carry the numbers; Output is a one-line summary.
package sysinfo

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
)

// Backend is the sysinfo backend.
type Backend struct{}

// New returns the sysinfo backend.
func New() *Backend { return &Backend{} }

// Schema declares the queries.
func (*Backend) Schema() api.BackendSchema {
	q := func(name, desc string, params ...api.ParamSchema) api.ActionSchema {
		return api.ActionSchema{Name: name, Description: desc, ReadOnly: true, Idempotent: true, CheckMode: true, Params: params}
	}
	path := api.ParamSchema{Name: "path", Type: api.TypeString, Default: "/", Pattern: `^/`, Description: "A path on the filesystem to measure."}
	return api.BackendSchema{
		Name:        "sysinfo",
		Description: "Read-only facts about the node: hostname, uptime, OS, disk, memory, load.",
		Actions: []api.ActionSchema{
			q("hostname", "The node's hostname."),
			q("uptime", "Seconds since boot."),
			q("os", "OS release from /etc/os-release, kernel and architecture."),
			q("disk", "Size, free and available bytes and inodes of the filesystem holding path.", path),
			q("memory", "Memory and swap from /proc/meminfo, in bytes."),
			q("load", "Load averages and process counts from /proc/loadavg."),
			q("cpu", "CPU model, logical CPUs, cores and sockets from /proc/cpuinfo; time spent per mode since boot from /proc/stat."),
			q("status", "All of the above (disk of /)."),
		},
	}
}

// Run executes one query.
func (*Backend) Run(ctx context.Context, req *backends.Request) (*backends.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sysinfo: %w", context.Cause(ctx))
	}
	if req.Action == "status" {
		facts := map[string]any{}
		var lines []string
		for _, a := range []string{"hostname", "os", "uptime", "load", "memory", "disk"} {
			f, line, err := query(a, "/")
			if err != nil {
				return nil, err
			}
			facts[a] = f
			lines = append(lines, line)
		}
		return &backends.Result{Output: strings.Join(lines, "; "), Facts: facts}, nil
	}
	f, line, err := query(req.Action, req.Params["path"])
	if err != nil {
		return nil, err
	}
	return &backends.Result{Output: line, Facts: f}, nil
}

func query(action, path string) (map[string]any, string, error) {
	switch action {
	case "hostname":
		h, err := os.Hostname()
		if err != nil {
			return nil, "", fmt.Errorf("hostname: %w", err)
		}
		return map[string]any{"hostname": h}, "hostname " + h, nil
	case "uptime":
		return uptime()
	case "os":
		return osRelease("/etc/os-release")
	case "disk":
		return disk(path)
	case "memory":
		return memory("/proc/meminfo")
	case "load":
		return load("/proc/loadavg")
	case "cpu":
		return cpu("/proc/cpuinfo", "/proc/stat")
	}
	return nil, "", fmt.Errorf("%w %q", backends.ErrUnknownAction, action)
}

func uptime() (map[string]any, string, error) {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return nil, "", fmt.Errorf("uptime: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return nil, "", fmt.Errorf("uptime: unexpected /proc/uptime %q", b)
	}
	secs, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return nil, "", fmt.Errorf("uptime: %w", err)
	}
	d := time.Duration(secs) * time.Second
	return map[string]any{"seconds": secs}, "up " + d.String(), nil
}

// osRelease reads the KEY=value file described in os-release(5).
func osRelease(path string) (map[string]any, string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("os: %w", err)
	}
	defer file.Close()
	kv := map[string]string{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		k, v, ok := strings.Cut(line, "=")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		if uq, err := strconv.Unquote(v); err == nil {
			v = uq
		} else {
			v = strings.Trim(v, `'"`)
		}
		kv[k] = v
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("os: %w", err)
	}
	kernel, arch := uname()
	facts := map[string]any{
		"id": kv["ID"], "version_id": kv["VERSION_ID"], "name": kv["NAME"],
		"pretty_name": kv["PRETTY_NAME"], "version_codename": kv["VERSION_CODENAME"],
		"kernel": kernel, "arch": arch,
	}
	return facts, fmt.Sprintf("%s, kernel %s %s", kv["PRETTY_NAME"], kernel, arch), nil
}

func disk(path string) (map[string]any, string, error) {
	st, err := statfs(path)
	if err != nil {
		return nil, "", fmt.Errorf("disk %s: %w", path, err)
	}
	total, free, avail := st.blocks*st.bsize, st.bfree*st.bsize, st.bavail*st.bsize
	used := total - free
	pct := 0.0
	// df's Use%: used over what a non-root user could have.
	if used+avail > 0 {
		pct = float64(used) * 100 / float64(used+avail)
	}
	facts := map[string]any{
		"path": path, "total_bytes": total, "free_bytes": free, "available_bytes": avail,
		"used_bytes": used, "used_pct": round1(pct), "inodes_total": st.files, "inodes_free": st.ffree,
	}
	return facts, fmt.Sprintf("disk %s: %s used of %s (%.1f%%), %s available", path, human(used), human(total), pct, human(avail)), nil
}

func memory(path string) (map[string]any, string, error) {
	file, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("memory: %w", err)
	}
	defer file.Close()
	kb := map[string]uint64{}
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		n, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		kb[k] = n
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("memory: %w", err)
	}
	if kb["MemTotal"] == 0 {
		return nil, "", fmt.Errorf("memory: no MemTotal in %s", path)
	}
	total, avail := kb["MemTotal"]*1024, kb["MemAvailable"]*1024
	facts := map[string]any{
		"total_bytes": total, "free_bytes": kb["MemFree"] * 1024, "available_bytes": avail,
		"buffers_bytes": kb["Buffers"] * 1024, "cached_bytes": kb["Cached"] * 1024,
		"swap_total_bytes": kb["SwapTotal"] * 1024, "swap_free_bytes": kb["SwapFree"] * 1024,
		"used_pct": round1(float64(total-avail) * 100 / float64(total)),
	}
	return facts, fmt.Sprintf("memory: %s available of %s", human(avail), human(total)), nil
}

func load(path string) (map[string]any, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("load: %w", err)
	}
	// "0.52 0.58 0.59 2/1234 56789"
	f := strings.Fields(string(b))
	if len(f) < 4 {
		return nil, "", fmt.Errorf("load: unexpected %s %q", path, b)
	}
	var avg [3]float64
	for i := range avg {
		if avg[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return nil, "", fmt.Errorf("load: %w", err)
		}
	}
	running, total, _ := strings.Cut(f[3], "/")
	r, _ := strconv.Atoi(running)
	t, _ := strconv.Atoi(total)
	facts := map[string]any{"load1": avg[0], "load5": avg[1], "load15": avg[2], "running": r, "processes": t}
	return facts, fmt.Sprintf("load %.2f %.2f %.2f", avg[0], avg[1], avg[2]), nil
}

// cpu reads the processors of cpuinfo (x86 and arm name the model
// differently) and the aggregate "cpu" line of stat.
func cpu(cpuinfo, stat string) (map[string]any, string, error) {
	file, err := os.Open(cpuinfo)
	if err != nil {
		return nil, "", fmt.Errorf("cpu: %w", err)
	}
	defer file.Close()
	var logical int
	model, vendor, mhz := "", "", 0.0
	sockets, cores := map[string]bool{}, map[string]bool{}
	physical := ""
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		switch k {
		case "processor":
			logical++
		case "model name", "Model", "cpu model":
			if model == "" {
				model = v
			}
		case "vendor_id", "CPU implementer":
			if vendor == "" {
				vendor = v
			}
		case "cpu MHz":
			if mhz == 0 {
				mhz, _ = strconv.ParseFloat(v, 64)
			}
		case "physical id":
			physical = v
			sockets[v] = true
		case "core id":
			cores[physical+"/"+v] = true
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("cpu: %w", err)
	}
	if logical == 0 {
		return nil, "", fmt.Errorf("cpu: no processor in %s", cpuinfo)
	}
	facts := map[string]any{"logical": logical, "model": model, "vendor": vendor, "mhz": round1(mhz),
		"sockets": len(sockets), "cores": len(cores)}
	// Machines whose cpuinfo names no topology (most arm ones) count
	// every processor as a core.
	if len(cores) == 0 {
		facts["cores"] = logical
	}
	b, err := os.ReadFile(stat)
	if err != nil {
		return nil, "", fmt.Errorf("cpu: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[0] != "cpu" {
			continue
		}
		// user nice system idle iowait irq softirq steal, in clock ticks.
		var ticks [8]float64
		total := 0.0
		for i := range ticks {
			if i+1 < len(f) {
				ticks[i], _ = strconv.ParseFloat(f[i+1], 64)
				total += ticks[i]
			}
		}
		if total > 0 {
			pct := func(v float64) float64 { return round1(v * 100 / total) }
			facts["since_boot_pct"] = map[string]any{"user": pct(ticks[0] + ticks[1]), "system": pct(ticks[2] + ticks[5] + ticks[6]),
				"idle": pct(ticks[3]), "iowait": pct(ticks[4]), "steal": pct(ticks[7])}
		}
		break
	}
	return facts, fmt.Sprintf("cpu: %d logical, %s", logical, model), nil
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

func human(b uint64) string {
	const unit = 1024
	if b < unit {
		return fmt.Sprintf("%d B", b)
	}
	div, exp := uint64(unit), 0
	for n := b / unit; n >= unit; n /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(b)/float64(div), "KMGTPE"[exp])
}

// Disk, Memory and Load are the disk, memory and load queries with their
// facts, for backends that judge the numbers (health's thresholds).
func Disk(path string) (map[string]any, string, error) { return disk(path) }

// Memory reads /proc/meminfo; see Disk.
func Memory() (map[string]any, string, error) { return memory("/proc/meminfo") }

// Load reads /proc/loadavg; see Disk.
func Load() (map[string]any, string, error) { return load("/proc/loadavg") }
