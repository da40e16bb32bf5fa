# The rollout make e2e applies to the containerised fleet: grid-hello from
# the fleet's apt repository, its config written with the file backend, its
# unit enabled and started, then restarted one host at a time when the
# config changes. GRID_ADDR, GRID_TOKEN and GRID_CACERT come from fleet.env.
terraform {
  required_providers {
    grid = { source = "gridfleet/grid" }
  }
}

provider "grid" {}

variable "greeting" {
  type = string
}

locals {
  config = "GREETING=${var.greeting}\n"
  fleet  = { scope = "group", value = "fleet" }
}

# Package lists first: the repository may have changed. A new host in the
# group shows in the plan (converge) and gets them too.
resource "grid_job" "apt_lists" {
  target   = local.fleet
  converge = true
  tasks    = [{ backend = "apt", action = "update" }]
}

# Each host installs, configures, enables and starts, two hosts at a time.
resource "grid_job" "rollout" {
  target          = local.fleet
  converge        = true
  max_concurrency = "2"
  tasks = [{
    tasks = [
      { backend = "apt", action = "install", params = { package = "grid-hello" } },
      { backend = "file", action = "write", params = { path = "/etc/grid-hello/hello.conf", content = local.config, mode = "0644" } },
      { backend = "systemd", action = "enable", params = { unit = "grid-hello" } },
      { backend = "systemd", action = "start", params = { unit = "grid-hello" } },
    ]
  }]
  depends_on = [grid_job.apt_lists]
}

# A new config restarts the service one host at a time.
resource "grid_job" "restart" {
  target          = local.fleet
  max_concurrency = "1"
  triggers        = { config = sha256(local.config) }
  tasks           = [{ backend = "systemd", action = "restart", params = { unit = "grid-hello" } }]
  depends_on      = [grid_job.rollout]
}

# Whether the rollout changed anything on any host.
output "rollout_changed" {
  value = anytrue(flatten([for s in grid_job.rollout.results : [for n in values(s.nodes) : n.changed]]))
}

output "rollout_status" {
  value = grid_job.rollout.status
}

output "restart_status" {
  value = grid_job.restart.status
}

output "converged_nodes" {
  value = grid_job.rollout.converged_nodes
}
