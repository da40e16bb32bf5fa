# Read a job started elsewhere, e.g. with `grid job run`.
data "grid_job" "last" {
  id = "job-0123456789abcdef"
}

output "job_status" {
  value = data.grid_job.last.status
}

output "failed_nodes" {
  value = distinct(flatten([
    for step in data.grid_job.last.results : [
      for node, r in step.nodes : node if r.status == "failed"
    ]
  ]))
}
