// Command fakeaccounts stands in for getent, id, useradd, usermod and the
// rest in tests that check the argv the user backend passes: it appends
// its name and argv as one JSON line to $FAKE_ACCOUNTS_DIR/argv.log. As
// getent it finds only users that useradd made (exit 2 otherwise), and a
// name starting with "block" hangs, for the cancellation test.
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
	name := filepath.Base(os.Args[0])
	f, err := os.OpenFile(filepath.Join(os.Getenv("FAKE_ACCOUNTS_DIR"), "argv.log"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	line, _ := json.Marshal(append([]string{name}, os.Args[1:]...))
	fmt.Fprintf(f, "%s\n", line)
	f.Close()
	last := os.Args[len(os.Args)-1]
	made := filepath.Join(os.Getenv("FAKE_ACCOUNTS_DIR"), "user-"+last)
	switch name {
	case "getent":
		if strings.HasPrefix(last, "block") {
			time.Sleep(time.Hour)
		}
		if _, err := os.Stat(made); err == nil && os.Args[1] == "passwd" {
			fmt.Printf("%s:x:1001:1001::/home/%s:/bin/sh\n", last, last)
			return
		}
		os.Exit(2)
	case "useradd":
		_ = os.WriteFile(made, nil, 0o644)
	case "id":
		fmt.Println(last)
	}
}
