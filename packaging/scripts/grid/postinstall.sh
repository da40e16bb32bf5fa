#!/bin/sh
# grid package, after install or upgrade (deb: postinst configure; rpm:
# %post). Creates the system user and the state directory, reloads systemd.
# It enables and starts nothing: the operator edits /etc/grid/controller.yaml,
# then runs `systemctl enable --now grid-controller`. An upgrade leaves a
# running controller running the old binary until the operator restarts it.
set -e

# deb passes "configure <old-version>"; rpm passes the count of installed
# versions. Other deb calls (abort-upgrade...) need nothing.
case "$1" in
configure | [0-9]*) ;;
*) exit 0 ;;
esac

if ! getent group grid >/dev/null; then
	groupadd --system grid
fi
if ! getent passwd grid >/dev/null; then
	useradd --system --gid grid --home-dir /var/lib/grid --no-create-home \
		--shell /usr/sbin/nologin --comment "GRID controller" grid
fi

# The controller's state: its CA key and tokens live here, so only it and
# root may enter. Created here as well as by the unit's StateDirectory so
# that a controller run by hand as the grid user finds it.
install -d -o grid -g grid -m 0750 /var/lib/grid
install -d -o grid -g grid -m 0750 /var/lib/grid/controller
# The config may hold nothing secret, but the grid user must read it.
chgrp grid /etc/grid/controller.yaml 2>/dev/null || true
chmod 0640 /etc/grid/controller.yaml 2>/dev/null || true

if [ -d /run/systemd/system ]; then
	systemctl daemon-reload >/dev/null 2>&1 || true
fi
exit 0
