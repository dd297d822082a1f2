#!/bin/sh
# Writes a random-weight model with `sipllm gen` and checks the engine's logits
# on it against the reference, for tensor types no fixture file uses.
#   check_generated_logits.sh PYTHON SIPLLM SHAPE TYPE VOCAB TOLERANCE [REFERENCE OPTIONS...]
set -eu
python=$1 sipllm=$2 shape=$3 type=$4 vocab=$5 tol=$6
shift 6
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$sipllm" gen --shape "$shape" --type "$type" --vocab "$vocab" --seed 5 -o "$tmp/model.gguf"
sh "$(dirname "$0")/check_engine_logits.sh" "$python" "$sipllm" "$tmp/model.gguf" \
  "Once upon a time, there was a little girl named Lily who lived by the sea." "$tol" "$@"
