package controller

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Why a job could not be made (or retried). The core (submit, retry, the
// schedule engine) speaks only these; errors.Is tells them apart, and
// jobErrorStatus in http.go is the one place that turns them into HTTP
// status codes. Each refusal is a *jobError of one kind whose message is
// what the caller is told.
var (
	// errRefused: the controller's policy (its allow list, or
	// dangerous_roles for the caller's role) refuses a step.
	errRefused = errors.New("refused by policy")
	// errInvalid: the job is malformed, or a step does not fit the
	// schemas of the nodes it targets.
	errInvalid = errors.New("invalid job")
	// errTooLarge: stored with a result of every step from every
	// targeted node, the job would outgrow the bus limit.
	errTooLarge = errors.New("job too large")
	// errQueueFull: admission control (max_pending) refuses more jobs for
	// now.
	errQueueFull = errors.New("job queue full")
	// errStorageFull: a stream or bucket the job needs (jobs, requests,
	// job_secrets) has no room for it.
	errStorageFull = errors.New("insufficient storage")
	// errUnavailable: the store or the queue did not answer, or the
	// controller is stopping; the same job may be made later.
	errUnavailable = errors.New("unavailable")
	// errJobExists: a job with the job's preset id exists (a schedule's
	// tick that was made already).
	errJobExists = errors.New("a job with this id exists")
	// errJobNotFound: the job to retry does not exist.
	errJobNotFound = errors.New("job not found")
	// errJobState: the job to retry is in a state that does not allow it
	// (still running, nothing failed, sensitive values gone).
	errJobState = errors.New("job state does not allow it")
)

// jobError is a refusal of one kind; its message is err's.
type jobError struct {
	kind error
	err  error
}

func (e *jobError) Error() string { return e.err.Error() }

// Unwrap gives both the kind and the cause, so errors.Is matches the kind
// and errors.As finds an *api.ValidationError or a JetStream error within.
func (e *jobError) Unwrap() []error { return []error{e.kind, e.err} }

// refuse makes err a refusal of kind (nil stays nil).
func refuse(kind, err error) error {
	if err == nil {
		return nil
	}
	return &jobError{kind: kind, err: err}
}

// refusef is refuse with a formatted message.
func refusef(kind error, format string, args ...any) error {
	return &jobError{kind: kind, err: fmt.Errorf(format, args...)}
}

// finalRefusal reports whether a job refused with err would be refused
// again as it stands: policy, validity, size, a full queue or store. The
// schedule engine records such a tick as skipped; anything else
// (unavailable, or an error of no kind) is tried again.
func finalRefusal(err error) bool {
	for _, k := range []error{errRefused, errInvalid, errTooLarge, errQueueFull, errStorageFull} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// storeError classifies a failed write of a new job: a bucket that is out
// of room is errStorageFull, anything else errUnavailable.
func storeError(err error) error {
	if errors.Is(err, errStorageFull) {
		// It names the bucket and the setting to raise already.
		return refuse(errStorageFull, err)
	}
	if storageFull(err) {
		return refuse(errStorageFull, fmt.Errorf("store job: the jobs bucket is full (%w); delete finished jobs or lower job_retention", err))
	}
	return refuse(errUnavailable, fmt.Errorf("store job: %w", err))
}

// storageFull reports whether a write was refused for lack of room: the
// bucket's max_bytes or the server's JetStream storage.
func storageFull(err error) bool {
	if errors.Is(err, errStorageFull) || isMaxBytes(err) {
		return true
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jsInsufficientResources {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "maximum bytes exceeded") || strings.Contains(msg, "insufficient resources")
}

// jsInsufficientResources is JetStream's error code for a server out of
// storage.
const jsInsufficientResources jetstream.ErrorCode = 10023
