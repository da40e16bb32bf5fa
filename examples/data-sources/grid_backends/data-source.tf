data "grid_backends" "all" {}

# backend => list of action names
output "actions" {
  value = { for b in data.grid_backends.all.backends : b.name => [for a in b.actions : a.name] }
}
