package cli

import (
	"strings"
	"testing"
)

// TestHelpNeverPrintsTheToken: --help says whether GRID_TOKEN is set but
// never shows its value, on the root and on a subcommand.
func TestHelpNeverPrintsTheToken(t *testing.T) {
	const secret = "grid_s3cr3t-value-never-on-screen"
	t.Setenv("GRID_TOKEN", secret)
	for _, args := range [][]string{{"--help"}, {"job", "run", "--help"}, {"node", "list", "--help"}} {
		code, out, errOut := runCLI(t, args...)
		if code != ExitOK {
			t.Fatalf("grid %v: exit %d: %s", args, code, errOut)
		}
		if strings.Contains(out+errOut, secret) {
			t.Errorf("grid %v prints the token's value", args)
		}
		if !strings.Contains(out, "env GRID_TOKEN, set") {
			t.Errorf("grid %v does not say GRID_TOKEN is set:\n%s", args, out)
		}
	}
	t.Setenv("GRID_TOKEN", "")
	if _, out, _ := runCLI(t, "--help"); !strings.Contains(out, "env GRID_TOKEN, not set") {
		t.Errorf("grid --help does not say GRID_TOKEN is not set:\n%s", out)
	}
}
