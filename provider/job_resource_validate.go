package provider

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// ValidateConfig checks what can be checked without the controller: the
// target's value against its scope, each task element being either a leaf or
// a pipeline, and the job's structure as the controller will check it.
func (r *jobResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var cfg jobResourceModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &cfg)...)
	if resp.Diagnostics.HasError() {
		return
	}

	target, targetKnown, d := readTarget(ctx, cfg.Target)
	resp.Diagnostics.Append(d...)
	if targetKnown {
		if err := target.Validate(); err != nil {
			addValidationError(&resp.Diagnostics, "Invalid Target", err)
		}
	}

	if cfg.Drift.ValueString() == driftDetect && cfg.CheckMode.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("drift"), "Drift Detection Of A Check-Mode Job",
			`A job with check_mode = true changes nothing, so there is no state its nodes can drift from. Set drift = "ignore", or check_mode = false.`)
	}
	validateTaskShapes(ctx, cfg.Tasks, path.Root("tasks"), &resp.Diagnostics)
	validateTaskShapes(ctx, cfg.DestroyTasks, path.Root("destroy_tasks"), &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}

	for _, list := range []struct {
		name string
		l    types.List
	}{{"tasks", cfg.Tasks}, {"destroy_tasks", cfg.DestroyTasks}} {
		tree, d := readTasks(ctx, list.l, path.Root(list.name), "tasks")
		resp.Diagnostics.Append(d...)
		if !tree.Known || len(tree.Phases) == 0 {
			continue
		}
		job := &api.Job{Target: api.Target{Scope: api.ScopeAll}, Tasks: tree.Phases}
		if err := job.Validate(); err != nil {
			addTasksValidationError(&resp.Diagnostics, list.name, err)
		}
	}
}

// validateTaskShapes checks that every element of a task list sets either
// backend and action or nested tasks.
func validateTaskShapes(ctx context.Context, l types.List, root path.Path, diags *diag.Diagnostics) {
	if l.IsNull() || l.IsUnknown() {
		return
	}
	for i, el := range l.Elements() {
		obj, ok := el.(types.Object)
		if !ok || obj.IsNull() || obj.IsUnknown() {
			continue
		}
		tm, d := taskFromObject(ctx, obj)
		diags.Append(d...)
		if diags.HasError() {
			return
		}
		p := root.AtListIndex(i)
		if tm.Tasks.IsUnknown() {
			continue
		}
		if !tm.Tasks.IsNull() {
			for _, a := range []struct {
				name string
				set  bool
			}{
				{"backend", !tm.Backend.IsNull()}, {"action", !tm.Action.IsNull()}, {"params", !tm.Params.IsNull()},
				{"timeout", !tm.Timeout.IsNull()}, {"max_retries", !tm.MaxRetries.IsNull()},
			} {
				if a.set {
					diags.AddAttributeError(p.AtName(a.name), "Invalid Task",
						fmt.Sprintf("%s: a task sets either backend/action (a step) or tasks (a per-node pipeline), not both. "+
							"Move %q into the tasks of the pipeline, or remove the nested tasks.", p, a.name))
				}
			}
			sub := tm.Tasks.Elements()
			for j, se := range sub {
				so, ok := se.(types.Object)
				if !ok || so.IsNull() || so.IsUnknown() {
					continue
				}
				lm, d := taskFromObject(ctx, so)
				diags.Append(d...)
				if diags.HasError() {
					return
				}
				requireLeaf(lm, p.AtName("tasks").AtListIndex(j), diags)
			}
			continue
		}
		requireLeaf(tm, p, diags)
	}
}

func requireLeaf(tm taskModel, p path.Path, diags *diag.Diagnostics) {
	if tm.Backend.IsNull() {
		diags.AddAttributeError(p.AtName("backend"), "Missing Task Backend",
			p.String()+": each task needs a backend and an action (or, at the top level, nested tasks for a "+
				"per-node pipeline). The grid_backends data source lists what the fleet offers.")
	}
	if tm.Action.IsNull() {
		diags.AddAttributeError(p.AtName("action"), "Missing Task Action",
			p.String()+": each task needs an action of its backend, e.g. backend = \"ping\", action = \"echo\".")
	}
}

