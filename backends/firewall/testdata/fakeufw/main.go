// Command fakeufw stands in for ufw in tests: "ufw status" says it is
// active, as on a host whose firewall ufw manages.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "status" {
		fmt.Println("Status: active")
		return
	}
	os.Exit(1)
}
