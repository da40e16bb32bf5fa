#!/bin/sh
# grid-agent package, after install or upgrade (deb: postinst configure; rpm:
# %post). Creates the state directory, reloads systemd. It enables and starts
# nothing: the operator edits /etc/grid/agent.yaml, copies the controller's
# ca.pem and join-token to /etc/grid/, then runs
# `systemctl enable --now grid-agent`. An upgrade leaves a running agent
# running the old binary until the operator restarts it.
set -e

case "$1" in
configure | [0-9]*) ;;
*) exit 0 ;;
esac

# The agent runs as root; its NKey lives here.
install -d -o root -g root -m 0700 /var/lib/grid-agent
install -d -o root -g root -m 0755 /etc/grid

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
