#!/bin/sh
# Builds the WebAssembly engine in its three variants and copies the modules
# into web/wasm/, where the npm package loads them from:
#   build/wasm-threaded  pthreads + SIMD128 (cross-origin isolated pages, Node)
#   build/wasm-relaxed   the same with relaxed SIMD (browsers that have it)
#   build/wasm-single    SIMD128 on one thread (any page)
# The relaxed variant needs LLVM 19 (Debian's Emscripten comes with LLVM 14,
# which lacks the 8-bit dot product): Emscripten takes Debian's clang-19 and
# lld-19 from EM_LLVM_ROOT, a folder of links under the "-14" names it calls.
set -eu
cd "$(dirname "$0")/.."
# Debian's emscripten runs its JavaScript optimiser with the system's acorn.
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"

# The package's option types follow the bindings' option lists.
scripts/generate-bridge-types.sh

build() {
  variant=$1
  threads=$2
  relaxed=$3
  emcmake cmake -S . -B "build/wasm-$variant" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSIPLLM_WASM_THREADS="$threads" -DSIPLLM_WASM_RELAXED_SIMD="$relaxed" -DSIPLLM_BUILD_TESTS=OFF > /dev/null
  cmake --build "build/wasm-$variant" --target sipllm_wasm
}
build threaded ON OFF
build single OFF OFF

llvm19=build/llvm-19-for-emscripten
mkdir -p "$llvm19"
for tool in /usr/lib/llvm-19/bin/*; do ln -sf "$tool" "$llvm19/$(basename "$tool")-14"; done
for tool in clang clang++ wasm-ld llvm-ar llvm-nm llvm-objcopy; do
  [ -e "$llvm19/$tool-14" ] || { echo "LLVM 19's $tool is missing: scripts/setup.sh web" >&2; exit 1; }
done
# (Emscripten warns that this is not the LLVM version it expects.)
EM_LLVM_ROOT="$PWD/$llvm19" build relaxed ON ON

mkdir -p web/wasm
for file in sipllm-threaded.js sipllm-threaded.wasm sipllm-threaded.worker.js; do
  cp "build/wasm-threaded/wasm-bindings/$file" web/wasm/
done
for file in sipllm-relaxed.js sipllm-relaxed.wasm sipllm-relaxed.worker.js; do
  cp "build/wasm-relaxed/wasm-bindings/$file" web/wasm/
done
for file in sipllm-single.js sipllm-single.wasm; do
  cp "build/wasm-single/wasm-bindings/$file" web/wasm/
done
# The modules are CommonJS; the package around them is ESM.
echo '{ "type": "commonjs" }' > web/wasm/package.json
