#!/usr/bin/env bash
# Builds the Debian image with systemd as PID 1 that the host tests
# (test/hosttest) and the containerised fleet (deploy/fleet) start from: a
# debootstrap root filesystem imported with `docker import`, so no registry
# is needed. It does nothing when Docker already has the image (remove it
# with docker rmi to rebuild).
#
# Usage: debian-systemd.sh [IMAGE]   (default grid-debian-systemd:bookworm)
# Environment: GRID_DEBIAN_MIRROR (default http://deb.debian.org/debian).
# Exit status 2: this machine cannot build it (not root, no debootstrap,
# the mirror unreachable); the message says which.
set -euo pipefail

image=${1:-grid-debian-systemd:bookworm}
suite=bookworm
mirror=${GRID_DEBIAN_MIRROR:-http://deb.debian.org/debian}

if docker image inspect "$image" >/dev/null 2>&1; then
	echo "using the cached image $image"
	exit 0
fi
if [[ $(id -u) != 0 ]]; then
	echo "image $image is not built and building it with debootstrap needs root" >&2
	exit 2
fi
if ! command -v debootstrap >/dev/null; then
	echo "installing debootstrap with apt-get"
	export DEBIAN_FRONTEND=noninteractive
	if ! { apt-get install -y -q debootstrap || { apt-get update -q && apt-get install -y -q debootstrap; }; } >/tmp/grid-debootstrap-install.log 2>&1; then
		tail -n 10 /tmp/grid-debootstrap-install.log >&2
		echo "cannot install debootstrap (apt-get install debootstrap)" >&2
		exit 2
	fi
fi

dir=$(mktemp -d /tmp/grid-debootstrap-XXXXXX)
trap 'rm -rf "$dir"' EXIT
root=$dir/root
start=$SECONDS
# minbase plus systemd as init: apt, dpkg and systemctl are what the
# backends use.
if ! debootstrap --variant=minbase --include=systemd,systemd-sysv,dbus "$suite" "$root" "$mirror" >"$dir/log" 2>&1; then
	tail -n 20 "$dir/log" >&2
	echo "debootstrap $suite from $mirror failed" >&2
	exit 2
fi
echo "debootstrap $suite took $((SECONDS - start))s"
# Jobs reach only the repositories the containers are given; the image
# keeps no apt lists and no sources, and takes its hostname from Docker.
rm -f "$root/etc/apt/sources.list" "$root/etc/hostname"
find "$root/var/lib/apt/lists" -maxdepth 1 -name '*_*' -delete
start=$SECONDS
tar --numeric-owner -C "$root" -c . | docker import --change 'CMD ["/lib/systemd/systemd"]' - "$image" >/dev/null || {
	docker rmi "$image" >/dev/null 2>&1 || true
	echo "docker import of the root filesystem failed" >&2
	exit 1
}
echo "imported $image in $((SECONDS - start))s"
