package provider

import (
	"context"
	"encoding/json"
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
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/gridfleet/terraform-provider-grid/api"
)

// Attribute types of the nested values shared by grid_job (resource and data
// source).
var (
	targetAttrTypes = map[string]attr.Type{
		"scope": types.StringType,
		"value": types.StringType,
		"site":  types.StringType,
	}
	leafAttrTypes = map[string]attr.Type{
		"backend":          types.StringType,
		"action":           types.StringType,
		"params":           types.MapType{ElemType: types.StringType},
		"sensitive_params": types.MapType{ElemType: types.StringType},
		"timeout":          types.StringType,
		"max_retries":      types.Int64Type,
		"condition":        types.StringType,
	}
	leafObjectType = types.ObjectType{AttrTypes: leafAttrTypes}
	taskAttrTypes  = withAttr(withAttr(withAttr(leafAttrTypes, "tasks", types.ListType{ElemType: leafObjectType}),
		"max_concurrency", types.StringType), "max_errors", types.StringType)
	taskObjectType = types.ObjectType{AttrTypes: taskAttrTypes}

	resultNodeAttrTypes  = resultAttrTypesOf(resultNodeFields)
	resultNodeObjectType = types.ObjectType{AttrTypes: resultNodeAttrTypes}
	resultAttrTypes      = withAttr(resultAttrTypesOf(resultStepFields), "nodes", types.MapType{ElemType: resultNodeObjectType})
	resultObjectType     = types.ObjectType{AttrTypes: resultAttrTypes}
	summaryAttrTypes     = resultAttrTypesOf(summaryFields)
)

