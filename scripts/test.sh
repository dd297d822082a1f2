#!/bin/sh
# Runs every test: installs what is missing, builds, runs the native suite.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh all
scripts/build-native.sh
ctest --test-dir build/native --output-on-failure -j2
