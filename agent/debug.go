package agent

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startDebug serves the Go profiler (/debug/pprof/) on debug_addr, a
// listener of its own (as the controller's) so that profiles are never
// exposed on the metrics address by accident.
func (a *Agent) startDebug() error {
	if a.cfg.DebugAddr == "" {
		return nil
	}
	ln, err := net.Listen("tcp", a.cfg.DebugAddr)
	if err != nil {
		return fmt.Errorf("agent %s: debug listen on %s: %w", a.id, a.cfg.DebugAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.obs.mu.Lock()
	a.obs.debugSrv = srv
	a.obs.debugURL = "http://" + ln.Addr().String()
	a.obs.mu.Unlock()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			a.log.Error("debug server", "err", err)
		}
	}()
	a.log.Info("debug server (pprof) listening", "url", a.DebugURL())
	return nil
}

// DebugURL is the base URL of the profiler, "" when DebugAddr is not set or
// the agent has not started.
func (a *Agent) DebugURL() string {
	a.obs.mu.Lock()
	defer a.obs.mu.Unlock()
	return a.obs.debugURL
}
