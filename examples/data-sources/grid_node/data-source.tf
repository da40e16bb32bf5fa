data "grid_node" "first" {
  id = "node-1"
}

output "node_1" {
  value = {
    status   = data.grid_node.first.status
    groups   = data.grid_node.first.groups
    backends = data.grid_node.first.backends
  }
}
