package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// JobSpec is what a job file holds and what POST /job takes: the parts of a
// Job a client chooses.
type JobSpec struct {
	Target    Target   `json:"target" yaml:"target"`
	Tasks     []Phase  `json:"tasks" yaml:"tasks"`
	Strategy  Strategy `json:"strategy,omitempty" yaml:"strategy,omitempty"`
	Timeout   string   `json:"timeout,omitempty" yaml:"timeout,omitempty"`
	CheckMode bool     `json:"check_mode,omitempty" yaml:"check_mode,omitempty"`
	// MaxConcurrency and MaxErrors: see Job.
	MaxConcurrency *Limit `json:"max_concurrency,omitempty" yaml:"max_concurrency,omitempty"`
	MaxErrors      *Limit `json:"max_errors,omitempty" yaml:"max_errors,omitempty"`
	// Priority is 0 (lowest) to 9 (highest); omitted means DefaultPriority.
	Priority *int `json:"priority,omitempty" yaml:"priority,omitempty"`
	// NotBefore delays the job: an RFC 3339 time, or a duration from
	// submission such as 10m.
	NotBefore string `json:"not_before,omitempty" yaml:"not_before,omitempty"`
}

// Job returns a new, not yet submitted job for the spec.
func (s JobSpec) Job() *Job {
	j := &Job{Target: s.Target, Tasks: s.Tasks, Strategy: s.Strategy, Timeout: s.Timeout, CheckMode: s.CheckMode,
		MaxConcurrency: s.MaxConcurrency, MaxErrors: s.MaxErrors, Priority: DefaultPriority}
	if s.Priority != nil {
		j.Priority = *s.Priority
	}
	// A duration counts from now: Job is called when the job is submitted.
	// An invalid value is reported by ParseJobSpec.
	j.NotBefore, _ = ParseNotBefore(s.NotBefore, time.Now())
	return j
}

// MaxJobFileBytes bounds what a job file or request body may hold.
const MaxJobFileBytes = 1 << 20

// ParseJobSpec reads a job in the seed's format from YAML or JSON (JSON is
// tried first when the document starts with '{'). Unknown fields are errors,
// so a misspelt key is not silently ignored. The result is validated.
func ParseJobSpec(data []byte) (*JobSpec, error) {
	if len(data) > MaxJobFileBytes {
		return nil, fmt.Errorf("job is %d bytes, more than the limit of %d", len(data), MaxJobFileBytes)
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, errors.New("job is empty")
	}
	var spec JobSpec
	if trimmed[0] == '{' {
		d := json.NewDecoder(bytes.NewReader(trimmed))
		d.DisallowUnknownFields()
		if err := d.Decode(&spec); err != nil {
			return nil, fmt.Errorf("parse JSON job: %w", err)
		}
		if d.More() {
			return nil, errors.New("parse JSON job: trailing data after the job object")
		}
	} else {
		d := yaml.NewDecoder(bytes.NewReader(trimmed))
		d.KnownFields(true)
		if err := d.Decode(&spec); err != nil {
			return nil, fmt.Errorf("parse YAML job: %w", cleanYAMLError(err))
		}
		var extra any
		if err := d.Decode(&extra); !errors.Is(err, io.EOF) {
			return nil, errors.New("parse YAML job: a job file holds one document")
		}
	}
	if err := spec.Job().Validate(); err != nil {
		return nil, err
	}
	if _, err := ParseNotBefore(spec.NotBefore, time.Now()); err != nil {
		return nil, err
	}
	return &spec, nil
}

func cleanYAMLError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	msg = strings.ReplaceAll(msg, "in type api.JobSpec", "in job")
	msg = strings.ReplaceAll(msg, "in type api.Phase", "in task")
	msg = strings.ReplaceAll(msg, "in type api.Target", "in target")
	return errors.New(msg)
}
