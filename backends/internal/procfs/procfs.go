// Package procfs reads the processes of the host from /proc: what the
// health and proc backends count, find and rank. Nothing here runs a
// program.
package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is the procfs mount point.
const Root = "/proc"

// ClockTicks is USER_HZ, the unit of /proc's CPU times. Linux fixes it at
// 100 on every architecture it exports to userspace.
const ClockTicks = 100

// Process is one process as /proc shows it.
type Process struct {
	PID, PPID int
	// Tgid is the process a thread belongs to: PID itself for a process,
	// another for a thread (whose /proc/TID exists too, though /proc does
	// not list it).
	Tgid int
	// Name is the kernel's short name (comm, at most 15 bytes).
	Name  string
	State string
	UID   int
	// Cmdline is the argument vector; empty for kernel threads.
	Cmdline  []string
	Threads  int
	RSSBytes uint64
	// CPUTicks is user plus system time, StartTicks the start time after
	// boot, both in ClockTicks.
	CPUTicks, StartTicks uint64
}

// Command is the process's command line joined by spaces, or its name in
// brackets for a kernel thread (as ps shows it).
func (p Process) Command() string {
	if len(p.Cmdline) == 0 {
		return "[" + p.Name + "]"
	}
	return strings.Join(p.Cmdline, " ")
}

// Facts is the process as result facts.
func (p Process) Facts() map[string]any {
	return map[string]any{
		"pid": p.PID, "ppid": p.PPID, "name": p.Name, "state": p.State, "uid": p.UID,
		"command": p.Command(), "threads": p.Threads, "rss_bytes": p.RSSBytes,
		"cpu_seconds": float64(p.CPUTicks) / ClockTicks,
	}
}

// List reads every process under root (Root on a real host). A process
// that exits while being read is left out.
func List(root string) ([]Process, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var out []Process
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		p, err := Read(root, pid)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errGone) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

var errGone = errors.New("process gone")

// Read reads one process.
func Read(root string, pid int) (Process, error) {
	dir := filepath.Join(root, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	p, err := parseStat(stat)
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	if cmd, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil && len(cmd) > 0 {
		p.Cmdline = strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
	}
	status, err := os.Open(filepath.Join(dir, "status"))
	if err != nil {
		return Process{}, fmt.Errorf("process %d: %w", pid, err)
	}
	defer status.Close()
	sc := bufio.NewScanner(status)
	p.Tgid = p.PID
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Tgid:"); ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				p.Tgid = n
			}
			continue
		}
		if v, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				p.UID, _ = strconv.Atoi(f[0])
			}
			break
		}
	}
	return p, nil
}

// parseStat reads /proc/PID/stat (proc(5)). The name sits in parentheses
// and may itself hold spaces and parentheses, so the fields after it are
// counted from the last ')'.
func parseStat(b []byte) (Process, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		if len(bytes.TrimSpace(b)) == 0 {
			return Process{}, errGone
		}
		return Process{}, fmt.Errorf("unexpected stat %q", b)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil {
		return Process{}, fmt.Errorf("unexpected stat %q", b)
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 of proc(5): state.
	if len(f) < 22 {
		return Process{}, fmt.Errorf("unexpected stat %q", b)
	}
	num := func(i int) uint64 { n, _ := strconv.ParseUint(f[i], 10, 64); return n }
	ppid, _ := strconv.Atoi(f[1])
	return Process{
		PID: pid, PPID: ppid, Name: string(b[open+1 : end]), State: f[0],
		CPUTicks:   num(11) + num(12),
		Threads:    int(num(17)),
		StartTicks: num(19),
		RSSBytes:   num(21) * uint64(os.Getpagesize()),
	}, nil
}

// Matches reports whether p is called name: its short name, or the base
// name of its program (argv[0]), which the kernel's 15-byte name may cut.
func (p Process) Matches(name string) bool {
	if p.Name == name {
		return true
	}
	if len(p.Cmdline) > 0 {
		return filepath.Base(p.Cmdline[0]) == name
	}
	return false
}
