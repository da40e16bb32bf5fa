#!/bin/sh
# grid-agent package, before removal (deb: prerm; rpm: %preun). On a removal
# (not an upgrade) the agent is stopped, which lets its running tasks finish
# and deregisters it, and disabled. An upgrade stops nothing.
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl disable --now grid-agent.service >/dev/null 2>&1 || true
fi
exit 0
