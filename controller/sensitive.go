package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/seal"
)

// Sensitive params (see DESIGN.md): at submit their values leave the job
// (which holds api.SensitiveValue instead) for the job_secrets bucket,
// encrypted under the cluster key of the keys bucket; the run that
// dispatches the job reads them back, seals each for the one node a
// command goes to, and the entry is removed when the job ends.

// clusterKeyName is the keys bucket's entry for the params key.
const clusterKeyName = "params"

// stepSecrets are a job's sensitive values: flat step → param → value.
type stepSecrets map[int]map[string]string

// loadClusterKey reads the cluster key, creating it on the cluster's first
// start (the first controller's Create wins; the others read it).
func loadClusterKey(ctx context.Context, kv jetstream.KeyValue) (*seal.Box, error) {
	for range 5 {
		e, err := kv.Get(ctx, clusterKeyName)
		if err == nil {
			return seal.NewBox(e.Value())
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("read cluster key: %w", err)
		}
		if _, err := kv.Create(ctx, clusterKeyName, seal.NewKey()); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("create cluster key: %w", err)
		}
	}
	return nil, errors.New("cluster key: could neither read nor create it")
}

// extractSensitive moves the values of params the catalog marks sensitive
// out of the job, leaving api.SensitiveValue. A literal api.SensitiveValue
// is refused: it would read as a value that never arrives.
func extractSensitive(job *api.Job, cat *api.Catalog) (stepSecrets, error) {
	var out stepSecrets
	for _, s := range api.Flatten(job.Tasks) {
		var action api.ActionSchema
		if b, ok := cat.Backend(s.Task.Backend); ok {
			action, _ = b.Action(s.Task.Action)
		}
		for k, v := range s.Task.Params {
			if v == api.SensitiveValue {
				return nil, &api.ValidationError{Field: s.Path + ".params." + k, Msg: fmt.Sprintf("%q is reserved for hidden values", api.SensitiveValue)}
			}
			if ps, ok := action.Param(k); ok && ps.Sensitive {
				if out == nil {
					out = stepSecrets{}
				}
				if out[s.Index] == nil {
					out[s.Index] = map[string]string{}
				}
				out[s.Index][k] = v
				// The map is the job's own (Flatten shares it).
				s.Task.Params[k] = api.SensitiveValue
			}
		}
	}
	return out, nil
}

// hasSensitive reports whether a job holds hidden values.
func hasSensitive(steps []api.FlatStep) bool {
	for _, s := range steps {
		for _, v := range s.Task.Params {
			if v == api.SensitiveValue {
				return true
			}
		}
	}
	return false
}

func (c *Controller) storeSecrets(ctx context.Context, id string, sec stepSecrets) error {
	plain := make(map[string]map[string]string, len(sec))
	for i, m := range sec {
		plain[strconv.Itoa(i)] = m
	}
	b, err := json.Marshal(plain)
	if err != nil {
		return err
	}
	if _, err := c.secretsKV.Put(ctx, id, c.box.Seal(b, []byte(id))); err != nil {
		if isMaxBytes(err) {
			err = &storageFullError{bucket: api.BucketJobSecrets, setting: "small_buckets_max_bytes", err: err}
		}
		return fmt.Errorf("store sensitive params: %w", err)
	}
	return nil
}

func (c *Controller) loadSecrets(ctx context.Context, id string) (stepSecrets, error) {
	e, err := c.secretsKV.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("read sensitive params: %w", err)
	}
	b, err := c.box.Open(e.Value(), []byte(id))
	if err != nil {
		return nil, fmt.Errorf("sensitive params: %w", err)
	}
	var plain map[string]map[string]string
	if err := json.Unmarshal(b, &plain); err != nil {
		return nil, fmt.Errorf("sensitive params: %w", err)
	}
	out := stepSecrets{}
	for k, m := range plain {
		i, err := strconv.Atoi(k)
		if err != nil {
			continue
		}
		out[i] = m
	}
	return out, nil
}

// dropSecrets removes a finished job's sensitive values.
func (c *Controller) dropSecrets(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.secretsKV.Purge(ctx, id); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		c.log.Warn("remove sensitive params of finished job", "job", id, "err", err)
	}
}

// sealFor puts a step's sensitive values into a command for one node,
// sealed for that node's key. A node without a key (an older agent), or a
// run without the values, gets none: the agent then fails the step saying
// which param did not arrive.
func (r *run) sealFor(cmd *api.Command, node string) {
	vals := r.secrets[cmd.TaskIndex]
	if len(vals) == 0 {
		return
	}
	n, ok := r.c.reg.get(node)
	if !ok || n.SealKey == "" {
		r.log.Warn("node has no seal key; its sensitive params are not sent", "node", node, "step", cmd.TaskIndex)
		return
	}
	cmd.Sealed = make(map[string]string, len(vals))
	for k, v := range vals {
		s, err := seal.To(n.SealKey, []byte(v), api.SealContext(cmd.JobID, cmd.TaskIndex, node, k))
		if err != nil {
			r.log.Warn("seal sensitive param", "node", node, "step", cmd.TaskIndex, "param", k, "err", err)
			continue
		}
		cmd.Sealed[k] = s
	}
}
