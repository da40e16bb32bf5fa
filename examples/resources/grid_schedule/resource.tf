# Every night at 03:00 Berlin time, run a job on the web nodes; a tick
# while last night's job still runs is skipped (overlap = "skip").
resource "grid_schedule" "nightly_update" {
  name      = "nightly-update"
  cron      = "0 3 * * *"
  time_zone = "Europe/Berlin"
  catch_up  = "run_once" # after an outage, run the missed night once
  overlap   = "skip"

  job = jsonencode({
    target   = { scope = "group", value = "web" }
    strategy = "continue"
    timeout  = "30m"
    tasks = [
      { backend = "ping", action = "echo", params = { message = "nightly update starts" } },
    ]
  })
}

# YAML works as well, as in a job file: job = file("report.yaml") takes
# the same YAML or JSON `grid job run -f` takes.
resource "grid_schedule" "hourly_report" {
  name   = "hourly-report"
  cron   = "@hourly"
  paused = true
  job    = <<-EOT
    target: {scope: all}
    tasks:
      - {backend: ping, action: echo, params: {message: report}}
  EOT
}
