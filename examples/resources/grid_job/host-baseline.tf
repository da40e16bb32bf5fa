# A host baseline on every node in group web: a deploy user with a key
# (in adm, to read logs; sudo, wheel and admin are refused: no job gives
# root),
# one key of an app's config and a line of sshd's, and the app's port open
# to the private network. Each action changes only what differs, so
# running the job again (a new trigger) changes nothing; check_mode = true
# shows the diffs and the useradd/nft it would run, changing nothing.
# The agents need /etc/myapp and /etc/ssh in file_allowed_prefixes.
resource "grid_job" "baseline" {
  target = { scope = "group", value = "web" }
  tasks = [{
    tasks = [
      { backend = "user", action = "group_present", params = { name = "deploy" } },
      { backend = "user", action = "present", params = { name = "deploy", group = "deploy", groups = "adm", shell = "/bin/bash" } },
      { backend = "user", action = "authorized_key", params = { user = "deploy", key = file("ci.pub") } },
      { backend = "config", action = "set", params = { path = "/etc/myapp/app.yaml", key = "server.port", value = "8080", type = "int" } },
      { backend = "file", action = "line", params = { path = "/etc/ssh/sshd_config", regexp = "^#?PasswordAuthentication ", line = "PasswordAuthentication no" } },
      { backend = "file", action = "copy", params = { path = "/etc/myapp/ca.pem", url = "https://pki.example.com/ca.pem", sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" } },
      { backend = "firewall", action = "allow", params = { port = "8080", proto = "tcp", source = "10.0.0.0/8" } },
    ]
  }]
}
