#!/bin/sh
# Runs every test: installs what is missing, builds, runs the suites.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh all
scripts/build-native.sh
# Includes FaultMatrix.NativeCli: the reduced HTTP fault matrix with the
# native CLI (scripts/fault-matrix.mjs --ci --clients native).
ctest --test-dir build/native --output-on-failure -j2

# The loader's threads again under ThreadSanitizer: races fail the run.
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSIPLLM_SANITIZE=thread > /dev/null
cmake --build build/tsan --target sipllm_tests
TSAN_OPTIONS=halt_on_error=1 build/tsan/tests/sipllm_tests --gtest_brief=1 \
  --gtest_filter='Streaming*:*LoaderStress*:Engine.Cancel*:WarmUp*:ThreadPool*:Http*'

# The WebAssembly builds, then the web package's suite (Vitest, under Node,
# against the range server, compared with the native CLI built above), with
# the reduced fault matrix for the Node package (web/test/fault-matrix.test.ts).
scripts/build-wasm.sh
npm ci --no-audit --no-fund
npm test --workspace web

# The demo page end to end in Debian's Chromium (Playwright): on its dev server
# and as a production build, against the range server, compared with the
# native CLI built above; and the reduced fault matrix in a Chromium page
# (demo/e2e/fault-matrix.spec.ts). The whole matrix, every fault with every
# client: node scripts/fault-matrix.mjs.
npm test --workspace demo
