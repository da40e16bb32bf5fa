#!/bin/sh
# grid package, before removal (deb: prerm; rpm: %preun). On a removal (not
# an upgrade) the controller is stopped and disabled, so no unit is left
# pointing at a missing binary. An upgrade stops nothing: the operator
# restarts the controller when ready (see README, Upgrade).
set -e

case "$1" in
remove | 0) ;;
*) exit 0 ;;
esac
if [ -d /run/systemd/system ]; then
	systemctl disable --now grid-controller.service >/dev/null 2>&1 || true
fi
exit 0