// addValidationError reports an api validation error of the target at the
// attribute it names.
func addValidationError(diags *diag.Diagnostics, summary string, err error) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) || ve.Field == "" {
		diags.AddAttributeError(path.Root("target"), summary, err.Error())
		return
	}
	diags.AddAttributeError(fieldPath(path.Empty(), ve.Field), summary, ve.Error())
}

// addTasksValidationError reports an api validation error of a task list
// ("tasks[1].tasks[0].timeout") under the list attribute it came from.
func addTasksValidationError(diags *diag.Diagnostics, list string, err error) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) || ve.Field == "" {
		diags.AddAttributeError(path.Root(list), "Invalid Task", err.Error())
		return
	}
	rest := strings.TrimPrefix(ve.Field, "tasks")
	diags.AddAttributeError(fieldPath(path.Root(list), rest), "Invalid Task", list+rest+": "+ve.Msg)
}

// ModifyPlan validates a job that is about to be submitted (a create, or
// the create half of a replacement) against the controller: every task
// against the action schemas of the online agents, and the target against
// the online nodes, whose ids it plans into nodes.
func (r *jobResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.client == nil {
		return
	}
	var plan jobResourceModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// A create submits the job. An in-place update submits nothing, but
	// may set new destroy_tasks, which are checked too, and may converge
	// the target. (A replacement is planned again as a create, with a null
	// state.)
	creating := req.State.Raw.IsNull()
	// driftOn is an update that starts detecting drift: its tasks are
	// checked for check mode like a new job's.
	driftOn := false
	if !creating {
		r.planConverge(ctx, req, resp, &plan)
		r.planDrift(ctx, req, resp, &plan)
		planResultsDetail(ctx, req, resp, &plan)
		if resp.Diagnostics.HasError() {
			return
		}
		var priorDrift types.String
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("drift"), &priorDrift)...)
		driftOn = plan.Drift.ValueString() == driftDetect && priorDrift.ValueString() != driftDetect
	}
	lists := []string{"tasks", "destroy_tasks"}
	if !creating {
		var prior types.List
		resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("destroy_tasks"), &prior)...)
		if resp.Diagnostics.HasError() || (plan.DestroyTasks.Equal(prior) && !driftOn) {
			return
		}
		lists = []string{"destroy_tasks"}
		if driftOn {
			lists = append(lists, "tasks")
		}
	}

	checkMode := plan.CheckMode.ValueBool()
	var leaves []specLeaf
	for _, name := range lists {
		var l types.List
		resp.Diagnostics.Append(req.Plan.GetAttribute(ctx, path.Root(name), &l)...)
		tree, d := readTasks(ctx, l, path.Root(name), name)
		resp.Diagnostics.Append(d...)
		leaves = append(leaves, tree.Leaves...)
	}
	if resp.Diagnostics.HasError() {
		return
	}

	cat, err := r.client.Backends(ctx)
	if err != nil {
		r.addPlanClientError(&resp.Diagnostics, "Read Backends Error", err)
		return
	}
	// valid are the leaves the fleet's merged schemas accept; only they are
	// judged against the targeted nodes, so that a task that is wrong
	// anyway (a misspelled param) gets its one error, not also "not
	// offered by the targeted nodes".
	var valid []specLeaf
	for _, leaf := range leaves {
		if !leaf.Known || plan.CheckMode.IsUnknown() {
			continue
		}
		if err := cat.ValidateTask(leaf.Field, leaf.Task, checkMode); err != nil {
			p, msg := leafErrorPath(leaf, err)
			resp.Diagnostics.AddAttributeError(p, "Invalid Task", msg+
				"\n\nThe grid_backends data source (or `grid backends`) lists the actions and parameters the online agents offer.")
			continue
		}
		valid = append(valid, leaf)
		warnSensitiveInParams(&resp.Diagnostics, cat, leaf)
	}

	if plan.Drift.ValueString() == driftDetect {
		for i, msg := range withoutCheckMode(cat, leaves) {
			if !strings.HasPrefix(leaves[i].Field, "destroy_tasks") {
				resp.Diagnostics.AddAttributeError(leaves[i].Path, "Drift Detection Not Possible", msg+
					", so a refresh cannot check whether a node drifted without changing it. "+
					`Set drift = "ignore" for this job, or move the action to a job without drift detection.`)
			}
		}
	}
	if !creating {
		return
	}
	target, known, d := readTarget(ctx, plan.Target)
	resp.Diagnostics.Append(d...)
	if !known || plan.AllowEmpty.IsUnknown() {
		return
	}
	nodes, err := r.client.ListNodes(ctx)
	if err != nil {
		r.addPlanClientError(&resp.Diagnostics, "List Nodes Error", err)
		return
	}
	ids := matchingOnline(nodes, target)
	if len(ids) == 0 && !plan.AllowEmpty.ValueBool() {
		resp.Diagnostics.AddAttributeError(path.Root("target"), "No Matching Nodes",
			fmt.Sprintf("No online node matches target %s (%d nodes registered, %d online). Start agents for it, fix the target, "+
				"or set allow_empty = true to accept a job that reaches no node.", target, len(nodes), countOnline(nodes)))
		return
	}
	if target.Scope != api.ScopeAny {
		r.validateOnTargeted(ctx, nodes, ids, valid, checkMode, &resp.Diagnostics)
	}
	if plan.Preview.ValueBool() && !resp.Diagnostics.HasError() && len(ids) > 0 {
		var tasksOnly []specLeaf
		for _, l := range leaves {
			if !strings.HasPrefix(l.Field, "destroy_tasks") {
				tasksOnly = append(tasksOnly, l)
			}
		}
		nodesMap, summary, ok := r.planPreview(ctx, &plan, tasksOnly, cat, &resp.Diagnostics)
		if !ok {
			return
		}
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, previewNodesPath, nodesMap)...)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, previewSummaryPath, summary)...)
		resp.Diagnostics.AddWarning("Preview: "+summary.ValueString(), "A check-mode run of the tasks on the target found this; "+
			"preview_nodes lists per node the steps that would change it. Nothing was changed.")
	}
	if target.Scope == api.ScopeAny || resp.Diagnostics.HasError() {
		// For any, the controller picks the node when the job runs.
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("nodes"), nodesValue(ids))...)
}

