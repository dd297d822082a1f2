#!/bin/sh
# Installs the Debian packages the build and tests need, when missing.
# Usage: scripts/setup.sh [native|all]   (default: all)
set -eu

native="cmake ninja-build g++ libgtest-dev python3-numpy libsimde-dev libcurl4-openssl-dev"
all="$native"

case "${1:-all}" in
  native) wanted=$native ;;
  all) wanted=$all ;;
  *) echo "usage: $0 [native|all]" >&2; exit 2 ;;
esac

missing=""
for package in $wanted; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $package"
done
[ -z "$missing" ] && exit 0

echo "installing:$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
