package controller_test

import (
	"os"
	"testing"
)

// runsInChaos skips a test that kills or restarts servers of a three-server
// embedded JetStream cluster unless GRID_CHAOS=1: such a test waits on
// leader elections and replica catch-up, which stretch far beyond its bounds
// when the other packages of go test ./... load the machine. make chaos
// runs these tests on their own.
func runsInChaos(t *testing.T) {
	t.Helper()
	if os.Getenv("GRID_CHAOS") != "1" {
		t.Skip("kills servers of a three-server cluster: runs with GRID_CHAOS=1 (make chaos)")
	}
}
