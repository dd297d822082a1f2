#!/bin/sh
# The sipllm package as users install it: `npm pack` of web/ installed into a
# fresh Vite app, a fresh webpack app and a plain Node ESM script, each
# type-checked, built and run against the range server, its text compared
# with the native CLI's (tests/install/install.test.mjs). Needs the native
# CLI (scripts/build-native.sh), the WebAssembly builds
# (scripts/build-wasm.sh) and the root's node_modules (npm ci). The apps'
# packages come from the npm registry the first time, then from the cache
# build/npm-cache (SIPLLM_NPM_CACHE).
set -eu
cd "$(dirname "$0")/.."
npm run build --workspace web
node --test --test-concurrency=1 --test-reporter=spec tests/install/install.test.mjs
