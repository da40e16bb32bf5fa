package provider

import (
	"context"
	"os"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
)

// Address is the provider's registry address.
const Address = "registry.terraform.io/gridfleet/grid"

// magicCookieKey and magicCookieValue are the plugin handshake Terraform sets
// in the environment of every provider it starts.
const (
	magicCookieKey   = "TF_PLUGIN_MAGIC_COOKIE"
	magicCookieValue = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2"
)

// StartedByTerraform reports whether Terraform started this process as a
// provider plugin (the handshake cookie is in the environment).
func StartedByTerraform() bool {
	return os.Getenv(magicCookieKey) == magicCookieValue
}

// Serve serves the provider over protocol 6 until Terraform stops it. With
// debug set it runs in debug mode: it prints a TF_REATTACH_PROVIDERS value
// to hand to Terraform and keeps running until interrupted.
func Serve(ctx context.Context, version string, debug bool) error {
	return providerserver.Serve(ctx, New(version), providerserver.ServeOpts{
		Address:         Address,
		Debug:           debug,
		ProtocolVersion: 6,
	})
}