// validateOnTargeted checks every task against the schemas of the nodes
// the target selects, not the union of the fleet's: a task some targeted
// node does not offer (or its allowlist refuses) fails at plan time, naming
// those nodes, as the controller's submit would. Nodes sharing a schema
// digest are judged once.
func (r *jobResource) validateOnTargeted(ctx context.Context, nodes []api.NodeInfo, ids []string, leaves []specLeaf, checkMode bool, diags *diag.Diagnostics) {
	digest := map[string]string{}
	for _, n := range nodes {
		digest[n.ID] = n.SchemaDigest
	}
	byDigest := map[string][]string{}
	var order []string
	for _, id := range ids {
		d := digest[id]
		if _, ok := byDigest[d]; !ok {
			order = append(order, d)
		}
		byDigest[d] = append(byDigest[d], id)
	}
	// Per leaf, the nodes that do not offer its action (no such backend or
	// action, or their allow list refuses it), and the nodes that offer it
	// but refuse the task (their schema of the action differs from the
	// fleet's: another agent version), each with the first reason.
	type refusal struct {
		nodes []string
		why   error
	}
	notOffered, refused := map[int]*refusal{}, map[int]*refusal{}
	for _, d := range order {
		group := byDigest[d]
		info, err := r.client.GetNode(ctx, group[0])
		if err != nil {
			continue // gone since the list: the submit judges it
		}
		cat := &api.Catalog{Backends: info.Schemas}
		for i, leaf := range leaves {
			if !leaf.Known {
				continue
			}
			err := cat.ValidateTask(leaf.Field, leaf.Task, checkMode)
			if err == nil {
				continue
			}
			m := refused
			var ve *api.ValidationError
			if errors.As(err, &ve) && (ve.Field == leaf.Field+".backend" || ve.Field == leaf.Field+".action") {
				m = notOffered
			}
			if m[i] == nil {
				m[i] = &refusal{why: err}
			}
			m[i].nodes = append(m[i].nodes, group...)
		}
	}
	for i, leaf := range leaves {
		if ref := notOffered[i]; ref != nil {
			sort.Strings(ref.nodes)
			_, msg := leafErrorPath(leaf, ref.why)
			diags.AddAttributeError(leaf.Path, "Task Not Offered By Targeted Nodes",
				fmt.Sprintf("%s: %d targeted node(s) cannot run %s: %s (%s).\n\nNarrow the target to nodes that offer the action, "+
					"or enable it on those agents (their backends and allow list); `grid node info ID` shows what a node offers.",
					leaf.Field, len(ref.nodes), leaf.Task.Name(), strings.Join(ref.nodes, ", "), msg))
		}
		if ref := refused[i]; ref != nil {
			sort.Strings(ref.nodes)
			p, msg := leafErrorPath(leaf, ref.why)
			diags.AddAttributeError(p, "Task Refused By Targeted Nodes",
				fmt.Sprintf("%s: %d targeted node(s) offer %s but refuse this task: %s (%s).\n\nTheir schema of the action differs from "+
					"the fleet's (another agent version?); `grid node info ID` shows what a node takes.",
					leaf.Field, len(ref.nodes), leaf.Task.Name(), strings.Join(ref.nodes, ", "), msg))
		}
	}
}

