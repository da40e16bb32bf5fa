#!/bin/sh
# Prints the package version for the build version $1 (git describe, or
# what `make package VERSION=...` gave): a leading "v" dropped; one that
# does not start with a number and a dot (a commit hash: no tag yet)
# becomes 0.0.0+git.<it>; and "-" becomes "." since neither deb (where it starts the
# revision) nor rpm takes it. So v1.2.3 -> 1.2.3,
# v1.2.3-4-gabc1234-dirty -> 1.2.3.4.gabc1234.dirty (after 1.2.3, before
# 1.2.4), abc1234 -> 0.0.0+git.abc1234.
set -eu
v=${1#v}
case "$v" in
[0-9]*.*) [ -z "$(printf '%s' "${v%%.*}" | tr -d 0-9)" ] || v="0.0.0+git.$v" ;;
*) v="0.0.0+git.$v" ;;
esac
printf '%s\n' "$v" | tr -- '-' '.'
