terraform {
  required_providers {
    grid = {
      source = "gridfleet/grid"
    }
  }
}

# Every setting is optional: address falls back to GRID_ADDR, then
# https://127.0.0.1:8765 (where `grid dev` listens); token to GRID_TOKEN;
# ca_file to GRID_CACERT (the controller's DATA_DIR/ca.pem).
provider "grid" {
  address = "https://127.0.0.1:8765"
  ca_file = "/var/lib/grid/ca.pem"
  timeout = "30s"
}
