#!/bin/sh
# The kernel benchmark as WebAssembly (SIMD128, pthreads): compiles the
# kernels, the thread pool and tests/bench/kernels_bench_plain.cpp with
# Emscripten and prints GB/s and GFLOP/s for the same cases as the native
# benchmark (build/native/tests/bench/sipllm_kernels_bench_plain).
#   scripts/bench-kernels-wasm.sh [--relaxed] [--chromium] [FILTER]
#     --relaxed   relaxed SIMD (LLVM 19, as scripts/build-wasm.sh builds it)
#     --chromium  in Chromium (scripts/bench/kernels-chromium.mjs) instead of
#                 Node. Node 20's V8 predates the browsers' relaxed SIMD (its
#                 8-bit dot product ran the K-quant kernels at half Chromium's
#                 speed), so measure relaxed SIMD in Chromium.
# Builds into $SIPLLM_WASM_BENCH_DIR (default build/kernels-wasm[-relaxed]).
set -eu
cd "$(dirname "$0")/.."
relaxed=0
browser=0
while [ $# -gt 0 ]; do
  case $1 in
    --relaxed) relaxed=1 ;;
    --chromium) browser=1 ;;
    *) break ;;
  esac
  shift
done
filter=${1:-}
case $filter in *'"'* | *'\'*) echo "FILTER may not hold quotes or backslashes" >&2; exit 1 ;; esac

# Debian's Emscripten runs its JS optimiser with Node, which needs its modules.
export NODE_PATH="${NODE_PATH:-/usr/share/nodejs}"
compile_flags="-O3 -msimd128"
link_flags="-O3"
out=${SIPLLM_WASM_BENCH_DIR:-build/kernels-wasm}
if [ $relaxed = 1 ]; then
  llvm19=$PWD/build/llvm-19-for-emscripten
  [ -e "$llvm19/clang++-14" ] || { echo "no LLVM 19 for Emscripten in $llvm19: run scripts/build-wasm.sh" >&2; exit 1; }
  export EM_LLVM_ROOT="$llvm19"
  compile_flags="$compile_flags -mrelaxed-simd"
  # As wasm-bindings/CMakeLists.txt says: Binaryen must not rewrite the module.
  link_flags="-O0 -sASSERTIONS=0 -sWASM_BIGINT -sLEGALIZE_JS_FFI=0"
  out=${SIPLLM_WASM_BENCH_DIR:-build/kernels-wasm-relaxed}
fi
environment=node,worker
[ $browser = 1 ] && environment=web,worker
mkdir -p "$out/obj"

# Each source to an object (two at a time), the filter compiled into the
# benchmark's main(); then one link.
sources="$(ls engine/src/kernels/*.cpp | grep -v _test.cpp) engine/src/core/thread_pool.cpp
  engine/src/model/tensor_type.cpp engine/src/core/kv_cache.cpp engine/src/error.cpp
  tests/bench/kernel_cases.cpp tests/bench/kernels_bench_plain.cpp"
# (Old outputs are removed first, so that a failed step cannot leave a stale
# module to run; Emscripten's warning about LLVM 19 is left out.)
rm -f "$out"/obj/*.o "$out/kernels_bench.js"
for source in $sources; do echo "$source"; done | xargs -P 2 -I{} sh -c \
  'em++ -c -std=c++20 '"$compile_flags"' -pthread -ffp-contract=off -Wall -Iengine/src -Iengine/include \
     "-DSIPLLM_BENCH_FILTER=\"$1\"" "$2" -o "$3/obj/$(basename "$2" .cpp).o" 2>&1 | grep -v "^emcc: warning: LLVM version" >&2 || true' \
  sh "$filter" {} "$out"
objects=$(for source in $sources; do echo "$out/obj/$(basename "$source" .cpp).o"; done)
# shellcheck disable=SC2086
em++ $objects $link_flags -pthread -sENVIRONMENT=$environment -sPROXY_TO_PTHREAD -sEXIT_RUNTIME \
  -sPTHREAD_POOL_SIZE=4 -sINITIAL_MEMORY=536870912 -o "$out/kernels_bench.js" 2>&1 | grep -v "^emcc: warning: LLVM version" >&2 || true
[ -e "$out/kernels_bench.js" ] || { echo "the build failed" >&2; exit 1; }

if [ $browser = 1 ]; then
  node scripts/bench/kernels-chromium.mjs "$out"
else
  flags=""
  [ $relaxed = 1 ] && flags="--experimental-wasm-relaxed-simd"
  # Node 20's fetch() cannot read a file path, which the loader would try.
  node $flags --no-experimental-fetch "$out/kernels_bench.js"
fi
