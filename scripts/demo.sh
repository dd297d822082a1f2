#!/bin/sh
# Builds the engine and generates a story with the bundled model.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh native
scripts/build-native.sh
exec build/native/engine/sipllm run -m demo/public/models/stories260K.gguf \
  -p "Once upon a time" -n 200 "$@"
