package config_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends"
	"github.com/gridfleet/terraform-provider-grid/backends/config"
	"github.com/gridfleet/terraform-provider-grid/backends/file"
)

// A JSON file nested deeper than any config file is must be refused with
// an error, not parsed by recursion until the agent's stack runs out (a
// fatal error no recover catches, taking the whole agent down). Anyone who
// can write a file under the prefixes (file.write, or a local user in a
// directory there) could otherwise crash the agent with a config.get.
func TestDeeplyNestedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	fb, err := file.New(file.Options{AllowedPrefixes: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	b := config.New(fb)
	const depth = 7 << 20
	cases := map[string]string{
		"deep.json": `{"a":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}",
		"deep.yaml": "a: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n",
		"deep.toml": "a = " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n",
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, name)
			if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			for _, action := range []string{"get", "set"} {
				req := &backends.Request{Action: action, Params: api.Params{"path": p, "key": "b", "value": "1", "type": "string", "format": "auto", "mode": "0644", "create": "false"}}
				_, err := b.Run(context.Background(), req)
				if err == nil {
					t.Fatalf("%s on a file nested %d deep: no error", action, depth)
				}
				t.Logf("%s: %.200v", action, err)
			}
		})
	}
}
