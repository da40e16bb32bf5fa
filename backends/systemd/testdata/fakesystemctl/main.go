// Command fakesystemctl stands in for systemctl in tests. It appends its
// argv as one JSON line to $FAKE_SYSTEMCTL_DIR/argv.log and keeps unit
// state in $FAKE_SYSTEMCTL_DIR/<unit> as "active sub unitfile". A unit whose
// name starts with "block" hangs on every verb but show. daemon-reload
// (no unit) is logged and succeeds.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	dir := os.Getenv("FAKE_SYSTEMCTL_DIR")
	f, err := os.OpenFile(filepath.Join(dir, "argv.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(os.Args[1:])
	fmt.Fprintf(f, "%s\n", line)
	f.Close()

	var pos []string
	dashdash := false
	for _, a := range os.Args[1:] {
		switch {
		case dashdash:
			pos = append(pos, a)
		case a == "--":
			dashdash = true
		case strings.HasPrefix(a, "-"):
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) == 1 && pos[0] == "daemon-reload" {
		return
	}
	if len(pos) != 2 {
		fmt.Fprintf(os.Stderr, "want verb and one unit, got %q\n", pos)
		os.Exit(2)
	}
	verb, unit := pos[0], pos[1]
	path := filepath.Join(dir, "units", unit)
	b, err := os.ReadFile(path)
	if err != nil {
		if verb == "show" {
			fmt.Print("LoadState=not-found\nActiveState=inactive\nSubState=dead\nUnitFileState=\n")
			return
		}
		fmt.Fprintf(os.Stderr, "Unit %s not found.\n", unit)
		os.Exit(5)
	}
	st := strings.Fields(string(b))
	if verb != "show" && strings.HasPrefix(unit, "block") {
		time.Sleep(time.Hour)
	}
	switch verb {
	case "show":
		fmt.Printf("LoadState=loaded\nActiveState=%s\nSubState=%s\nUnitFileState=%s\n", st[0], st[1], st[2])
		return
	case "start", "restart":
		st[0], st[1] = "active", "running"
	case "stop":
		st[0], st[1] = "inactive", "dead"
	case "reload":
	case "enable":
		st[2] = "enabled"
	case "disable":
		st[2] = "disabled"
	default:
		fmt.Fprintf(os.Stderr, "unknown verb %s\n", verb)
		os.Exit(1)
	}
	if err := os.WriteFile(path, []byte(strings.Join(st, " ")), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
