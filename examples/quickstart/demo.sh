#!/usr/bin/env bash
# Runs the quickstart end to end: starts `grid dev` with 3 agents, applies
# examples/quickstart with the provider served by bin/grid (dev_overrides),
# prints the node inventory and per-node results, then destroys and stops
# the fleet, also when a step fails. `make demo` builds bin/grid first.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin="$root/bin/grid"
port=${DEMO_PORT:-18765}

[[ -x $bin ]] || { echo "demo: $bin is missing; run make build" >&2; exit 1; }
command -v terraform >/dev/null || { echo "demo: terraform is not on PATH" >&2; exit 1; }

work=$(mktemp -d)
dev_pid=""
applied=""

cleanup() {
	rc=$?
	set +e
	if [[ -n $applied ]]; then
		echo "==> terraform destroy"
		terraform -chdir="$work" destroy -auto-approve -input=false -no-color >"$work/destroy.log" 2>&1 ||
			{ echo "demo: destroy failed:"; cat "$work/destroy.log"; rc=1; }
	fi
	if [[ -n $dev_pid ]]; then
		echo "==> stopping grid dev (pid $dev_pid)"
		kill "$dev_pid" 2>/dev/null
		wait "$dev_pid" 2>/dev/null
	fi
	if [[ $rc -ne 0 && -f $work/dev.log ]]; then
		echo "--- grid dev log ---"
		tail -n 40 "$work/dev.log"
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP PIPE

# Terraform finds the provider as bin/terraform-provider-grid: the same binary.
ln -sf grid "$root/bin/terraform-provider-grid"
cat >"$work/dev.tfrc" <<TFRC
provider_installation {
  dev_overrides {
    "gridfleet/grid" = "$root/bin"
  }
  direct {}
}
TFRC
cp "$root"/examples/quickstart/*.tf "$work/"

# Anything listening on the port (bash's /dev/tcp opens a connection).
if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
	echo "demo: something already listens on 127.0.0.1:$port; stop it or set DEMO_PORT" >&2
	exit 1
fi
echo "==> grid dev --agents 3 --api-addr 127.0.0.1:$port"
"$bin" dev --agents 3 --api-addr "127.0.0.1:$port" >"$work/dev.log" 2>&1 &
dev_pid=$!

# grid dev prints the line to paste (GRID_ADDR, the admin GRID_TOKEN and
# GRID_CACERT, the CA of its HTTPS API) once its agents are online.
export_line=""
for _ in $(seq 1 100); do
	if ! kill -0 "$dev_pid" 2>/dev/null; then
		echo "demo: grid dev exited" >&2
		exit 1
	fi
	export_line=$(grep -m1 -E '^ *export GRID_ADDR=https://[^ ]+ GRID_TOKEN=[A-Za-z0-9_-]+ GRID_CACERT=[^ ]+$' "$work/dev.log" || true)
	[[ -n $export_line ]] && break
	sleep 0.2
done
[[ -n $export_line ]] || { echo "demo: grid dev printed no export line within 20s" >&2; exit 1; }
eval "$export_line"

export TF_CLI_CONFIG_FILE="$work/dev.tfrc" TF_IN_AUTOMATION=1
# With dev_overrides for its only provider the configuration needs no
# terraform init.
echo "==> terraform apply"
applied=1
if ! terraform -chdir="$work" apply -auto-approve -input=false -no-color 2>&1 |
	sed '/Provider development overrides are in effect/,/releases\.$/d'; then
	echo "demo: terraform apply failed" >&2
	exit 1
fi

echo
echo "==> node inventory (terraform output nodes)"
terraform -chdir="$work" output -no-color nodes
echo
echo "==> job (terraform output job)"
terraform -chdir="$work" output -no-color job
echo
echo "==> per-node results (terraform output results)"
terraform -chdir="$work" output -no-color results
