#!/bin/sh
# Checks the independent reference against llama.cpp's own logits for one
# model-family fixture of tests/fixtures/arch (FAMILY-QUANT.gguf, its
# FAMILY-QUANT.A.logits and manifest.json beside it).
#   check_arch_reference.sh PYTHON FIXTURE.gguf
#
# The reference runs the manifest's prompt three ways and each is compared
# with llama.cpp's logits (compare_logits.py: RMS(difference)/sd per position,
# top-1 at the manifest's clear positions):
#   - float64 activations, and
#   - --q8-activations (8-bit activations the way the engine rounds them):
#     both only reported. These random-weight models are chaotic under 8-bit
#     activation rounding: a relative change of 1e-6 anywhere upstream flips
#     some roundings, and the flips grow, so any two computations that do not
#     round bit for bit alike end up about as far apart as the rounding moves
#     the logits, 0.02-0.033 of a row's sd here. That is llama.cpp's distance
#     from exact arithmetic, not an error of the reference.
#   - --like-llama-cpp (rounding where llama.cpp's CPU code rounds): asserted,
#     RMS/sd <= 0.03 and top-1 at every clear position. Here most positions
#     reproduce llama.cpp's logits to float32 precision; a misplaced norm,
#     window, rope layout or soft-cap costs 0.048-0.5.
set -eu
python=$1 model=$2
here=$(dirname "$0")
oracle=${model%.gguf}.A.logits
manifest=$(dirname "$model")/manifest.json
for f in "$model" "$oracle" "$manifest"; do
  if [ ! -f "$f" ]; then
    echo "FAIL: missing fixture file $f (the .gguf files of tests/fixtures/arch must be" \
         "in the repository; .gitignore's *.gguf rule keeps them out unless added with -f)"
    exit 1
  fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=$("$python" -c 'import json, sys
print(" ".join(map(str, json.load(open(sys.argv[1]))["_common"]["prompt_token_ids"])))' "$manifest")
echo "tokens: $ids"
ref() { "$python" "$here/gguf_reference.py" "$model" --tokens "$ids" --ctx 512 "$@"; }
judge() { "$python" "$here/compare_logits.py" "$oracle" "$@" --manifest "$manifest"; }
# llama.cpp ran with a context of 512; phi3's LongRoPE factors depend on it.
ref --describe --out "$tmp/f64.bin"
judge "$tmp/f64.bin" --report-only --label="float64 activations"
ref --q8-activations --out "$tmp/q8.bin"
judge "$tmp/q8.bin" --report-only --label=--q8-activations
ref --like-llama-cpp --out "$tmp/llama-cpp.bin"
judge "$tmp/llama-cpp.bin" --max-rms-sd 0.03 --label=--like-llama-cpp
