# Online nodes in group web or any of its sub-groups (web.prod, web.dev, ...).
data "grid_nodes" "web" {
  group  = "web"
  status = "online"
}

# Every node whose agent offers the ping backend.
data "grid_nodes" "ping" {
  backend = "ping"
}

output "web_nodes" {
  value = data.grid_nodes.web.ids
}

output "web_hostnames" {
  value = { for n in data.grid_nodes.web.nodes : n.id => n.hostname }
}
