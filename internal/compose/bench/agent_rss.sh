#!/usr/bin/env bash
# Idle RSS of one registered agent, the slim grid-agent binary beside the
# full "grid agent", both against one secured controller process. Part of
# `make bench`; runs alone in about 30 seconds:
#
#   BIN=bin/grid AGENT_BIN=bin/grid-agent internal/compose/bench/agent_rss.sh
#
# The figure is read once both nodes are registered and online and have
# heartbeated a few times (SETTLE), i.e. after start-up garbage is collected.
set -euo pipefail

BIN=${BIN:-bin/grid}
AGENT_BIN=${AGENT_BIN:-bin/grid-agent}
SETTLE=${SETTLE:-15}
GOAL_MIB=12
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }
rss_parts() {
	awk '/^RssAnon:/ {printf "anonymous %.1f", $2/1024} /^RssFile:/ {printf ", file-backed %.1f", $2/1024}' "/proc/$1/status"
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

api=$(free_port)
nats=$(free_port)
"$BIN" controller --data-dir "$work/ctl" --api-addr "127.0.0.1:$api" --nats-addr "127.0.0.1:$nats" --log-level error &
pids+=($!)
for _ in $(seq 300); do [ -s "$work/ctl/admin-token" ] && [ -s "$work/ctl/join-token" ] && break; sleep 0.1; done
grid() { "$BIN" --addr "https://127.0.0.1:$api" --cacert "$work/ctl/ca.pem" --token "$(cat "$work/ctl/admin-token")" "$@"; }
for _ in $(seq 300); do grid status >/dev/null 2>&1 && break; sleep 0.1; done

agent_flags=(--nats "nats://127.0.0.1:$nats" --ca-file "$work/ctl/ca.pem" --join-token-file "$work/ctl/join-token" --log-level error)
"$AGENT_BIN" --name idle-slim --data-dir "$work/slim" "${agent_flags[@]}" &
pids+=($!)
slim=$!
"$BIN" agent --name idle-full --data-dir "$work/full" "${agent_flags[@]}" &
pids+=($!)
full=$!

registered=no
for _ in $(seq 300); do
	out=$(grid node list -o json 2>/dev/null || true)
	if grep -q '"idle-slim"' <<<"$out" && grep -q '"idle-full"' <<<"$out"; then
		registered=yes
		break
	fi
	sleep 0.1
done
if [ "$registered" != yes ]; then
	echo "agent idle RSS: the agents did not register" >&2
	exit 1
fi
sleep "$SETTLE"
for p in "$slim" "$full"; do kill -0 "$p" || { echo "agent idle RSS: agent $p exited" >&2; exit 1; }; done
echo "agent idle RSS: $(rss_mib "$slim") MiB (goal ≤ $GOAL_MIB MiB) grid-agent, registered, after ${SETTLE}s ($(rss_parts "$slim") MiB)"
echo "grid agent idle RSS: $(rss_mib "$full") MiB (the full binary, for comparison) ($(rss_parts "$full") MiB)"
