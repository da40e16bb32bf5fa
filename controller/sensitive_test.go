package controller_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet"
	"github.com/gridfleet/terraform-provider-grid/internal/compose/fleet/fleettest"
)

// text is everything logged so far.
func (s *syncBuffer) text() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// sensitiveGet is this file's one raw HTTP helper (an Authorization
// header goes here when the API needs one).
func sensitiveGet(t *testing.T, f *fleet.Fleet, url, token string) string {
	t.Helper()
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := f.HTTPClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestSensitiveParamNeverInClear: a sensitive param's value reaches the
// backend on every node, yet is absent from the jobs bucket, the job
// secrets bucket, the commands and results streams, every log line (debug
// level) and the API's answers, which show "(sensitive)".
func TestSensitiveParamNeverInClear(t *testing.T) {
	logs := &syncBuffer{}
	f := fleettest.Start(t, fleet.Options{Agents: 2,
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	secret := "hunter2-" + strings.Repeat("s3cr3t", 4)
	sum := sha256.Sum256([]byte(secret))
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: secret, params: {value: \""+secret+"\"}}]")
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Status, j.Error)
	}
	for _, node := range []string{"node-1", "node-2"} {
		out := j.Results.Node(0, node).Output
		if !strings.Contains(out, hex.EncodeToString(sum[:])) {
			t.Errorf("%s: the backend did not get the value: %q", node, out)
		}
		if strings.Contains(out, secret) || !strings.HasSuffix(out, "of "+api.SensitiveValue) {
			t.Errorf("%s: output not scrubbed: %q", node, out)
		}
	}
	if got := j.Tasks[0].Params["value"]; got != api.SensitiveValue {
		t.Errorf("API shows the param as %q, want %q", got, api.SensitiveValue)
	}
	for _, path := range []string{"/job/" + j.ID, "/job/" + j.ID + "?wait=1s", "/jobs"} {
		body := sensitiveGet(t, f, f.APIURL()+path, f.AdminToken())
		if strings.Contains(body, secret) || !strings.Contains(body, api.SensitiveValue) {
			t.Errorf("GET %s: %s", path, body)
		}
	}

	js := fleettest.JetStream(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, b := range []string{api.BucketJobs, api.BucketJobSecrets} {
		kv, err := js.KeyValue(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		lister, err := kv.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for k := range lister.Keys() {
			if e, err := kv.Get(ctx, k); err == nil && bytes.Contains(e.Value(), []byte(secret)) {
				t.Errorf("bucket %s key %s holds the value in clear", b, k)
			}
		}
	}
	if kv, err := js.KeyValue(ctx, api.BucketJobSecrets); err == nil {
		if _, err := kv.Get(ctx, j.ID); err == nil {
			t.Errorf("the finished job's sensitive values are still kept")
		}
	}
	for _, s := range []string{api.StreamCommands, api.StreamResults} {
		cons, err := js.OrderedConsumer(ctx, s, jetstream.OrderedConsumerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for {
			m, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
			if err != nil {
				break
			}
			n++
			if bytes.Contains(m.Data(), []byte(secret)) {
				t.Errorf("stream %s holds the value in clear: %s", s, m.Subject())
			}
		}
		if n == 0 {
			t.Errorf("stream %s: read no messages", s)
		}
	}
	if strings.Contains(logs.text(), secret) {
		t.Errorf("the logs hold the value in clear")
	}
	if !strings.Contains(logs.text(), "job finished") {
		t.Errorf("the logs were not captured")
	}

	// "(sensitive)" itself is not a value one can submit.
	_, err := f.Client().SubmitJob(ctx, &api.JobSpec{Target: api.Target{Scope: api.ScopeAll},
		Tasks: []api.Phase{{Backend: "ping", Action: "echo", Params: api.Params{"message": api.SensitiveValue}}}})
	if !api.IsStatus(err, 400) || !strings.Contains(err.Error(), "tasks[0].params.message") {
		t.Errorf("literal %q: %v, want a 400 naming the param", api.SensitiveValue, err)
	}
}

// TestSensitiveParamScrubbedFromFacts: a backend whose facts echo a
// sensitive param (as a value, nested in a list, and as a key) reports
// them with "(sensitive)" in its place; the job stored in the jobs bucket
// and the API's answer hold the mask, never the value.
func TestSensitiveParamScrubbedFromFacts(t *testing.T) {
	f := fleettest.Start(t, fleet.Options{Agents: 1})
	secret := "facts-" + strings.Repeat("t0p", 5)
	j := submitWait(t, f, "target: {scope: all}\ntasks: [{backend: test, action: secret, params: {value: \""+secret+"\"}}]")
	if j.Status != api.JobCompleted {
		t.Fatalf("job %s: %s", j.Status, j.Error)
	}
	facts := j.Results.Node(0, "node-1").Facts
	if facts == nil {
		t.Fatal("the step reported no facts")
	}
	if facts["value"] != api.SensitiveValue {
		t.Errorf("facts.value = %v, want %q", facts["value"], api.SensitiveValue)
	}
	if _, ok := facts[api.SensitiveValue]; !ok {
		t.Errorf("the key that was the value is not masked: %v", facts)
	}
	js := fleettest.JetStream(t, f)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, api.BucketJobs)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	stored := string(e.Value())
	if strings.Contains(stored, secret) {
		t.Errorf("the stored job holds the value in clear: %s", stored)
	}
	for _, want := range []string{`"value":"` + api.SensitiveValue + `"`, `"the value is ` + api.SensitiveValue + `"`,
		`"` + api.SensitiveValue + `":"the value as a key"`} {
		if !strings.Contains(stored, want) {
			t.Errorf("the stored job's facts lack %s: %s", want, stored)
		}
	}
	if body := sensitiveGet(t, f, f.APIURL()+"/job/"+j.ID, f.AdminToken()); strings.Contains(body, secret) {
		t.Errorf("GET /job holds the value in clear")
	}
}
