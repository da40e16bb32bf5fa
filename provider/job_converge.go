package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Convergence: a grid_job with converge = true records in converged_nodes
// the nodes that ran its tasks successfully. Each plan resolves the target
// again; the planned converged_nodes are the recorded nodes still
// registered in the target plus every online node it now matches, so a
// new node shows as an addition (an in-place update) and a node that left
// as a removal. Apply runs the tasks on the added nodes alone, one job per
// node (a target names one node or a whole group), and records the ones
// that succeeded.

// succeededNodes are the nodes of a job on which no step ended other than
// success or skipped.
func succeededNodes(job *api.Job) []string {
	var out []string
	for _, id := range job.Expected {
		ok := len(job.Results) > 0
		for _, m := range job.Results {
			if r := m[id]; r != nil && r.Status != api.StepSuccess && r.Status != api.StepSkipped {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, id)
		}
	}
	return out
}

// planConverge plans converged_nodes for an update of a converging job.
func (r *jobResource) planConverge(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse, plan *jobResourceModel) {
	if !plan.Converge.ValueBool() {
		return
	}
	target, known, d := readTarget(ctx, plan.Target)
	resp.Diagnostics.Append(d...)
	if !known || target.Scope == api.ScopeAny {
		return
	}
	var prior []string
	var st jobResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if !st.ConvergedNodes.IsNull() && !st.ConvergedNodes.IsUnknown() {
		resp.Diagnostics.Append(st.ConvergedNodes.ElementsAs(ctx, &prior, false)...)
	}
	nodes, err := r.client.ListNodes(ctx)
	if err != nil {
		r.addPlanClientError(&resp.Diagnostics, "List Nodes Error", err)
		return
	}
	registered := map[string]bool{}
	for _, n := range nodes {
		if target.Matches(n.ID, n.Site, n.Groups) {
			registered[n.ID] = true
		}
	}
	want := slices.DeleteFunc(slices.Clone(prior), func(id string) bool { return !registered[id] })
	var added, left []string
	for _, id := range matchingOnline(nodes, target) {
		if !slices.Contains(want, id) {
			want = append(want, id)
			added = append(added, id)
		}
	}
	for _, id := range prior {
		if !registered[id] {
			left = append(left, id)
		}
	}
	if len(added) == 0 && len(left) == 0 {
		return
	}
	if len(added) > 0 {
		resp.Diagnostics.AddAttributeWarning(path.Root("converged_nodes"), "Job Will Run On New Nodes",
			fmt.Sprintf("Target %s now matches %s, which have not run the tasks: apply runs the job on them alone.", target, strings.Join(added, ", ")))
	}
	if len(left) > 0 {
		resp.Diagnostics.AddAttributeWarning(path.Root("converged_nodes"), "Nodes Left The Target",
			fmt.Sprintf("%s no longer match target %s; apply drops them from converged_nodes (nothing runs on them).", strings.Join(left, ", "), target))
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("converged_nodes"), nodesValue(want))...)
}

// converge runs the job on the nodes the plan added to converged_nodes and
// records the ones that succeeded; plan's converged_nodes ends as what is
// true.
func (r *jobResource) converge(ctx context.Context, plan, state *jobResourceModel, diags *diag.Diagnostics) {
	var want, have []string
	if plan.ConvergedNodes.IsNull() || plan.ConvergedNodes.IsUnknown() {
		plan.ConvergedNodes = state.ConvergedNodes
		return
	}
	diags.Append(plan.ConvergedNodes.ElementsAs(ctx, &want, false)...)
	if !state.ConvergedNodes.IsNull() && !state.ConvergedNodes.IsUnknown() {
		diags.Append(state.ConvergedNodes.ElementsAs(ctx, &have, false)...)
	}
	if diags.HasError() || !plan.Converge.ValueBool() || r.client == nil {
		plan.ConvergedNodes = state.ConvergedNodes
		return
	}
	waitFor, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	diags.Append(d...)
	spec, d := specFrom(ctx, plan, plan.Tasks)
	diags.Append(d...)
	if diags.HasError() {
		plan.ConvergedNodes = state.ConvergedNodes
		return
	}
	done := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return !slices.Contains(have, id) })
	added := slices.DeleteFunc(slices.Clone(want), func(id string) bool { return slices.Contains(have, id) })
	done = append(done, r.runOnNodes(ctx, spec, added, waitFor, "Converge", diags)...)
	plan.ConvergedNodes = nodesValue(done)
}
