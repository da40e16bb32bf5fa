package provider

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Drift detection: a grid_job with drift = "detect" checks, on every
// refresh, whether the nodes it ran on still are as its tasks leave them.
// The refresh submits the tasks as a check-mode job (actions report what
// they would change and change nothing) and records in drifted_nodes the
// nodes among converged_nodes whose check would change something. Terraform
// shows that as a change made outside of it; the plan then empties
// drifted_nodes (an in-place update naming the nodes), and apply runs the
// tasks on those nodes alone, one job per node, as converge does for new
// nodes. Nodes the check cannot reach are recorded apart and are not
// drift; a check that cannot run at all is a warning that keeps the last
// recorded drift, so a plan is never blocked by it.

// The values of drift.
const (
	driftIgnore = "ignore"
	driftDetect = "detect"
)

// driftCheckTimeout bounds a refresh's check-mode job, on the controller
// (the job's timeout) and in the provider's wait.
const driftCheckTimeout = 2 * time.Minute

// maxDriftLine bounds what drifted_nodes keeps of what a step would change.
const maxDriftLine = 200

// driftedNodesType is drifted_nodes' type.
var driftedNodesType = types.MapType{ElemType: types.ListType{ElemType: types.StringType}}

// noDrift is the drift of a job nobody checked, or that has none.
func noDrift() (types.Map, types.List) {
	return types.MapValueMust(driftedNodesType.ElemType, map[string]attr.Value{}), nodesValue(nil)
}

// driftOutcome is what a check-mode run found on the nodes a job ran on.
type driftOutcome struct {
	// drifted maps a node to what its steps would change.
	drifted map[string][]string
	// unreachable are the nodes the check did not reach.
	unreachable []string
	// unsure are the nodes on which a step of the check failed, so it
	// cannot tell.
	unsure []string
}

// driftOf reads a finished check-mode job over the nodes in ran.
func driftOf(check *api.Job, ran []string) driftOutcome {
	out := driftOutcome{drifted: map[string][]string{}}
	expected := map[string]bool{}
	for _, id := range check.Expected {
		expected[id] = true
	}
	steps := api.Flatten(check.Tasks)
	for _, id := range ran {
		if !expected[id] || slices.Contains(check.Unreachable, id) {
			out.unreachable = append(out.unreachable, id)
			continue
		}
		var changes []string
		unreachable, unsure := false, false
		for _, s := range steps {
			r := check.Results.Node(s.Index, id)
			switch {
			case r == nil:
			case r.Status == api.StepUnreachable:
				unreachable = true
			case r.Status == api.StepSuccess && r.Changed:
				changes = append(changes, fmt.Sprintf("tasks step %d %s: %s", s.Index, s.Task.Name(), driftLine(r.Output)))
			case r.Status != api.StepSuccess && r.Status != api.StepSkipped:
				unsure = true
			}
		}
		switch {
		case unreachable:
			out.unreachable = append(out.unreachable, id)
		case len(changes) > 0:
			out.drifted[id] = changes
		case unsure:
			out.unsure = append(out.unsure, id)
		}
	}
	return out
}

// driftLine is the first line of a check's output, without the "check
// mode:" every backend starts it with, bounded.
func driftLine(output string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(output), "\n")
	line = strings.TrimSpace(strings.TrimPrefix(line, "check mode:"))
	if line == "" {
		return "would change"
	}
	if len(line) > maxDriftLine {
		line = line[:maxDriftLine] + "…"
	}
	return line
}

// driftedValue renders drifted nodes as drifted_nodes.
func driftedValue(drifted map[string][]string) types.Map {
	elems := make(map[string]attr.Value, len(drifted))
	for id, changes := range drifted {
		vals := make([]attr.Value, 0, len(changes))
		for _, c := range changes {
			vals = append(vals, types.StringValue(c))
		}
		elems[id] = types.ListValueMust(types.StringType, vals)
	}
	return types.MapValueMust(driftedNodesType.ElemType, elems)
}

// readDrifted reads drifted_nodes; null and unknown read as none.
func readDrifted(ctx context.Context, m types.Map, diags *diag.Diagnostics) map[string][]string {
	out := map[string][]string{}
	if m.IsNull() || m.IsUnknown() {
		return out
	}
	diags.Append(m.ElementsAs(ctx, &out, false)...)
	return out
}

// driftSummary says in one line which nodes drifted and how:
// "2 of 40 nodes drifted: web-02 tasks step 0 file.write: would write …".
func driftSummary(drifted map[string][]string, of int) string {
	ids := make([]string, 0, len(drifted))
	for id := range drifted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var parts []string
	for i, id := range ids {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(ids)-i))
			break
		}
		parts = append(parts, id+" "+strings.Join(drifted[id], "; "))
	}
	return fmt.Sprintf("%d of %d nodes drifted: %s", len(ids), of, strings.Join(parts, "; "))
}

