terraform {
  required_providers {
    grid = {
      source = "gridfleet/grid"
    }
  }
}

# Every setting is optional: address falls back to GRID_ADDR, then
# http://127.0.0.1:8765 (where `grid dev` listens); token to GRID_TOKEN.
provider "grid" {
  address = "http://127.0.0.1:8765"
  timeout = "30s"
}
