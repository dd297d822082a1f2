#!/bin/sh
# Checks the engine's logits for a prompt against the independent reference.
#   check_engine_logits.sh PYTHON SIPLLM MODEL PROMPT TOLERANCE [REFERENCE OPTIONS...]
# The engine tokenizes the prompt (its tokenizer is tested on its own), writes
# the logits of every position, and gguf_reference.py recomputes and compares.
set -eu
python=$1 sipllm=$2 model=$3 prompt=$4 tol=$5
shift 5
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=$("$sipllm" tokenize -m "$model" -p "$prompt")
"$sipllm" run -m "$model" -p "$prompt" -n 0 --logits-out "$tmp/engine.bin" > /dev/null
echo "tokens: $ids"
exec "$python" "$(dirname "$0")/gguf_reference.py" "$model" --tokens "$ids" \
  --compare "$tmp/engine.bin" --tol "$tol" "$@"
