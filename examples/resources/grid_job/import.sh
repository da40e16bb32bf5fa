# Import a job by the id the controller gave it (grid job list shows them).
terraform import grid_job.rollout job-0123456789abcdef
