# Import a schedule by its name (grid schedule list shows them).
terraform import grid_schedule.nightly_update nightly-update
