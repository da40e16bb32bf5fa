// Command processor is a test program for the exec backend. It reads
// requests from stdin (one, or with -daemon one per line until EOF) and
// acts on the payload:
//
//	{"echo": v}            done with {"echo": v, "argv": …, "pid": …, "changed": false}
//	{"progress": true}     progress 10 and 60, then done
//	{"slow_progress": m}   progress 50 with message m, a second later done
//	{"fail": "msg"}        "msg" on stderr, then an error line
//	{"sleep": "pidfile"}   start a child that sleeps, write its pid, hang
//	{"exit": n}            exit with status n without answering
//	{"noise": true}        a non-JSON line, then done with {"output": "quiet"}
//
// Invoked as "processor -child", it just sleeps.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"time"
)

type request struct {
	JobID   string         `json:"job_id"`
	Step    int            `json:"step"`
	Node    string         `json:"node"`
	Type    string         `json:"type"`
	Payload map[string]any `json:"payload"`
}

func main() {
	daemon := false
	for _, a := range os.Args[1:] {
		switch a {
		case "-child":
			time.Sleep(time.Hour)
			return
		case "-daemon":
			daemon = true
		}
	}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var req request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			fmt.Fprintln(os.Stderr, "bad request:", err)
			os.Exit(2)
		}
		handle(req)
		if !daemon {
			return
		}
	}
}

func emit(v map[string]any) {
	b, _ := json.Marshal(v)
	fmt.Printf("%s\n", b)
}

func handle(req request) {
	p := req.Payload
	switch {
	case p["echo"] != nil:
		emit(map[string]any{"status": "done", "job_id": req.JobID, "result": map[string]any{
			"echo": p["echo"], "argv": os.Args[1:], "pid": os.Getpid(), "type": req.Type, "changed": false,
			"job_id": req.JobID, "step": req.Step, "node": req.Node}})
	case p["slow_progress"] != nil:
		emit(map[string]any{"status": "progress", "pct": 50, "message": p["slow_progress"]})
		time.Sleep(time.Second)
		emit(map[string]any{"status": "done", "result": map[string]any{"output": "finished"}})
	case p["progress"] != nil:
		emit(map[string]any{"status": "progress", "pct": 10, "message": "starting"})
		emit(map[string]any{"status": "progress", "pct": 60, "msg": "halfway"})
		emit(map[string]any{"status": "done", "result": map[string]any{"n": 1}})
	case p["fail"] != nil:
		fmt.Fprintln(os.Stderr, "about to fail:", p["fail"])
		emit(map[string]any{"status": "error", "error": p["fail"]})
	case p["sleep"] != nil:
		child := exec.Command(os.Args[0], "-child")
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = os.WriteFile(p["sleep"].(string), []byte(strconv.Itoa(child.Process.Pid)), 0o644)
		time.Sleep(time.Hour)
	case p["exit"] != nil:
		fmt.Fprintln(os.Stderr, "exiting on purpose")
		os.Exit(int(p["exit"].(float64)))
	case p["noise"] != nil:
		fmt.Println("this is not json")
		emit(map[string]any{"status": "done", "result": map[string]any{"output": "quiet"}})
	default:
		emit(map[string]any{"status": "error", "error": "unknown payload"})
	}
}
