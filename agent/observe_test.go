package agent

import (
	"testing"

	"github.com/gridfleet/terraform-provider-grid/internal/telemetry"
)

// The agent names its tracer itself (the slim build does not import
// telemetry); it must be the name the rest of GRID's spans use.
func TestInstrumentationNameIsTelemetrys(t *testing.T) {
	if instrumentationName != telemetry.InstrumentationName {
		t.Fatalf("agent tracer %q, telemetry %q", instrumentationName, telemetry.InstrumentationName)
	}
}
