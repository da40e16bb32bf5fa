package provider

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// TestAccJobResource_sensitiveParams: a value set in sensitive_params
// reaches the backend, is marked sensitive in plan and state, and the
// results in state never echo it.
func TestAccJobResource_sensitiveParams(t *testing.T) {
	f := testAccFleet(t, 1)
	const res = "grid_job.test"
	secret := "tf-hunter2-secret"
	sum := sha256.Sum256([]byte(secret))
	value := tfjsonpath.New("tasks").AtSliceIndex(0).AtMapKey("sensitive_params")
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config: jobConfig(f.APIURL(), `
  target = { scope = "all" }
  tasks  = [{ backend = "test", action = "secret", sensitive_params = { value = "`+secret+`" } }]
`),
			ConfigPlanChecks: resource.ConfigPlanChecks{
				PreApply: []plancheck.PlanCheck{plancheck.ExpectSensitiveValue(res, value)},
			},
			ConfigStateChecks: []statecheck.StateCheck{
				statecheck.ExpectSensitiveValue(res, value),
				statecheck.ExpectKnownValue(res, tfjsonpath.New("status"), knownvalue.StringExact("completed")),
				statecheck.ExpectKnownValue(res,
					tfjsonpath.New("results").AtSliceIndex(0).AtMapKey("nodes").AtMapKey("node-1").AtMapKey("output"),
					knownvalue.StringRegexp(regexp.MustCompile(`^sha256 `+hex.EncodeToString(sum[:])+` of \(sensitive\)$`))),
			},
		}},
	})
}
