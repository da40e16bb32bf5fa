#!/usr/bin/env bash
# `make bench`: the benchmark tables for 100, 1,000 and 10,000 agents, the
# fan-out to 100 and 300 agent processes, the controller's memory with
# 10,000 agents measured in a separate controller process, and the idle RSS
# of one registered grid-agent and grid agent (agent_rss.sh). Takes a few
# minutes.
set -euo pipefail

BIN=${BIN:-bin/grid}
ROUNDS=${ROUNDS:-20}
JOBS=${JOBS:-5000}
OUT=${OUT:-table}
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2/1024}' "/proc/$1/status"; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

echo "== fan-out: one ping echo job to every agent, against the NATS floor"
for n in 100 1000; do
	"$BIN" bench fanout --agents "$n" --rounds "$ROUNDS" -o "$OUT"
done

# Real agent processes of the deployed build (the slim grid-agent that
# make build-agent writes to AGENT_BIN, secure as deployed) and as many
# plain NATS responder processes as the floor; timed as the controller saw
# each job (created_at to finished_at), with the agents' CPU per command
# from /proc. PROC_ROUNDS: rounds after the warm-up.
echo "== fan-out to agent processes, against responder processes"
for n in 100 300; do
	"$BIN" bench fanout --agent-procs "$n" --rounds "${PROC_ROUNDS:-10}" --agent-bin "${AGENT_BIN:-bin/grid-agent}" -o "$OUT"
done

echo "== throughput: single-node jobs, 64 in flight"
"$BIN" bench throughput --agents 100 --jobs "$JOBS" -o "$OUT"

echo "== registration, embedded controller (memory includes the agents)"
for n in 100 1000; do
	"$BIN" bench register --agents "$n" -o "$OUT"
done

# 10,000 agents hold 10,000 sockets, and an embedded server as many again:
# more than a common open-files limit of 20,000 allows one process, so the
# controller runs as a process of its own (which also gives its own RSS).
echo "== 10,000 agents against a separate controller process"
api=$(free_port)
nats=$(free_port)
"$BIN" controller --data-dir "$work/ctl" --api-addr "127.0.0.1:$api" --nats-addr "127.0.0.1:$nats" --log-level error &
pids+=($!)
ctl=$!
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$api/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
# The controller's memory is read from its /metrics after the agents have
# heartbeated for a minute (steady state), while they are still online.
"$BIN" bench register --agents 10000 --settle 60s --addr "127.0.0.1:$api" --nats "nats://127.0.0.1:$nats" --controller-data-dir "$work/ctl" -o "$OUT"
echo "controller process RSS after the agents left: $(rss_mib "$ctl") MiB"
"$BIN" bench fanout --agents 10000 --rounds 5 --addr "127.0.0.1:$api" --nats "nats://127.0.0.1:$nats" --controller-data-dir "$work/ctl" -o "$OUT"

echo "== one idle agent, registered: grid-agent (goal ≤ 12 MiB) and grid agent"
# Its own controller, so that the 10,000 agents' leftovers do not weigh on
# it. Anonymous is the agent's own memory; file-backed is the pages of the
# binary it has mapped.
BIN="$BIN" AGENT_BIN="${AGENT_BIN:-bin/grid-agent}" "$(dirname "$0")/agent_rss.sh"
