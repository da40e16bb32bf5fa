package controller

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	rtmetrics "runtime/metrics"
	"strings"
	"time"
)

// startDebug serves the Go profiler (/debug/pprof/) and the runtime's
// memory classes (/debug/memory) on debug_addr, a listener of its own so
// that profiles are never exposed on the API address by accident.
func (c *Controller) startDebug() (*http.Server, error) {
	ln, err := net.Listen("tcp", c.cfg.DebugAddr)
	if err != nil {
		return nil, fmt.Errorf("debug listen on %s: %w", c.cfg.DebugAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/memory", serveMemory)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	c.debugURL = "http://" + ln.Addr().String()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.Error("debug server", "err", err)
		}
	}()
	c.log.Info("debug server (pprof) listening", "addr", c.debugURL)
	return srv, nil
}

// serveMemory writes the runtime's memory metrics, one "name value" line
// each: where the process's memory goes (heap objects, unused heap, heap
// released to the OS, goroutine stacks, runtime metadata), the GC's goal
// and limit, and the goroutine count.
func serveMemory(w http.ResponseWriter, _ *http.Request) {
	var samples []rtmetrics.Sample
	for _, d := range rtmetrics.All() {
		if d.Kind != rtmetrics.KindUint64 {
			continue
		}
		if strings.HasPrefix(d.Name, "/memory/classes/") || strings.HasPrefix(d.Name, "/gc/") ||
			d.Name == "/sched/goroutines:goroutines" {
			samples = append(samples, rtmetrics.Sample{Name: d.Name})
		}
	}
	rtmetrics.Read(samples)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	for _, s := range samples {
		_, _ = fmt.Fprintf(w, "%s %d\n", s.Name, s.Value.Uint64())
	}
}