// addPlanClientError reports a failure to ask the controller at plan time.
func (r *jobResource) addPlanClientError(diags *diag.Diagnostics, summary string, err error) {
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		diags.AddError("Controller Unreachable", fmt.Sprintf(
			"grid_job validates its tasks and resolves its target at plan time, which needs the GRID controller at %s, "+
				"and it cannot be reached: %v.\n\nStart the controller (for a local fleet: grid dev), or point the provider's "+
				"address (or GRID_ADDR) at it.", ue.Address, ue.Err))
		return
	}
	addClientError(diags, summary, err)
}

// leafErrorPath maps a catalog validation error of a leaf to the attribute
// at fault and a message.
func leafErrorPath(leaf specLeaf, err error) (path.Path, string) {
	var ve *api.ValidationError
	if !errors.As(err, &ve) {
		return leaf.Path, err.Error()
	}
	rest := strings.TrimPrefix(strings.TrimPrefix(ve.Field, leaf.Field), ".")
	switch {
	case rest == "backend" || rest == "action":
		return leaf.Path.AtName(rest), ve.Error()
	case strings.HasPrefix(rest, "params."):
		key := strings.TrimPrefix(rest, "params.")
		if _, ok := leaf.Task.Params[key]; ok {
			return leaf.Path.AtName("params").AtMapKey(key), ve.Error()
		}
		return leaf.Path.AtName("params"), ve.Error()
	}
	return leaf.Path, ve.Error()
}

// matchingOnline returns the sorted ids of the online nodes a target selects.
func matchingOnline(nodes []api.NodeInfo, t api.Target) []string {
	var ids []string
	for _, n := range nodes {
		if n.Status == api.NodeOnline && t.Matches(n.ID, n.Site, n.Groups) {
			ids = append(ids, n.ID)
		}
	}
	sort.Strings(ids)
	return ids
}

func countOnline(nodes []api.NodeInfo) int {
	n := 0
	for _, x := range nodes {
		if x.Status == api.NodeOnline {
			n++
		}
	}
	return n
}

// warnSensitiveInParams warns about a param the action's schema marks
// sensitive but the configuration sets in params: the controller hides it,
// yet Terraform keeps it unmarked in plans and state.
func warnSensitiveInParams(diags *diag.Diagnostics, cat *api.Catalog, leaf specLeaf) {
	b, ok := cat.Backend(leaf.Task.Backend)
	if !ok {
		return
	}
	a, ok := b.Action(leaf.Task.Action)
	if !ok {
		return
	}
	for k := range leaf.Task.Params {
		if ps, ok := a.Param(k); ok && ps.Sensitive && !leaf.Hidden[k] {
			diags.AddAttributeWarning(leaf.Path.AtName("params").AtMapKey(k), "Sensitive Parameter In params",
				fmt.Sprintf("%s.%s marks %q sensitive. Move it to sensitive_params so that Terraform marks it sensitive in plans and state.",
					leaf.Task.Backend, leaf.Task.Action, k))
		}
	}
}