func withAttr(m map[string]attr.Type, name string, t attr.Type) map[string]attr.Type {
	out := make(map[string]attr.Type, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	out[name] = t
	return out
}

// The target attribute's parts, as grid_job and grid_facts take them.
var targetScopes = []string{string(api.ScopeAll), string(api.ScopeGroup), string(api.ScopeNode), string(api.ScopeAny), string(api.ScopeSite)}

const (
	targetScopeDescription = "`all` (every online node), `group` (nodes in the group `value` or any of its sub-groups: `web` also selects `web.dev`), " +
		"`node` (the node with id `value`), `any` (one online node, chosen by the controller) or `site` (every node of the site `value`; " +
		"`default` is the agents connected to the controllers directly)."
	targetValueDescription = "Group name for scope `group`, node id for scope `node`, site name for scope `site`; not set for `all` and `any`."
	targetSiteDescription  = "Narrows a `group`, `node` or `any` target to the nodes of one site: scope `group`, value `web`, site `paris` " +
		"is the nodes of `web` at `paris` (`group:web@paris` on the command line). Not set for `all` (use scope `site`) and `site`."
)

// targetModel maps target = { scope, value, site }.
type targetModel struct {
	Scope types.String `tfsdk:"scope"`
	Value types.String `tfsdk:"value"`
	Site  types.String `tfsdk:"site"`
}

// taskModel maps one element of tasks: a leaf (backend/action) or a branch
// (nested tasks, a per-node pipeline). An element of a nested tasks list
// has the leaf attributes only; taskFromObject reads both.
type taskModel struct {
	Backend types.String `tfsdk:"backend"`
	Action  types.String `tfsdk:"action"`
	Params  types.Map    `tfsdk:"params"`
	// SensitiveParams are merged with Params; Terraform marks them
	// sensitive.
	SensitiveParams types.Map    `tfsdk:"sensitive_params"`
	Timeout         types.String `tfsdk:"timeout"`
	MaxRetries      types.Int64  `tfsdk:"max_retries"`
	Condition       types.String `tfsdk:"condition"`
	Tasks           types.List   `tfsdk:"tasks"`
	// MaxConcurrency and MaxErrors roll a top-level task out (see api.Phase).
	MaxConcurrency types.String `tfsdk:"max_concurrency"`
	MaxErrors      types.String `tfsdk:"max_errors"`
}

// taskFromObject reads an element of a tasks list, top-level or nested. A
// nested element's object lacks the attributes only top-level tasks have
// (tasks, max_concurrency, max_errors): they read as null.
func taskFromObject(ctx context.Context, obj types.Object) (taskModel, diag.Diagnostics) {
	var diags diag.Diagnostics
	if attrs := obj.Attributes(); len(attrs) < len(taskAttrTypes) {
		full := map[string]attr.Value{
			"tasks":           types.ListNull(leafObjectType),
			"max_concurrency": types.StringNull(),
			"max_errors":      types.StringNull(),
		}
		for name, v := range attrs {
			full[name] = v
		}
		obj, diags = types.ObjectValue(taskAttrTypes, full)
		if diags.HasError() {
			return taskModel{}, diags
		}
	}
	var tm taskModel
	diags.Append(obj.As(ctx, &tm, basetypes.ObjectAsOptions{})...)
	return tm, diags
}

// specLeaf is one leaf of a configured task tree.
type specLeaf struct {
	// Path is the leaf's attribute path (tasks[1].tasks[0]).
	Path path.Path
	// Field is the same path in api's notation.
	Field string
	Task  api.Task
	// Hidden names the params set in sensitive_params.
	Hidden map[string]bool
	// Known is false when any of the leaf's values is unknown.
	Known bool
}

// taskTree is a task list read from configuration or plan.
type taskTree struct {
	Phases []api.Phase
	Leaves []specLeaf
	// Known is false when the list or any value in it is unknown.
	Known bool
}

// readTasks reads a tasks list, top-level or nested.
// root is the list's attribute path, field its api name.
func readTasks(ctx context.Context, l types.List, root path.Path, field string) (taskTree, diag.Diagnostics) {
	var diags diag.Diagnostics
	tree := taskTree{Known: true}
	if l.IsUnknown() {
		tree.Known = false
		return tree, diags
	}
	if l.IsNull() {
		return tree, diags
	}
	for i, el := range l.Elements() {
		p := root.AtListIndex(i)
		f := fmt.Sprintf("%s[%d]", field, i)
		obj, ok := el.(types.Object)
		if !ok || obj.IsUnknown() {
			tree.Known = false
			continue
		}
		if obj.IsNull() {
			continue
		}
		tm, d := taskFromObject(ctx, obj)
		diags.Append(d...)
		if diags.HasError() {
			return tree, diags
		}
		ph, known := phaseFrom(tm)
		for k := range tm.SensitiveParams.Elements() {
			if _, dup := tm.Params.Elements()[k]; dup {
				diags.AddAttributeError(p.AtName("sensitive_params").AtMapKey(k), "Invalid Task Parameters",
					fmt.Sprintf("Parameter %q is set in both params and sensitive_params; set it in one of them (sensitive_params for a secret).", k))
			}
		}
		if !tm.Tasks.IsNull() {
			sub, d := readTasks(ctx, tm.Tasks, p.AtName("tasks"), f+".tasks")
			diags.Append(d...)
			ph.Tasks = sub.Phases
			tree.Leaves = append(tree.Leaves, sub.Leaves...)
			tree.Known = tree.Known && known && sub.Known
			tree.Phases = append(tree.Phases, ph)
			continue
		}
		hidden := map[string]bool{}
		for k := range tm.SensitiveParams.Elements() {
			hidden[k] = true
		}
		tree.Leaves = append(tree.Leaves, specLeaf{Path: p, Field: f, Task: ph.ToTask(), Hidden: hidden, Known: known})
		tree.Known = tree.Known && known
		tree.Phases = append(tree.Phases, ph)
	}
	return tree, diags
}

// phaseFrom converts the leaf attributes of a task element; known is false
// when any of them is unknown.
func phaseFrom(tm taskModel) (api.Phase, bool) {
	known := !tm.Backend.IsUnknown() && !tm.Action.IsUnknown() && !tm.Timeout.IsUnknown() &&
		!tm.MaxRetries.IsUnknown() && !tm.Condition.IsUnknown() && !tm.Params.IsUnknown() && !tm.Tasks.IsUnknown() &&
		!tm.MaxConcurrency.IsUnknown() && !tm.MaxErrors.IsUnknown() && !tm.SensitiveParams.IsUnknown()
	ph := api.Phase{
		Backend:        tm.Backend.ValueString(),
		Action:         tm.Action.ValueString(),
		Timeout:        tm.Timeout.ValueString(),
		MaxRetries:     int(tm.MaxRetries.ValueInt64()),
		Condition:      api.Condition(tm.Condition.ValueString()),
		MaxConcurrency: limitFrom(tm.MaxConcurrency),
		MaxErrors:      limitFrom(tm.MaxErrors),
	}
	for _, m := range []types.Map{tm.Params, tm.SensitiveParams} {
		if m.IsNull() || m.IsUnknown() {
			continue
		}
		if ph.Params == nil {
			ph.Params = api.Params{}
		}
		for k, v := range m.Elements() {
			s, ok := v.(types.String)
			if !ok || s.IsUnknown() {
				known = false
				continue
			}
			ph.Params[k] = s.ValueString()
		}
	}
	return ph, known
}

// tasksValue renders phases as a tasks list value (for import and the data
// source): zero values become null, as when they are left out of a config.
func tasksValue(phases []api.Phase) (types.List, diag.Diagnostics) {
	var diags diag.Diagnostics
	if phases == nil {
		return types.ListNull(taskObjectType), diags
	}
	elems := make([]attr.Value, 0, len(phases))
	for _, ph := range phases {
		attrs := leafAttrs(ph)
		if ph.IsBranch() {
			subs := make([]attr.Value, 0, len(ph.Tasks))
			for _, sub := range ph.Tasks {
				o, d := types.ObjectValue(leafAttrTypes, leafAttrs(sub))
				diags.Append(d...)
				subs = append(subs, o)
			}
			l, d := types.ListValue(leafObjectType, subs)
			diags.Append(d...)
			attrs["tasks"] = l
		} else {
			attrs["tasks"] = types.ListNull(leafObjectType)
		}
		attrs["max_concurrency"] = limitValue(ph.MaxConcurrency)
		attrs["max_errors"] = limitValue(ph.MaxErrors)
		o, d := types.ObjectValue(taskAttrTypes, attrs)
		diags.Append(d...)
		elems = append(elems, o)
	}
	l, d := types.ListValue(taskObjectType, elems)
	diags.Append(d...)
	return l, diags
}

func leafAttrs(ph api.Phase) map[string]attr.Value {
	// The controller shows a sensitive value as api.SensitiveValue; it
	// belongs in sensitive_params.
	plain, hidden := map[string]attr.Value{}, map[string]attr.Value{}
	for k, v := range ph.Params {
		if v == api.SensitiveValue {
			hidden[k] = types.StringValue(v)
		} else {
			plain[k] = types.StringValue(v)
		}
	}
	params, sensitive := types.MapNull(types.StringType), types.MapNull(types.StringType)
	if len(plain) > 0 {
		params = types.MapValueMust(types.StringType, plain)
	}
	if len(hidden) > 0 {
		sensitive = types.MapValueMust(types.StringType, hidden)
	}
	maxRetries := types.Int64Null()
	if ph.MaxRetries != 0 {
		maxRetries = types.Int64Value(int64(ph.MaxRetries))
	}
	return map[string]attr.Value{
		"backend":          optString(ph.Backend),
		"action":           optString(ph.Action),
		"params":           params,
		"sensitive_params": sensitive,
		"timeout":          optString(ph.Timeout),
		"max_retries":      maxRetries,
		"condition":        optString(string(ph.Condition)),
	}
}

// optString maps "" to null.
func optString(s string) types.String {
	if s == "" {
		return types.StringNull()
	}
	return types.StringValue(s)
}

// targetValue renders a target as an object value.
func targetValue(t api.Target) types.Object {
	return types.ObjectValueMust(targetAttrTypes, map[string]attr.Value{
		"scope": types.StringValue(string(t.Scope)),
		"value": optString(t.Value),
		"site":  optString(t.Site),
	})
}

// readTarget reads the target object; ok is false when it or a part of it
// is null or unknown.
func readTarget(ctx context.Context, o types.Object) (api.Target, bool, diag.Diagnostics) {
	if o.IsNull() || o.IsUnknown() {
		return api.Target{}, false, nil
	}
	var tm targetModel
	diags := o.As(ctx, &tm, basetypes.ObjectAsOptions{})
	if diags.HasError() || tm.Scope.IsUnknown() || tm.Value.IsUnknown() || tm.Site.IsUnknown() {
		return api.Target{}, false, diags
	}
	return api.Target{Scope: api.Scope(tm.Scope.ValueString()), Value: tm.Value.ValueString(), Site: tm.Site.ValueString()}, true, diags
}

// nodesValue renders node ids as a sorted list.
func nodesValue(ids []string) types.List {
	s := slices.Clone(ids)
	sort.Strings(s)
	elems := make([]attr.Value, 0, len(s))
	for _, id := range s {
		elems = append(elems, types.StringValue(id))
	}
	return types.ListValueMust(types.StringType, elems)
}

// What state records of each node's results (results_detail).
const (
	// resultsFull keeps every node's result of every step.
	resultsFull = "full"
	// resultsSummary keeps the steps and the job's summary: no value per
	// node, so a job over a thousand nodes plans as fast as one over ten.
	resultsSummary = "summary"
)

// planResultsDetail plans results as unknown when an update changes
// results_detail: apply reads them again in the new detail.
func planResultsDetail(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse, plan *jobResourceModel) {
	var prior types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("results_detail"), &prior)...)
	if resp.Diagnostics.HasError() || plan.ResultsDetail.IsUnknown() || plan.ResultsDetail.Equal(prior) {
		return
	}
	resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("results"), types.ListUnknown(resultObjectType))...)
}