// detectDrift runs the refresh's check of a finished job and records what
// it found in m. A check that cannot run is a warning; the drift recorded
// before stays.
func (r *jobResource) detectDrift(ctx context.Context, m *jobResourceModel, job *api.Job, diags *diag.Diagnostics) {
	if r.client == nil || !job.Status.Terminal() || job.CheckMode {
		return
	}
	var ran []string
	diags.Append(m.ConvergedNodes.ElementsAs(ctx, &ran, false)...)
	if len(ran) == 0 || diags.HasError() {
		return
	}
	spec, d := specFrom(ctx, m, m.Tasks)
	diags.Append(d...)
	if diags.HasError() {
		return
	}
	spec.CheckMode = true
	if t, err := time.ParseDuration(spec.Timeout); err != nil || t > driftCheckTimeout || t <= 0 {
		spec.Timeout = driftCheckTimeout.String()
	}
	if spec.Target.Scope == api.ScopeAny {
		// Check the node the job ran on, not whichever the controller picks.
		spec.Target = api.Target{Scope: api.ScopeNode, Value: ran[0]}
	}
	var sub diag.Diagnostics
	check := r.runJob(ctx, spec, true, true, driftCheckTimeout+15*time.Second, "Drift Check Error", &sub)
	if check == nil || sub.HasError() {
		for _, e := range sub.Errors() {
			diags.AddWarning("Drift Not Checked", fmt.Sprintf("The drift check of job %s could not run, so the drift recorded before stays. %s: %s",
				m.ID.ValueString(), e.Summary(), e.Detail()))
		}
		return
	}
	o := driftOf(check, ran)
	m.DriftedNodes = driftedValue(o.drifted)
	m.DriftUnreachableNodes = nodesValue(o.unreachable)
	if len(o.unreachable) > 0 {
		diags.AddWarning("Drift Check Could Not Reach Nodes", fmt.Sprintf("Check job %s could not reach %s; they are recorded in drift_unreachable_nodes, not as drift.",
			check.ID, strings.Join(o.unreachable, ", ")))
	}
	if len(o.unsure) > 0 {
		diags.AddWarning("Drift Check Failed On Nodes", fmt.Sprintf("On %s a step of check job %s failed, so it cannot tell whether they drifted; `grid job status %s` shows why.",
			strings.Join(o.unsure, ", "), check.ID, check.ID))
	}
}

// planDrift plans drifted_nodes for an update: emptied when drift is
// detected on some nodes (apply fixes them) or no longer looked for.
func (r *jobResource) planDrift(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse, plan *jobResourceModel) {
	var st jobResourceModel
	resp.Diagnostics.Append(req.State.Get(ctx, &st)...)
	if resp.Diagnostics.HasError() {
		return
	}
	drifted := readDrifted(ctx, st.DriftedNodes, &resp.Diagnostics)
	if plan.Drift.IsUnknown() || resp.Diagnostics.HasError() {
		return
	}
	if plan.Drift.ValueString() != driftDetect {
		if len(drifted) > 0 || len(st.DriftUnreachableNodes.Elements()) > 0 {
			dn, du := noDrift()
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("drifted_nodes"), dn)...)
			resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("drift_unreachable_nodes"), du)...)
		}
		return
	}
	if len(drifted) == 0 {
		return
	}
	resp.Diagnostics.AddAttributeWarning(path.Root("drifted_nodes"), "Nodes Drifted",
		driftSummary(drifted, len(st.ConvergedNodes.Elements()))+". Apply runs the tasks on these nodes alone.")
	dn, _ := noDrift()
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("drifted_nodes"), dn)...)
}

// fixDrift runs the tasks on the nodes recorded drifted when the plan
// empties drifted_nodes, and records those it did not fix.
func (r *jobResource) fixDrift(ctx context.Context, plan, state *jobResourceModel, diags *diag.Diagnostics) {
	if plan.DriftedNodes.IsUnknown() || plan.DriftedNodes.IsNull() {
		plan.DriftedNodes = state.DriftedNodes
	}
	if plan.DriftUnreachableNodes.IsUnknown() || plan.DriftUnreachableNodes.IsNull() {
		plan.DriftUnreachableNodes = state.DriftUnreachableNodes
	}
	drifted := readDrifted(ctx, state.DriftedNodes, diags)
	if len(drifted) == 0 || plan.Drift.ValueString() != driftDetect || len(plan.DriftedNodes.Elements()) > 0 || r.client == nil {
		return
	}
	waitFor, d := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	diags.Append(d...)
	spec, d := specFrom(ctx, plan, plan.Tasks)
	diags.Append(d...)
	if diags.HasError() {
		plan.DriftedNodes = state.DriftedNodes
		return
	}
	ids := make([]string, 0, len(drifted))
	for id := range drifted {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	fixed := r.runOnNodes(ctx, spec, ids, waitFor, "Fix Drift", diags)
	for _, id := range fixed {
		delete(drifted, id)
	}
	plan.DriftedNodes = driftedValue(drifted)
}

// runOnNodes runs spec on each of ids alone (a job whose target is that
// node), one after the other, and returns the nodes on which it succeeded.
// It stops at the first that does not, which it reports under act.
func (r *jobResource) runOnNodes(ctx context.Context, spec *api.JobSpec, ids []string, waitFor time.Duration, act string, diags *diag.Diagnostics) []string {
	var done []string
	for _, id := range ids {
		one := *spec
		one.Target = api.Target{Scope: api.ScopeNode, Value: id}
		job := r.runJob(ctx, &one, true, false, waitFor, "Submit "+act+" Job Error", diags)
		if job == nil {
			break
		}
		if !jobSucceeded(job, false) {
			diags.AddError(act+" Job Failed", fmt.Sprintf("Running the tasks on %s did not complete. %s\n\n"+
				"The nodes it ran on before are recorded; the next apply tries %s again.", id, failureDetail(job), id))
			break
		}
		done = append(done, id)
	}
	return done
}
