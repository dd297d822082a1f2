#!/bin/sh
# Installs the Debian packages the build and tests need, when missing.
# Usage: scripts/setup.sh [native|web|browser|fuzz|all]   (default: all)
set -eu

native="cmake ninja-build g++ libgtest-dev libbenchmark-dev python3-numpy libsimde-dev libcurl4-openssl-dev"
# The native tests serve models with scripts/range-server.mjs: Node from
# Debian unless a node command is already there.
command -v node > /dev/null 2>&1 || native="$native nodejs"
# The WebAssembly build, the web package and the demo's dev server. Node and
# npm may come from elsewhere (NodeSource's nodejs carries its own npm), so
# they are installed from Debian only when the commands are missing.
# LLVM 19 (clang, lld) for the relaxed SIMD variant: Emscripten's own LLVM 14
# lacks it.
web="cmake ninja-build emscripten clang-19 lld-19 llvm-19"
command -v node > /dev/null 2>&1 || web="$web nodejs"
command -v npm > /dev/null 2>&1 || web="$web npm"
# The demo's end-to-end tests drive Debian's Chromium (Playwright cannot
# download its own browser here).
browser="chromium"
# The fuzz targets (scripts/fuzz.sh) and the AddressSanitizer and
# UndefinedBehaviorSanitizer run of the suite (scripts/test.sh): clang 19 with
# its runtime (libFuzzer, the sanitizers) and llvm-symbolizer for readable
# reports, on top of the native tools.
fuzz="$native clang-19 libclang-rt-19-dev llvm-19"
all="$native $web $browser $fuzz"

case "${1:-all}" in
  native) wanted=$native ;;
  web) wanted=$web ;;
  browser) wanted=$browser ;;
  fuzz) wanted=$fuzz ;;
  all) wanted=$all ;;
  *) echo "usage: $0 [native|web|browser|fuzz|all]" >&2; exit 2 ;;
esac

missing=""
for package in $wanted; do
  case " $missing " in *" $package "*) continue ;; esac
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing="$missing $package"
done
[ -z "$missing" ] && exit 0

echo "installing:$missing"
if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing
