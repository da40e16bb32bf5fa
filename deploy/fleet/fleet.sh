#!/usr/bin/env bash
# The containerised fleet: three clustered controllers and FLEET_AGENTS
# agent hosts in Docker, installed from the packages in dist/.
#
#   fleet.sh up      build the images (cached) and start the fleet, then
#                    write GRID_FLEET_DIR/fleet.env (GRID_ADDR, GRID_TOKEN,
#                    GRID_CACERT for the CLI and terraform on this host)
#   fleet.sh scale N run N agent hosts
#   fleet.sh down    remove the containers, network and state dir (the
#                    images stay, as the cache of the next up)
#
# Environment: GRID_FLEET_DIR (default .fleet in the repository),
# FLEET_AGENTS (default 3), VERSION (of the packages in dist/),
# GRID_FLEET_API_PORT (controller-1's API on 127.0.0.1, default 28765;
# controller-2 and -3 on GRID_FLEET_API_PORT_2/_3, default 28766/28767).
set -euo pipefail

repo=$(cd "$(dirname "$0")/../.." && pwd)
here=$repo/deploy/fleet
export GRID_FLEET_DIR=${GRID_FLEET_DIR:-$repo/.fleet}
mkdir -p "$GRID_FLEET_DIR"
export GRID_FLEET_DIR=$(cd "$GRID_FLEET_DIR" && pwd)
agents=${FLEET_AGENTS:-3}
port=${GRID_FLEET_API_PORT:-28765}
base=grid-debian-systemd:bookworm
compose=(docker-compose -p grid-fleet -f "$here/compose.yaml")

log() { printf '%s fleet: %s\n' "$(date +%T)" "$*"; }

# secrets makes the cluster's CA and join token once: every controller
# gets the same three files (README, Security: clusters).
secrets() {
	local d=$GRID_FLEET_DIR/secrets
	[[ -s $d/ca.pem && -s $d/ca-key.pem && -s $d/join-token ]] && return
	mkdir -p "$d"
	(
		umask 077
		openssl ecparam -name prime256v1 -genkey -noout -out "$d/ca-key.pem"
		openssl rand -hex 32 >"$d/join-token"
	)
	openssl req -x509 -new -key "$d/ca-key.pem" -sha256 -days 3650 -subj "/O=GRID/CN=GRID fleet CA" \
		-addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" -out "$d/ca.pem"
	chmod 0644 "$d/ca.pem"
	log "made the fleet's CA and join token in $d"
}

