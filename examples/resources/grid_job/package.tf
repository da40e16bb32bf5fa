# The package backend works the same on apt and dnf hosts: install a pinned
# version, hold it there, and report what is installed.
resource "grid_job" "nginx" {
  target = {
    scope = "group"
    value = "web"
  }

  tasks = [
    { backend = "package", action = "update" },
    { backend = "package", action = "install", params = { name = "nginx", version = "1.22.1-9" } },
    { backend = "package", action = "hold", params = { name = "nginx" } },
    { backend = "package", action = "list", params = { filter = "nginx" } },
  ]

  triggers = {
    nginx = "1.22.1-9"
  }
}
