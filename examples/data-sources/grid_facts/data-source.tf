# Read each web node's OS release at plan time and pick a package name.
data "grid_facts" "os" {
  target  = { scope = "group", value = "web" }
  backend = "sysinfo"
  action  = "os"
}

locals {
  os = { for id, n in data.grid_facts.os.nodes : id => jsondecode(n.facts_json) if n.status == "success" }
}

output "package_per_node" {
  value = { for id, f in local.os : id => f.id == "debian" ? "nginx-light" : "nginx" }
}

# The nodes whose TLS certificate expires within 30 days (cert.expiry fails
# on them, and says how many days are left).
data "grid_facts" "certs" {
  target  = { scope = "group", value = "web" }
  backend = "cert"
  action  = "expiry"
  params  = { path = "/etc/ssl/certs/web.pem", min_days = "30" }
  timeout = "30s"
}

output "expiring" {
  value = [for id, n in data.grid_facts.certs.nodes : id if n.status == "failed" && can(jsondecode(n.facts_json).min_days_left)]
}