configs() {
	local i j routes
	for i in 1 2 3; do
		routes=()
		for j in 1 2 3; do [[ $j != "$i" ]] && routes+=("nats://controller-$j:6222"); done
		cat >"$GRID_FLEET_DIR/controller-$i.yaml" <<YAML
# controller-$i of the containerised fleet (written by deploy/fleet/fleet.sh)
name: controller-$i
api_addr: 0.0.0.0:8765
nats_addr: 0.0.0.0:4222
data_dir: /var/lib/grid/controller
cluster_name: grid-fleet
cluster_addr: 0.0.0.0:6222
routes: [${routes[0]}, ${routes[1]}]
# the API is published on 127.0.0.1 of the Docker host
tls_hosts: [controller-$i, localhost, 127.0.0.1]
YAML
	done
	cat >"$GRID_FLEET_DIR/agent.yaml" <<'YAML'
# An agent host of the containerised fleet (written by deploy/fleet/fleet.sh).
# No name: the node id is the short hostname (the container's id). No allow
# list: every action that is not dangerous (apt remove, systemd stop, ...).
groups: [fleet]
nats: [nats://controller-1:4222, nats://controller-2:4222, nats://controller-3:4222]
data_dir: /var/lib/grid-agent
ca_file: /etc/grid/fleet/ca.pem
join_token_file: /etc/grid/fleet/join-token
backends:
  file_allowed_prefixes: [/etc/grid-hello]
YAML
	# The agents' only package source: a flat repository on the host
	# (empty until something is published into it, as make e2e does).
	mkdir -p "$GRID_FLEET_DIR/repo"
	[[ -e $GRID_FLEET_DIR/repo/Packages ]] || : >"$GRID_FLEET_DIR/repo/Packages"
	echo "deb [trusted=yes] file:/srv/grid-repo ./" >"$GRID_FLEET_DIR/grid-repo.list"
}

images() {
	local ver=${VERSION:-}
	ver=${ver#v}
	local grid agent
	if [[ -n $ver ]]; then
		grid=$repo/dist/grid_${ver}_amd64.deb agent=$repo/dist/grid-agent_${ver}_amd64.deb
	else
		grid=$(ls -t "$repo"/dist/grid_*_amd64.deb 2>/dev/null | head -n1 || true)
		agent=$(ls -t "$repo"/dist/grid-agent_*_amd64.deb 2>/dev/null | head -n1 || true)
	fi
	if [[ ! -f $grid || ! -f $agent ]]; then
		echo "fleet: no packages in dist/ (${grid:-grid_*.deb}, ${agent:-grid-agent_*.deb}): run make package" >&2
		exit 1
	fi
	"$repo/deploy/image/debian-systemd.sh" "$base"
	local ctx=$GRID_FLEET_DIR/build
	rm -rf "$ctx" && mkdir -p "$ctx"
	cp "$grid" "$ctx/grid.deb"
	cp "$agent" "$ctx/grid-agent.deb"
	cp "$here/controller-fleet.conf" "$ctx/"
	# Same bytes, same layer: an unchanged package reuses the cached image.
	touch -d @0 "$ctx"/*
	local t
	for t in controller agent; do
		# (the legacy builder's deprecation notice is dropped; errors stay)
		docker build -q --build-arg BASE=$base --target $t -t grid-fleet-$t:latest -f "$here/Dockerfile" "$ctx" 2>&1 >/dev/null |
			{ grep -vE 'DEPRECATED|legacy builder|buildx|^ *https://docs.docker.com/go/buildx|^$' >&2 || true; }
	done
	log "images grid-fleet-controller and grid-fleet-agent from $(basename "$grid") and $(basename "$agent")"
}

# wait_ready waits for controller-1's API and reads its admin token.
wait_ready() {
	local ca=$GRID_FLEET_DIR/secrets/ca.pem token=
	local i
	for ((i = 0; i < 180; i++)); do
		if curl -fsS --cacert "$ca" "https://127.0.0.1:$port/readyz" >/dev/null 2>&1; then
			token=$("${compose[@]}" exec -T controller-1 cat /var/lib/grid/controller/admin-token 2>/dev/null || true)
			[[ -n $token ]] && break
		fi
		sleep 1
	done
	if [[ -z $token ]]; then
		echo "fleet: controller-1 is not ready after 180s; its journal:" >&2
		"${compose[@]}" exec -T controller-1 journalctl -u grid-controller -n 40 --no-pager >&2 || true
		exit 1
	fi
	umask 077
	cat >"$GRID_FLEET_DIR/fleet.env" <<ENV
# The containerised fleet's controllers, for the CLI and the provider
# (which go to the next when one cannot be reached):
# . $GRID_FLEET_DIR/fleet.env
export GRID_ADDR=https://127.0.0.1:$port,https://127.0.0.1:${GRID_FLEET_API_PORT_2:-28766},https://127.0.0.1:${GRID_FLEET_API_PORT_3:-28767}
export GRID_TOKEN=$token
export GRID_CACERT=$GRID_FLEET_DIR/secrets/ca.pem
ENV
	log "controller-1 ready; wrote $GRID_FLEET_DIR/fleet.env"
}

# wait_agents waits until n nodes are online.
wait_agents() {
	local n=$1 i online=0
	# shellcheck disable=SC1091
	. "$GRID_FLEET_DIR/fleet.env"
	for ((i = 0; i < 180; i++)); do
		online=$(curl -fsS --cacert "$GRID_CACERT" -H "Authorization: Bearer $GRID_TOKEN" "https://127.0.0.1:$port/nodes" 2>/dev/null |
			grep -Eo '"status": *"online"' | wc -l || true)
		((online >= n)) && break
		sleep 1
	done
	if ((online < n)); then
		echo "fleet: $online of $n agents online after 180s" >&2
		exit 1
	fi
	log "$online agents online"
}

case ${1:-} in
up)
	start=$SECONDS
	secrets
	configs
	images
	"${compose[@]}" up -d --scale agent="$agents"
	wait_ready
	wait_agents "$agents"
	log "up in $((SECONDS - start))s: . $GRID_FLEET_DIR/fleet.env"
	;;
scale)
	"${compose[@]}" up -d --no-recreate --scale agent="${2:?fleet.sh scale N}" agent
	;;
down)
	"${compose[@]}" down -v --remove-orphans --timeout 20
	rm -rf "$GRID_FLEET_DIR"
	log "removed"
	;;
*)
	echo "usage: $0 up | scale N | down" >&2
	exit 2
	;;
esac
