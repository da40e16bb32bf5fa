package builtin

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/internal/bus"
)

// The schema set an agent registers (every built-in backend, exec with 100
// programs) stays well under the schemas bucket's per-message cap: at most
// a quarter of it, leaving room for backends to grow.
func TestSchemaSetFitsItsCap(t *testing.T) {
	progs := map[string]ProgramSpec{}
	for i := range 100 {
		progs[fmt.Sprintf("program-%03d", i)] = ProgramSpec{Path: "/bin/true"}
	}
	r, err := New(Options{Programs: progs})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(r.Schemas())
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > bus.SchemaMaxMsgSize/4 {
		t.Errorf("the built-in schema set takes %d bytes, more than a quarter of the schemas bucket's per-message cap (%d): raise bus.SchemaMaxMsgSize",
			len(b), bus.SchemaMaxMsgSize)
	}
	t.Logf("schema set: %d bytes", len(b))
}
