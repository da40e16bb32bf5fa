#!/bin/sh
# grid package, after removal (deb: postrm; rpm: %postun). Reloads systemd so
# the unit is gone. Purge (deb only) also deletes the state directory and
# the grid user: the CA, tokens and JetStream store are lost then, and only
# then. A plain remove keeps them for a reinstall.
set -e

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi

if [ "$1" = "purge" ]; then
	rm -rf /var/lib/grid
	if getent passwd grid >/dev/null; then
		userdel grid >/dev/null 2>&1 || true
	fi
	if getent group grid >/dev/null; then
		groupdel grid >/dev/null 2>&1 || true
	fi
fi
exit 0