// resultsValue renders a job's results as one element per flat step, in
// step order, each with a map of node id to that node's result; with
// detail resultsSummary, each step's nodes are null.
func resultsValue(job *api.Job, detail string) (types.List, diag.Diagnostics) {
	var diags diag.Diagnostics
	steps := api.Flatten(job.Tasks)
	elems := make([]attr.Value, 0, len(steps))
	for _, s := range steps {
		if detail == resultsSummary {
			o, d := types.ObjectValue(resultAttrTypes, map[string]attr.Value{
				"index":   types.Int64Value(int64(s.Index)),
				"backend": types.StringValue(s.Task.Backend),
				"action":  types.StringValue(s.Task.Action),
				"nodes":   types.MapNull(resultNodeObjectType),
			})
			diags.Append(d...)
			elems = append(elems, o)
			continue
		}
		nodes := map[string]attr.Value{}
		for id, r := range job.Results[s.Index] {
			if r == nil {
				continue
			}
			o, d := types.ObjectValue(resultNodeAttrTypes, map[string]attr.Value{
				"status":   types.StringValue(r.Status),
				"output":   types.StringValue(r.Output),
				"error":    types.StringValue(r.Error),
				"changed":  types.BoolValue(r.Changed),
				"duration": types.StringValue(time.Duration(r.Duration).String()),
				"attempts": types.Int64Value(int64(r.Attempts)),
				"site":     types.StringValue(job.NodeSite(id)),
			})
			diags.Append(d...)
			nodes[id] = o
		}
		m, d := types.MapValue(resultNodeObjectType, nodes)
		diags.Append(d...)
		o, d := types.ObjectValue(resultAttrTypes, map[string]attr.Value{
			"index":   types.Int64Value(int64(s.Index)),
			"backend": types.StringValue(s.Task.Backend),
			"action":  types.StringValue(s.Task.Action),
			"nodes":   m,
		})
		diags.Append(d...)
		elems = append(elems, o)
	}
	l, d := types.ListValue(resultObjectType, elems)
	diags.Append(d...)
	return l, diags
}

