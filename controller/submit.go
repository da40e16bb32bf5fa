package controller

import (
	"github.com/gridfleet/terraform-provider-grid/api"
)

// decodeSubmission turns a POST /job body into a job not yet stored: parse
// (YAML or JSON, unknown fields refused), validate its structure, then
// validate every task against the catalog of online nodes. Any error names
// the field at fault and is the 400's message.
func decodeSubmission(body []byte, cat *api.Catalog) (*api.Job, error) {
	spec, err := api.ParseJobSpec(body)
	if err != nil {
		return nil, err
	}
	job := spec.Job()
	if err := cat.ValidateJob(job); err != nil {
		return nil, err
	}
	return job, nil
}
