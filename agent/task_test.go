package agent

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/seal"
)

func TestTaskTimeoutError(t *testing.T) {
	if got, want := taskTimeoutError(1500*time.Millisecond).Error(), "task timed out after 1.5s"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	// As a context's cause it is what the task's context reports.
	ctx, cancel := context.WithTimeoutCause(context.Background(), time.Millisecond, taskTimeoutError(time.Millisecond))
	defer cancel()
	<-ctx.Done()
	var te taskTimeoutError
	if cause := context.Cause(ctx); !errors.As(cause, &te) || cause.Error() != "task timed out after 1ms" {
		t.Errorf("cause %v, want the task timeout", cause)
	}
}

// openSealed hands a command's params on as they are when none is
// sensitive, and opens sensitive ones in a copy, leaving the command's
// placeholders alone.
func TestOpenSealedCopiesOnlyWhenSensitive(t *testing.T) {
	key, err := seal.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	a := &Agent{id: "n1", sealKey: key}

	plain := &task{cmd: command("j1", "ping", "echo", api.Params{"message": "hi"})}
	got, err := a.openSealed(plain)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(got).UnsafePointer() != reflect.ValueOf(plain.cmd.Task.Params).UnsafePointer() {
		t.Error("params without a sensitive one were copied")
	}
	if len(plain.secrets) != 0 {
		t.Errorf("secrets %q without sensitive params", plain.secrets)
	}

	sealed, err := seal.To(key.Public(), []byte("s3cret"), api.SealContext("j2", 0, "n1", "password"))
	if err != nil {
		t.Fatal(err)
	}
	st := &task{cmd: command("j2", "ping", "echo", api.Params{"message": "hi", "password": api.SensitiveValue})}
	st.cmd.Sealed = map[string]string{"password": sealed}
	got, err = a.openSealed(st)
	if err != nil {
		t.Fatal(err)
	}
	if got["password"] != "s3cret" || got["message"] != "hi" {
		t.Errorf("opened params %v", got)
	}
	if st.cmd.Task.Params["password"] != api.SensitiveValue {
		t.Errorf("the command's params were changed: %v", st.cmd.Task.Params)
	}
	if !reflect.DeepEqual(st.secrets, []string{"s3cret"}) {
		t.Errorf("secrets %q", st.secrets)
	}

	missing := &task{cmd: command("j3", "ping", "echo", api.Params{"password": api.SensitiveValue})}
	if _, err := a.openSealed(missing); err == nil || !contains(err.Error(), "did not arrive sealed") {
		t.Errorf("a sensitive param without its sealed value: %v", err)
	}
}

// A backend that ignores its ended context is abandoned after abandonAfter:
// the task fails saying so, and the backend keeps its slot until it really
// returns, so the next task waits for it.
func TestAbandonedBackendKeepsItsSlot(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := &probe{release: make(chan struct{})}
	h.startAgent("stuck1", func(c *Config) {
		c.MaxConcurrent = 1
		c.Registry = testRegistry(t, p)
	})
	stuck := command("jstuck", "probe", "stuck", nil)
	stuck.Timeout = "50ms"
	h.send(api.NodeCommandSubject("stuck1", "probe", "stuck"), stuck)
	r := h.final("jstuck", "stuck1", abandonAfter+5*time.Second)
	if r.Status != api.StepFailed || !contains(r.Error, "timed out after 50ms") || !contains(r.Error, "did not stop within") {
		t.Fatalf("stuck task: status %q error %q, want failed, timed out and abandoned", r.Status, r.Error)
	}
	h.send(api.NodeCommandSubject("stuck1", "ping", "echo"), echo("jafter"))
	time.Sleep(300 * time.Millisecond)
	if got := h.resultsOf("jafter", ""); len(got) != 0 {
		t.Fatalf("a task ran while the abandoned backend held the only slot: %+v", got)
	}
	close(p.release)
	if r := h.final("jafter", "stuck1", 5*time.Second); r.Status != api.StepSuccess {
		t.Errorf("task after the release: %+v, want success", r)
	}
}
