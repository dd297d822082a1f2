#!/bin/sh
# Configures and builds the native engine, CLI and tests into build/native.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build/native -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/native
