# Install a pinned RKE2 release from the mirror in each agent's
# backends.rke2.artifact_url (checksum verified), then start the server.
resource "grid_job" "rke2" {
  target = {
    scope = "group"
    value = "k8s"
  }
  strategy = "fail-fast"

  tasks = [
    { backend = "rke2", action = "install", params = { version = "v1.30.4+rke2r1" } },
    { backend = "rke2", action = "start", params = { mode = "server" } },
  ]

  triggers = {
    rke2 = "v1.30.4+rke2r1"
  }
}
