package provider

import (
	"github.com/hashicorp/terraform-plugin-framework/attr"
	dschema "github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	rschema "github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/listplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/objectplanmodifier"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/planmodifier"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

// The results attribute is the same in the grid_job resource and the grid_job
// data source. The framework has one schema package per kind, so its fields
// are described once here and rendered into each; the attribute types of
// the values (job_model.go) are derived from the same lists.

// resultField is one computed attribute of a result.
type resultField struct {
	name string
	typ  attr.Type // types.StringType, types.Int64Type or types.BoolType
	desc string
}

const (
	resultsDescription     = "One element per step, in the order the steps run (pipeline tasks are numbered in place, depth first)."
	resultNodesDescription = "Result of each node that took part in the step, by node id; null with `results_detail = \"summary\"`."
)

var (
	// resultStepFields are a step's attributes besides nodes.
	resultStepFields = []resultField{
		{"index", types.Int64Type, "Flat step index."},
		{"backend", types.StringType, "Backend of the step."},
		{"action", types.StringType, "Action of the step."},
	}
	// resultNodeFields are the attributes of one node's result of a step.
	resultNodeFields = []resultField{
		{"status", types.StringType, "`success`, `failed`, `skipped`, `cancelled`, or a state in progress."},
		{"output", types.StringType, "What the action reported."},
		{"error", types.StringType, "Why it failed."},
		{"changed", types.BoolType, "Whether the action changed something."},
		{"duration", types.StringType, "How long the last attempt ran."},
		{"attempts", types.Int64Type, "How many times it ran."},
		{"site", types.StringType, "The node's site when the target was resolved (`default` for the agents connected to the controllers directly)."},
	}
)

// summaryFields are the attributes of summary: a finished job's nodes
// counted by outcome (api.JobSummary), and those that changed.
var summaryFields = []resultField{
	{"targeted", types.Int64Type, "Nodes the target matched, online or not."},
	{"reached", types.Int64Type, "Nodes that started at least one step."},
	{"succeeded", types.Int64Type, "Nodes on which every step they ran succeeded."},
	{"failed", types.Int64Type, "Nodes on which a step failed."},
	{"unreachable", types.Int64Type, "Nodes offline when the target was resolved, or gone during a step."},
	{"not_started", types.Int64Type, "Nodes a rollout never started because `max_errors` was exceeded."},
	{"changed", types.Int64Type, "Nodes on which a step changed something."},
}

const (
	summaryDescription          = "The finished job's nodes counted by outcome; null while the job runs."
	unreachableNodesDescription = "Ids of the nodes the job could not reach (offline when its target was resolved, or gone during a step), sorted."
)

// resultAttrTypesOf returns the attribute types of fields.
func resultAttrTypesOf(fields []resultField) map[string]attr.Type {
	m := make(map[string]attr.Type, len(fields)+1)
	for _, f := range fields {
		m[f.name] = f.typ
	}
	return m
}

// computedAttrs renders fields as computed attributes of one schema
// package, given how that package builds each kind.
func computedAttrs[A any](fields []resultField, str, i64, boolean func(desc string) A) map[string]A {
	m := make(map[string]A, len(fields)+1)
	for _, f := range fields {
		switch f.typ {
		case types.Int64Type:
			m[f.name] = i64(f.desc)
		case types.BoolType:
			m[f.name] = boolean(f.desc)
		default:
			m[f.name] = str(f.desc)
		}
	}
	return m
}

// resourceComputedAttrs renders fields as the resource's computed
// attributes.
func resourceComputedAttrs(fields []resultField) map[string]rschema.Attribute {
	return computedAttrs(fields,
		func(d string) rschema.Attribute {
			return rschema.StringAttribute{Computed: true, MarkdownDescription: d}
		},
		func(d string) rschema.Attribute {
			return rschema.Int64Attribute{Computed: true, MarkdownDescription: d}
		},
		func(d string) rschema.Attribute { return rschema.BoolAttribute{Computed: true, MarkdownDescription: d} })
}

// dataSourceComputedAttrs renders fields as the data source's computed
// attributes.
func dataSourceComputedAttrs(fields []resultField) map[string]dschema.Attribute {
	return computedAttrs(fields,
		func(d string) dschema.Attribute {
			return dschema.StringAttribute{Computed: true, MarkdownDescription: d}
		},
		func(d string) dschema.Attribute {
			return dschema.Int64Attribute{Computed: true, MarkdownDescription: d}
		},
		func(d string) dschema.Attribute { return dschema.BoolAttribute{Computed: true, MarkdownDescription: d} })
}

// resourceSummaryAttribute is grid_job's summary.
func resourceSummaryAttribute() rschema.SingleNestedAttribute {
	return rschema.SingleNestedAttribute{
		MarkdownDescription: summaryDescription,
		Computed:            true,
		Attributes:          resourceComputedAttrs(summaryFields),
		PlanModifiers:       []planmodifier.Object{objectplanmodifier.UseStateForUnknown()},
	}
}

// dataSourceSummaryAttribute is the grid_job data source's summary.
func dataSourceSummaryAttribute() dschema.SingleNestedAttribute {
	return dschema.SingleNestedAttribute{
		MarkdownDescription: summaryDescription,
		Computed:            true,
		Attributes:          dataSourceComputedAttrs(summaryFields),
	}
}

// resourceResultsAttribute is grid_job's results: kept from state until the
// job is run again.
func resourceResultsAttribute() rschema.ListNestedAttribute {
	step := resourceComputedAttrs(resultStepFields)
	step["nodes"] = rschema.MapNestedAttribute{
		MarkdownDescription: resultNodesDescription,
		Computed:            true,
		NestedObject:        rschema.NestedAttributeObject{Attributes: resourceComputedAttrs(resultNodeFields)},
	}
	return rschema.ListNestedAttribute{
		MarkdownDescription: resultsDescription,
		Computed:            true,
		PlanModifiers:       []planmodifier.List{listplanmodifier.UseStateForUnknown()},
		NestedObject:        rschema.NestedAttributeObject{Attributes: step},
	}
}

// dataSourceResultsAttribute is the grid_job data source's results.
func dataSourceResultsAttribute() dschema.ListNestedAttribute {
	step := dataSourceComputedAttrs(resultStepFields)
	step["nodes"] = dschema.MapNestedAttribute{
		MarkdownDescription: resultNodesDescription,
		Computed:            true,
		NestedObject:        dschema.NestedAttributeObject{Attributes: dataSourceComputedAttrs(resultNodeFields)},
	}
	return dschema.ListNestedAttribute{
		MarkdownDescription: resultsDescription,
		Computed:            true,
		NestedObject:        dschema.NestedAttributeObject{Attributes: step},
	}
}
