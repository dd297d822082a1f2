#!/bin/sh
# Runs every test: installs what is missing, builds, runs the suites.
set -eu
cd "$(dirname "$0")/.."

# Each step's time, printed at the end (also when a step fails).
timings=""
running=""
step() {
  running=$1
  shift
  started=$(date +%s)
  "$@"
  timings="$timings$(printf '%6d s  %s' $(($(date +%s) - started)) "$running")
"
  running=""
}
report_timings() {
  [ -n "$running" ] && timings="$timings$(printf '%6d s  %s (failed)' $(($(date +%s) - started)) "$running")
"
  printf '\nTime per step:\n%s' "$timings"
}
trap report_timings EXIT

step setup scripts/setup.sh all
step "native build" scripts/build-native.sh
# Includes FaultMatrix.NativeCli: the reduced HTTP fault matrix with the
# native CLI (scripts/fault-matrix.mjs --ci --clients native).
step "native suite" ctest --test-dir build/native --output-on-failure -j2

# The suite again under AddressSanitizer (with LeakSanitizer) and
# UndefinedBehaviorSanitizer, then under ThreadSanitizer: a memory error, a
# leak, undefined behaviour or a data race fails the run.
step "AddressSanitizer build and suite" scripts/test-sanitized.sh address
step "ThreadSanitizer build and suite" scripts/test-sanitized.sh thread

# Each fuzz target for 6 s, after its whole corpus and its regression inputs,
# in the AddressSanitizer build just made (see tests/fuzz/README.md).
step fuzzing scripts/fuzz.sh 6

# The WebAssembly builds, then the web package's suite (Vitest, under Node,
# against the range server, compared with the native CLI built above), with
# the reduced fault matrix for the Node package (web/test/fault-matrix.test.ts).
# (npm's download runs beside the WebAssembly build, which needs none of it.)
build_web() {
  scripts/build-wasm.sh & wasm_build=$!
  npm ci --no-audit --no-fund
  wait $wasm_build
}
step "WebAssembly build, npm ci" build_web
step "web package suite" npm test --workspace web

# The package as users install it: npm pack, installed into a fresh Vite app,
# webpack app and Node script, built, and run in Chromium and Node against the
# range server, compared with the native CLI (tests/install/).
step "install tests" scripts/test-install.sh

# The demo page end to end in Debian's Chromium (Playwright): on its dev server
# and as a production build, against the range server, compared with the
# native CLI built above; and the reduced fault matrix in a Chromium page
# (demo/e2e/fault-matrix.spec.ts). The whole matrix, every fault with every
# client: node scripts/fault-matrix.mjs.
step "demo suite" npm test --workspace demo

# A short soak (see README): a seeded mix of requests on four models at once,
# under Node and in Chromium's threaded and relaxed builds, each request with
# a deadline. A stall, a text other than the native CLI's or an unexpected
# error fails the run; the reports are in build/soak/.
step soak npm run soak -- --requests 300 --deadline-ms 60000
