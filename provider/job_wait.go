package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"

	"github.com/gridfleet/terraform-provider-grid/api"
	"github.com/gridfleet/terraform-provider-grid/internal/retry"
)

// waitRetry paces the waits for a job while the controller cannot be reached
// (it may be restarting).
var waitRetry = retry.Policy{Initial: 2 * time.Second, Jitter: 0.25}

// runJob submits a job and, when wait is set, waits for it. It returns the
// last known job (nil when submission failed).
// allowEmpty submits it even when its target matches no node.
func (r *jobResource) runJob(ctx context.Context, spec *api.JobSpec, wait, allowEmpty bool, waitFor time.Duration, summary string, diags *diag.Diagnostics) *api.Job {
	job, err := r.client.SubmitJobWith(ctx, spec, api.SubmitOptions{AllowEmpty: allowEmpty})
	if err != nil {
		addClientError(diags, summary, err)
		return nil
	}
	if !wait {
		return job
	}
	wctx, cancel := context.WithTimeout(ctx, waitFor)
	defer cancel()
	err = retry.Do(wctx, waitRetry, func(int) error {
		done, err := r.client.WaitJob(wctx, job.ID)
		if done != nil {
			job = done
		}
		var ue *api.UnreachableError
		if err != nil && !errors.As(err, &ue) {
			return retry.Stop(err)
		}
		// Unreachable: the controller may be restarting, keep waiting.
		return err
	})
	if err == nil {
		return job
	}
	if wctx.Err() == nil {
		diags.AddError("Wait For Job Error", fmt.Sprintf("Job %s was submitted, but waiting for it failed: %v. "+
			"Check it with `grid job status %s`; the resource is tainted and the next apply runs the job again.", job.ID, err, job.ID))
		return job
	}
	// Timed out or interrupted: stop the job rather than leave it running.
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	if cj, cerr := r.client.CancelJob(cctx, job.ID); cerr == nil {
		job = cj
	}
	if fj, ferr := r.client.GetJob(cctx, job.ID); ferr == nil {
		job = fj
	}
	ccancel()
	why := fmt.Sprintf("did not finish within %s", waitFor)
	if ctx.Err() != nil {
		why = "was interrupted"
	}
	diags.AddError("Job Timed Out", fmt.Sprintf("Job %s %s, so it was cancelled. Raise the wait with a timeouts block "+
		"(timeouts { create = \"1h\" }) or speed the tasks up; the resource is tainted and the next apply runs the job again.\n\n%s",
		job.ID, why, failureDetail(job)))
	return job
}
