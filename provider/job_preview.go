package provider

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Plan previews: with preview = true, planning a job that will run submits
// the same tasks as a check-mode job (actions report what they would
// change and change nothing) on the target, waits for it, and plans the
// outcome into preview_nodes (node → the steps that would change it) and
// preview_summary. Every action must have a check mode; one without is
// refused before anything is submitted.

// previewTimeout bounds how long a plan waits for its check-mode job.
const previewTimeout = 2 * time.Minute

// previewNodesType is preview_nodes' type.
var previewNodesType = types.MapType{ElemType: types.ListType{ElemType: types.StringType}}

// withoutCheckMode returns, for each leaf whose action has no check mode,
// "tasks[0]: exec.run has no check mode": a preview or a drift check
// cannot run it without changing the hosts.
func withoutCheckMode(cat *api.Catalog, leaves []specLeaf) map[int]string {
	out := map[int]string{}
	for i, leaf := range leaves {
		b, ok := cat.Backend(leaf.Task.Backend)
		if !ok {
			continue // plan validation reports it
		}
		a, ok := b.Action(leaf.Task.Action)
		if !ok || a.CheckMode || a.ReadOnly {
			continue
		}
		out[i] = fmt.Sprintf("%s: %s has no check mode", leaf.Field, leaf.Task.Name())
	}
	return out
}

// previewOutcome is what a check-mode run found.
type previewOutcome struct {
	nodes   map[string][]string // node → steps ("tasks[0] apt.install") that would change it
	summary string
}

// summarizePreview reads a finished check-mode job.
func summarizePreview(job *api.Job) previewOutcome {
	out := previewOutcome{nodes: map[string][]string{}}
	var parts []string
	for _, id := range job.Expected {
		out.nodes[id] = []string{}
	}
	for _, s := range api.Flatten(job.Tasks) {
		changed, failed := 0, 0
		for _, id := range job.Expected {
			r := job.Results.Node(s.Index, id)
			switch {
			case r == nil:
			case r.Status == api.StepSuccess && r.Changed:
				changed++
				out.nodes[id] = append(out.nodes[id], s.Task.Name())
			case r.Status != api.StepSuccess && r.Status != api.StepSkipped:
				failed++
			}
		}
		part := fmt.Sprintf("%s would change %d of %d nodes", s.Task.Name(), changed, len(job.Expected))
		if failed > 0 {
			part += fmt.Sprintf(" (%d could not tell)", failed)
		}
		parts = append(parts, part)
	}
	if len(job.Expected) == 0 {
		parts = []string{"no online node matches the target"}
	}
	out.summary = strings.Join(parts, "; ")
	return out
}

func (o previewOutcome) value() types.Map {
	ids := make([]string, 0, len(o.nodes))
	for id := range o.nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	elems := make(map[string]attr.Value, len(ids))
	for _, id := range ids {
		steps := make([]attr.Value, 0, len(o.nodes[id]))
		for _, s := range o.nodes[id] {
			steps = append(steps, types.StringValue(s))
		}
		elems[id] = types.ListValueMust(types.StringType, steps)
	}
	return types.MapValueMust(previewNodesType.ElemType, elems)
}

// planPreview runs the check-mode job for a plan that creates the job and
// sets preview_nodes and preview_summary.
func (r *jobResource) planPreview(ctx context.Context, plan *jobResourceModel, leaves []specLeaf, cat *api.Catalog, diags *diag.Diagnostics) (types.Map, types.String, bool) {
	refusals := withoutCheckMode(cat, leaves)
	for i, leaf := range leaves {
		if msg, ok := refusals[i]; ok {
			diags.AddAttributeError(leaf.Path, "Preview Not Possible", msg+", so preview cannot show what it would change without changing the hosts. "+
				"Set preview = false for this job, or move the action to a job without preview.")
		}
	}
	if diags.HasError() {
		return types.MapNull(previewNodesType.ElemType), types.StringNull(), false
	}
	spec, d := specFrom(ctx, plan, plan.Tasks)
	diags.Append(d...)
	if diags.HasError() {
		return types.MapNull(previewNodesType.ElemType), types.StringNull(), false
	}
	spec.CheckMode = true
	job := r.runJob(ctx, spec, true, plan.AllowEmpty.ValueBool(), previewTimeout, "Submit Preview Job Error", diags)
	if job == nil || diags.HasError() {
		return types.MapNull(previewNodesType.ElemType), types.StringNull(), false
	}
	o := summarizePreview(job)
	return o.value(), types.StringValue(o.summary), true
}

// previewPaths are the attributes planPreview fills.
var (
	previewNodesPath   = path.Root("preview_nodes")
	previewSummaryPath = path.Root("preview_summary")
)