// summaryValue counts a finished job's nodes by outcome; null while the
// job runs.
func summaryValue(job *api.Job) types.Object {
	sum := job.Summary
	if sum == nil {
		return types.ObjectNull(summaryAttrTypes)
	}
	changed := 0
	for _, id := range job.Expected {
		for _, m := range job.Results {
			if r := m[id]; r != nil && r.Changed {
				changed++
				break
			}
		}
	}
	return types.ObjectValueMust(summaryAttrTypes, map[string]attr.Value{
		"targeted":    types.Int64Value(int64(sum.Targeted)),
		"reached":     types.Int64Value(int64(sum.Reached)),
		"succeeded":   types.Int64Value(int64(sum.Succeeded)),
		"failed":      types.Int64Value(int64(sum.Failed)),
		"unreachable": types.Int64Value(int64(sum.Unreachable)),
		"not_started": types.Int64Value(int64(sum.NotStarted)),
		"changed":     types.Int64Value(int64(changed)),
	})
}

// unreachableNodes are the nodes a job could not reach: offline when its
// target was resolved, or gone during a step.
func unreachableNodes(job *api.Job) []string {
	seen := map[string]bool{}
	out := []string{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	for _, id := range job.Unreachable {
		add(id)
	}
	for _, m := range job.Results {
		for id, r := range m {
			if r != nil && r.Status == api.StepUnreachable {
				add(id)
			}
		}
	}
	return out
}

// jobSucceeded reports whether a terminal job counts as a success. A job
// that resolved to no nodes fails on the controller; with allowEmpty that is
// what the configuration asked for.
func jobSucceeded(job *api.Job, allowEmpty bool) bool {
	if job.Status == api.JobCompleted {
		return true
	}
	return allowEmpty && job.Status == api.JobFailed && len(job.Expected) == 0
}

// failureDetail lists what went wrong in a job: each failed node with its
// step and error, the unreachable nodes apart from them, the nodes a
// rollout never started, then the job's own error and its counts.
func failureDetail(job *api.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Job %s on target %s ended %s.", job.ID, job.Target, job.Status)
	if job.Error != "" {
		fmt.Fprintf(&b, " %s.", strings.TrimSuffix(job.Error, "."))
	}
	var failed, unreachable []string
	notStarted := map[string]bool{}
	for _, id := range job.Unreachable {
		unreachable = append(unreachable, fmt.Sprintf("  - node %s: offline when the target was resolved; the job did not run on it", nodeAtSite(job, id)))
	}
	for _, s := range api.Flatten(job.Tasks) {
		res := job.Results[s.Index]
		ids := make([]string, 0, len(res))
		for id := range res {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			r := res[id]
			if r == nil {
				continue
			}
			switch r.Status {
			case api.StepNotStarted:
				notStarted[id] = true
				continue
			case api.StepUnreachable:
				unreachable = append(unreachable, fmt.Sprintf("  - node %s, step %d (%s): %s", nodeAtSite(job, id), s.Index, s.Task.Name(), r.Error))
				continue
			case api.StepFailed, api.StepCancelled:
			default:
				continue
			}
			msg := r.Error
			if msg == "" {
				msg = r.Status
			}
			attempts := ""
			if r.Attempts > 1 {
				attempts = fmt.Sprintf(" after %d attempts", r.Attempts)
			}
			failed = append(failed, fmt.Sprintf("  - node %s, step %d (%s): %s%s", nodeAtSite(job, id), s.Index, s.Task.Name(), msg, attempts))
		}
	}
	if len(failed) > 0 {
		b.WriteString("\n\nFailed nodes:\n")
		b.WriteString(strings.Join(failed, "\n"))
	}
	if len(unreachable) > 0 {
		b.WriteString("\n\nUnreachable nodes (not failed: bring them back online and apply again):\n")
		b.WriteString(strings.Join(unreachable, "\n"))
	}
	if len(notStarted) > 0 {
		ids := make([]string, 0, len(notStarted))
		for id := range notStarted {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		fmt.Fprintf(&b, "\n\nNot started (max_errors exceeded): %s", strings.Join(ids, ", "))
	}
	if sum := job.Summary; sum != nil {
		fmt.Fprintf(&b, "\n\nNodes: %d targeted, %d reached, %d succeeded, %d failed, %d unreachable, %d not started.",
			sum.Targeted, sum.Reached, sum.Succeeded, sum.Failed, sum.Unreachable, sum.NotStarted)
	}
	return b.String()
}

// nodeAtSite names a node of a job as node@site when it is not in the
// default site: a site whose link is cut shows in the list of its nodes.
func nodeAtSite(job *api.Job, id string) string {
	if site := job.NodeSite(id); site != api.DefaultSite {
		return id + "@" + site
	}
	return id
}

// limitFrom reads a max_concurrency or max_errors value ("3", "10%"); null
// and unknown are no limit. Text that does not parse is kept for
// api validation to report with the attribute's name.
func limitFrom(v types.String) *api.Limit {
	if v.IsNull() || v.IsUnknown() {
		return nil
	}
	var l api.Limit
	// UnmarshalJSON never fails on a JSON string: bad text is kept.
	b, _ := json.Marshal(v.ValueString())
	_ = l.UnmarshalJSON(b)
	return &l
}

// limitValue renders a limit as its attribute value.
func limitValue(l *api.Limit) types.String {
	if l == nil {
		return types.StringNull()
	}
	return types.StringValue(l.String())
}
