// Command fakeapt stands in for apt-get and dpkg-query (chosen by the name
// it runs under) in tests. Every call appends {"prog","argv","frontend"} as
// a JSON line to $FAKE_APT_DIR/argv.log. Installed packages are files
// $FAKE_APT_DIR/installed/<pkg> holding the version; available ones are
// $FAKE_APT_DIR/avail/<pkg>. Installing a package named "block" hangs.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

var dir = os.Getenv("FAKE_APT_DIR")

func main() {
	prog := filepath.Base(os.Args[0])
	f, err := os.OpenFile(filepath.Join(dir, "argv.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fail(1, err.Error())
	}
	line, _ := json.Marshal(map[string]any{"prog": prog, "argv": os.Args[1:], "frontend": os.Getenv("DEBIAN_FRONTEND")})
	fmt.Fprintf(f, "%s\n", line)
	f.Close()

	var pos []string
	simulate := false
	args := os.Args[1:]
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			pos = append(pos, args[i+1:]...)
			i = len(args)
		case a == "-o" || a == "-f":
			i++ // takes a value
		case a == "-s":
			simulate = true
		case strings.HasPrefix(a, "-"):
		default:
			pos = append(pos, a)
		}
	}
	if prog == "dpkg-query" {
		for _, p := range pos {
			if v, err := os.ReadFile(filepath.Join(dir, "installed", p)); err == nil {
				fmt.Printf("install ok installed %s\n", v)
			} else {
				fail(1, "dpkg-query: no packages found matching "+p)
			}
		}
		return
	}
	if len(pos) == 0 {
		fail(100, "E: no verb")
	}
	verb, pkgs := pos[0], pos[1:]
	var inst, remv int
	switch verb {
	case "update":
	case "install":
		for _, p := range pkgs {
			name, ver, _ := strings.Cut(p, "=")
			if name == "block" {
				time.Sleep(time.Hour)
			}
			avail, err := os.ReadFile(filepath.Join(dir, "avail", name))
			if err != nil {
				fail(100, "E: Unable to locate package "+name)
			}
			if ver == "" {
				ver = string(avail)
			}
			fmt.Printf("Inst %s (%s fake)\n", name, ver)
			inst++
			if !simulate {
				write(filepath.Join(dir, "installed", name), ver)
			}
		}
	case "remove", "purge":
		for _, p := range pkgs {
			fmt.Printf("Remv %s\n", p)
			remv++
			if !simulate {
				os.Remove(filepath.Join(dir, "installed", p))
			}
		}
	case "upgrade", "dist-upgrade":
		ents, _ := os.ReadDir(filepath.Join(dir, "installed"))
		for _, e := range ents {
			cur, _ := os.ReadFile(filepath.Join(dir, "installed", e.Name()))
			avail, err := os.ReadFile(filepath.Join(dir, "avail", e.Name()))
			if err == nil && string(avail) != string(cur) {
				fmt.Printf("Inst %s [%s] (%s fake)\n", e.Name(), cur, avail)
				inst++
				if !simulate {
					write(filepath.Join(dir, "installed", e.Name()), string(avail))
				}
			}
		}
		fmt.Printf("%d upgraded, 0 newly installed, 0 to remove and 0 not upgraded.\n", inst)
		return
	default:
		fail(100, "E: Invalid operation "+verb)
	}
	fmt.Printf("0 upgraded, %d newly installed, %d to remove and 0 not upgraded.\n", inst, remv)
}

func write(path, s string) {
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		fail(1, err.Error())
	}
}

func fail(code int, msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(code)
}
