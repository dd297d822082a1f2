#!/bin/sh
# The kernel benchmark as WebAssembly (SIMD128, pthreads) under Node: compiles
# the kernels, the thread pool and tests/bench/kernels_bench_plain.cpp with
# Emscripten and prints GB/s and GFLOP/s for the same cases as the native
# benchmark (build/native/tests/bench/sipllm_kernels_bench_plain).
#   scripts/bench-kernels-wasm.sh [FILTER]
# Builds into $SIPLLM_WASM_BENCH_DIR (default build/kernels-wasm).
set -eu
cd "$(dirname "$0")/.."
out=${SIPLLM_WASM_BENCH_DIR:-build/kernels-wasm}
mkdir -p "$out"
# Debian's Emscripten runs its JS optimiser with Node, which needs its modules.
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"
em++ -std=c++20 -O3 -msimd128 -pthread -ffp-contract=off -Wall \
  -Iengine/src -Iengine/include \
  $(ls engine/src/kernels/*.cpp | grep -v _test.cpp) engine/src/runtime/thread_pool.cpp engine/src/model/tensor_type.cpp \
  engine/src/runtime/kv_cache.cpp engine/src/error.cpp \
  tests/bench/kernel_cases.cpp tests/bench/kernels_bench_plain.cpp \
  -sENVIRONMENT=node,worker -sPROXY_TO_PTHREAD -sEXIT_RUNTIME -sPTHREAD_POOL_SIZE=4 \
  -sINITIAL_MEMORY=536870912 \
  -o "$out/kernels_bench.js"
# Node 20's fetch() cannot read a file path, which the loader would try.
node --no-experimental-fetch "$out/kernels_bench.js" "$@"
