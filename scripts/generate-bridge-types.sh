#!/bin/sh
# Writes web/src/bridge/bridge.generated.ts, the package's types of the options the
# WebAssembly bindings read, from wasm-bindings/bridge_options.h. Builds the
# native generator alone (no engine, no tests) in build/bridge-types.
set -eu
cd "$(dirname "$0")/.."
cmake -S . -B build/bridge-types -G Ninja -DCMAKE_BUILD_TYPE=Release -DSIPLLM_BUILD_TESTS=OFF > /dev/null
cmake --build build/bridge-types --target sipllm_bridge_types > /dev/null
build/bridge-types/wasm-bindings/sipllm_bridge_types > web/src/bridge/bridge.generated.ts.new
mv web/src/bridge/bridge.generated.ts.new web/src/bridge/bridge.generated.ts
