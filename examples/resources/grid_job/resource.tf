# A per-node pipeline followed by a barrier step, on every node in group web
# (and its sub-groups, such as web.prod).
resource "grid_job" "rollout" {
  target = {
    scope = "group"
    value = "web"
  }
  strategy = "fail-fast"
  timeout  = "10m"

  tasks = [
    # Each node runs these in order, advancing on its own results.
    {
      tasks = [
        { backend = "ping", action = "echo", params = { message = "prepare" } },
        { backend = "ping", action = "sleep", params = { duration = "1s" }, timeout = "30s", max_retries = 2 },
      ]
    },
    # A barrier: starts once every node finished the pipeline.
    { backend = "ping", action = "echo", params = { message = "done" }, condition = "on_success" },
  ]

  # Run the job again whenever the release changes.
  triggers = {
    release = "2024-06-01"
  }

  # Run when the resource is destroyed, against the same target.
  destroy_tasks = [
    { backend = "ping", action = "echo", params = { message = "rolled back" } },
  ]

  timeouts {
    create = "15m"
  }
}

# One node, chosen by the controller; the plan shows the node only after apply.
resource "grid_job" "canary" {
  target = { scope = "any" }
  tasks  = [{ backend = "ping", action = "echo", params = { message = "canary" } }]
}

# Keep a file as written: every refresh checks it on the nodes in check
# mode, a plan shows the nodes where someone changed it, and apply writes it
# there again. A fleet-wide job keeps only a summary of its results in state.
resource "grid_job" "motd" {
  target         = { scope = "group", value = "web" }
  drift          = "detect"
  converge       = true
  results_detail = "summary"
  tasks = [
    { backend = "file", action = "write", params = { path = "/etc/motd", content = "managed by GRID\n" } },
  ]
}

output "motd_drift" {
  value = grid_job.motd.drifted_nodes
}

output "rollout_results" {
  value = {
    for step in grid_job.rollout.results :
    "${step.index}:${step.backend}.${step.action}" => { for node, r in step.nodes : node => r.status }
  }
}

# The web nodes of one site only (group:web@paris on the command line); a
# whole site is target = { scope = "site", value = "paris" }. Each node's
# result names its site.
resource "grid_job" "paris_web" {
  target = { scope = "group", value = "web", site = "paris" }
  tasks = [
    { backend = "ping", action = "echo", params = { message = "hello paris" } },
  ]
}
