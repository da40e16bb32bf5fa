#!/bin/sh
# grid-agent package, after removal (deb: postrm; rpm: %postun). Reloads
# systemd. Purge (deb only) also deletes the agent's key in
# /var/lib/grid-agent: the node must enroll again with a join token.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
if [ "$1" = "purge" ]; then
	rm -rf /var/lib/grid-agent
fi
exit 0
