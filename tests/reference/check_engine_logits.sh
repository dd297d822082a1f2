#!/bin/sh
# Checks the engine's logits for a prompt against the independent reference.
#   check_engine_logits.sh PYTHON SIPLLM MODEL PROMPT TOLERANCE [REFERENCE OPTIONS...]
# The engine tokenizes the prompt (its tokenizer is tested on its own), writes
# the logits of every position, and gguf_reference.py recomputes and compares.
# The reference keeps keys and values exact, so the engine keeps them as
# floats too (--kv-cache f32); with --like-llama-cpp the reference rounds
# them as llama.cpp does, and so does the engine's default F16 cache.
set -eu
python=$1 sipllm=$2 model=$3 prompt=$4 tol=$5
shift 5
kv="--kv-cache f32"
for option in "$@"; do
  [ "$option" = "--like-llama-cpp" ] && kv="--kv-cache f16"
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=$("$sipllm" tokenize -m "$model" -p "$prompt")
"$sipllm" run -m "$model" -p "$prompt" -n 0 $kv --logits-out "$tmp/engine.bin" > /dev/null
echo "tokens: $ids"
exec "$python" "$(dirname "$0")/gguf_reference.py" "$model" --tokens "$ids" \
  --compare "$tmp/engine.bin" --tol "$tol" "$@"
