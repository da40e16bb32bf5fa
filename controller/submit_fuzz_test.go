package controller

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/backends/builtin"
)

// fuzzCatalog is what a fleet of built-in agents offers (with a sandbox so
// the file backend has a prefix).
func fuzzCatalog(f *testing.F) *api.Catalog {
	reg, err := builtin.New(builtin.Options{Sandbox: f.TempDir()})
	if err != nil {
		f.Fatal(err)
	}
	return &api.Catalog{Backends: api.MergeSchemas(reg.Schemas())}
}

// FuzzSubmitDecode feeds POST /job bodies to the decoder the handler uses
// and the catalog check submit makes.
// It must never panic; what it accepts must validate, and must be accepted
// again when a client sends it back as JSON.
func FuzzSubmitDecode(f *testing.F) {
	for _, s := range []string{
		`{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"echo","params":{"message":"hi"}}]}`,
		`{"target":{"scope":"group","value":"web.dev"},"strategy":"continue","timeout":"1m","tasks":[{"tasks":[{"backend":"ping","action":"sleep","params":{"duration":"1s"}},{"backend":"file","action":"stat","params":{"path":"/tmp/x"}}]},{"condition":"on_failure","backend":"ping","action":"echo"}]}`,
		`{"target":{"scope":"node","value":"n1"},"check_mode":true,"tasks":[{"backend":"file","action":"write","params":{"path":"/x","content":"a","mode":"0644"},"max_retries":2,"timeout":"5s"}]}`,
		`{"target":{"scope":"any"},"tasks":[{"backend":"ping","action":"sleep","params":{"duration":"-5s"}}]}`,
		`{"target":{"scope":"all"},"tasks":[{"backend":"ping","action":"sleep","params":{"duration":5}}]}`,
		"target: {scope: all}\ntasks:\n  - {backend: ping, action: echo, params: {message: [a, 1, true]}}\n",
		"target: {scope: all}\ntasks: [{backend: test, action: fail}]\n",
		`{"target":{"scope":"all"},"tasks":[{"backend":"nope","action":"x"}]}`,
		`{"target":{"scope":"all"},"tasks":[]}`,
		`{"target":{"scope":"all"},"tasks":[{"backend":"exec","action":"run","params":{"program":"p","secret":"(sensitive)"}}]}`,
		`{`,
	} {
		f.Add([]byte(s))
	}
	cat := fuzzCatalog(f)
	// What submit does first: decode, then check against the catalog.
	decode := func(body []byte) (*api.Job, error) {
		job, err := decodeSubmission(body)
		if err != nil {
			return nil, err
		}
		if err := cat.ValidateJob(job); err != nil {
			return nil, err
		}
		return job, nil
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		job, err := decode(body)
		if err != nil {
			if job != nil {
				t.Fatalf("decodeSubmission returned a job with error %v", err)
			}
			return
		}
		if err := job.Validate(); err != nil {
			t.Fatalf("accepted job does not validate: %v", err)
		}
		spec := api.JobSpec{Target: job.Target, Tasks: job.Tasks, Strategy: job.Strategy, Timeout: job.Timeout, CheckMode: job.CheckMode}
		b, err := json.Marshal(spec)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if _, err := decode(b); err != nil {
			t.Fatalf("an accepted job sent back as JSON is refused: %v\n%s", err, b)
		}
		// What the handler does next: hide sensitive values.
		if _, err := extractSensitive(job, cat); err != nil {
			var ve *api.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("extractSensitive: %v is not a validation error", err)
			}
		}
	})
}
