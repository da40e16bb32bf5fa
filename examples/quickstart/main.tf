# Quickstart: run `grid dev` (a controller and 3 agents on this machine),
# then `terraform apply` here. Agents node-1 and node-3 are in group
# web.prod, node-2 in db.prod.

terraform {
  required_providers {
    grid = {
      source = "gridfleet/grid"
    }
  }
}

# Talks to https://127.0.0.1:8765 (where `grid dev` listens) unless GRID_ADDR
# says otherwise, trusting the CA in GRID_CACERT.
provider "grid" {}

# The nodes in group web (web.prod counts: groups are hierarchical).
data "grid_nodes" "web" {
  group  = "web"
  status = "online"
}

resource "grid_job" "hello" {
  target = {
    scope = "group"
    value = "web"
  }

  tasks = [
    # A per-node pipeline: each node runs these in order, at its own pace.
    {
      tasks = [
        { backend = "ping", action = "echo", params = { message = "hello" } },
        { backend = "ping", action = "echo", params = { message = "from the pipeline" } },
      ]
    },
    # A barrier step: starts once every node finished the pipeline.
    { backend = "ping", action = "echo", params = { message = "all nodes are through" } },
  ]

  # Change the value to run the job again.
  triggers = {
    run = "1"
  }
}

output "nodes" {
  description = "The web nodes: id => hostname and groups."
  value       = { for n in data.grid_nodes.web.nodes : n.id => { hostname = n.hostname, groups = n.groups } }
}

output "job" {
  value = {
    id     = grid_job.hello.id
    status = grid_job.hello.status
    nodes  = grid_job.hello.nodes
  }
}

output "results" {
  description = "Per step, per node: status and output."
  value = {
    for step in grid_job.hello.results :
    "step ${step.index} (${step.backend}.${step.action})" => {
      for node, r in step.nodes : node => "${r.status}: ${r.output}"
    }
  }
}
