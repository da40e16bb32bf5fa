// Command fakeping stands in for ping in tests. It appends its argv as a
// JSON line to $FAKE_PING_LOG. The host (last argument) picks the
// behaviour: block.example hangs, unreachable.example gets no reply (exit
// 1), anything else answers like iputils ping.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

func main() {
	f, err := os.OpenFile(os.Getenv("FAKE_PING_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	line, _ := json.Marshal(os.Args[1:])
	fmt.Fprintf(f, "%s\n", line)
	f.Close()
	host := os.Args[len(os.Args)-1]
	fmt.Printf("PING %s (192.0.2.1) 56(84) bytes of data.\n", host)
	switch host {
	case "block.example":
		time.Sleep(time.Hour)
	case "unreachable.example":
		fmt.Printf("\n--- %s ping statistics ---\n2 packets transmitted, 0 received, 100%% packet loss, time 1001ms\n", host)
		os.Exit(1)
	}
	fmt.Printf("64 bytes from 192.0.2.1: icmp_seq=1 ttl=64 time=0.045 ms\n")
	fmt.Printf("\n--- %s ping statistics ---\n2 packets transmitted, 2 received, 0%% packet loss, time 1001ms\n", host)
	fmt.Printf("rtt min/avg/max/mdev = 0.040/0.050/0.060/0.010 ms\n")
}
