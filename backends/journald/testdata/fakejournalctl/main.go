// Command fakejournalctl stands in for journalctl in tests. It appends its
// argv as one JSON line to $FAKE_JOURNALCTL_DIR/argv.log. Logs come from
// $FAKE_JOURNALCTL_DIR/entries.jsonl (journalctl -o json lines), filtered
// by --unit and --priority and cut by --lines as journalctl does; a unit
// whose name starts with "block" hangs, "fail.service" fails.
// --list-boots prints JSON, or text when $FAKE_JOURNALCTL_TEXT is set.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

var prios = map[string]int{"emerg": 0, "alert": 1, "crit": 2, "err": 3, "warning": 4, "notice": 5, "info": 6, "debug": 7}

func main() {
	dir := os.Getenv("FAKE_JOURNALCTL_DIR")
	f, err := os.OpenFile(filepath.Join(dir, "argv.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(os.Args[1:])
	fmt.Fprintf(f, "%s\n", line)
	f.Close()

	opts := map[string]string{}
	for _, a := range os.Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		opts[k] = v
	}
	if _, ok := opts["--list-boots"]; ok {
		if os.Getenv("FAKE_JOURNALCTL_TEXT") != "" {
			fmt.Println("IDX BOOT ID                          FIRST ENTRY                 LAST ENTRY")
			fmt.Println(" -1 0123456789abcdef0123456789abcdef Mon 2026-11-23 08:00:00 UTC Mon 2026-11-23 20:00:00 UTC")
			fmt.Println("  0 fedcba9876543210fedcba9876543210 Tue 2026-11-24 08:00:00 UTC Tue 2026-11-24 12:00:00 UTC")
			return
		}
		fmt.Println(`[{"index":-1,"boot_id":"0123456789abcdef0123456789abcdef","first_entry":1795420800000000,"last_entry":1795464000000000},` +
			`{"index":0,"boot_id":"fedcba9876543210fedcba9876543210","first_entry":1795507200000000,"last_entry":1795521600000000}]`)
		return
	}
	if _, ok := opts["--disk-usage"]; ok {
		fmt.Println("Archived and active journals take up 24.0M in the file system.")
		return
	}
	unit := opts["--unit"]
	if strings.HasPrefix(unit, "block") {
		time.Sleep(time.Hour)
	}
	if unit == "fail.service" {
		fmt.Fprintln(os.Stderr, "Failed to open journal: Permission denied")
		os.Exit(1)
	}
	in, err := os.Open(filepath.Join(dir, "entries.jsonl"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer in.Close()
	var out []string
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var e map[string]any
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if unit != "" && e["_SYSTEMD_UNIT"] != unit {
			continue
		}
		if p, ok := opts["--priority"]; ok {
			have, _ := strconv.Atoi(fmt.Sprint(e["PRIORITY"]))
			if have > prios[p] {
				continue
			}
		}
		out = append(out, sc.Text())
	}
	if n, ok := opts["--lines"]; ok {
		if k, _ := strconv.Atoi(n); k < len(out) {
			out = out[len(out)-k:]
		}
	}
	for _, l := range out {
		fmt.Println(l)
	}
}
