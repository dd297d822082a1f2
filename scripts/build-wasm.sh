#!/bin/sh
# Builds the WebAssembly engine in its two variants and copies the modules
# into web/wasm/, where the npm package loads them from:
#   build/wasm-threaded  pthreads + SIMD128 (cross-origin isolated pages, Node)
#   build/wasm-single    SIMD128 on one thread (any page)
set -eu
cd "$(dirname "$0")/.."
# Debian's emscripten runs its JavaScript optimiser with the system's acorn.
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"

# The package's option types follow the bindings' option lists.
scripts/generate-bridge-types.sh

build() {
  variant=$1
  threads=$2
  emcmake cmake -S . -B "build/wasm-$variant" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSIPLLM_WASM_THREADS="$threads" -DSIPLLM_BUILD_TESTS=OFF > /dev/null
  cmake --build "build/wasm-$variant" --target sipllm_wasm
}
build threaded ON
build single OFF

mkdir -p web/wasm
for file in sipllm-threaded.js sipllm-threaded.wasm sipllm-threaded.worker.js; do
  cp "build/wasm-threaded/wasm-bindings/$file" web/wasm/
done
for file in sipllm-single.js sipllm-single.wasm; do
  cp "build/wasm-single/wasm-bindings/$file" web/wasm/
done
# The modules are CommonJS; the package around them is ESM.
echo '{ "type": "commonjs" }' > web/wasm/package.json
