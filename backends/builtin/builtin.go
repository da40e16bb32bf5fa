// Package builtin assembles the registry of backends a GRID agent ships with.
package builtin

import (
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/ping"
	"github.com/gridfleet/terraform-provider-grid/backends/testbackend"
)

// Options configure the built-in backends that touch the host.
type Options struct {
	// Sandbox, when set, confines file-touching backends to this directory
	// (grid dev and tests).
	Sandbox string
}

// New returns a registry holding every built-in backend.
func New(opts Options) (*backends.Registry, error) {
	r := backends.NewRegistry()
	for _, b := range []backends.Backend{ping.New(), testbackend.New()} {
		if err := r.Register(b); err != nil {
			return nil, err
		}
	}
	_ = opts
	return r, nil
}
