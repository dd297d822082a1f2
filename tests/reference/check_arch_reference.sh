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
#     RMS/sd <= the file's bound and top-1 at every clear position. Here most
#     positions reproduce llama.cpp's logits to float32 precision; a misplaced
#     norm, window, rope layout or soft-cap costs 0.048-0.5.
# The bound is 0.03, or for files whose manifest record gives numpy_check
# (llama.cpp's own distance from float64 arithmetic, mean |difference|/sd:
# the qwen35, gemma4 and lfm2 files and the mixtures of experts)
# max(0.03, 2 x numpy_check.mean_dsd):
# the deeper hybrid files are more chaotic, and past the first position where
# float32 summation order flips a rounding the reference lands anywhere up to
# about llama.cpp's distance from exact arithmetic.
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
# the bound, and llama.cpp's distance from float64 when the manifest gives it
bound=$("$python" "$here/compare_logits.py" --bound "$manifest" "$model")
max_rms_sd=${bound%% *}
if [ "$max_rms_sd" != "$bound" ]; then
  echo "llama.cpp vs float64 (manifest numpy_check): mean |difference|/sd ${bound#* };" \
       "bound for --like-llama-cpp: RMS/sd <= $max_rms_sd"
fi
ref() { "$python" "$here/gguf_reference.py" "$model" --tokens "$ids" --ctx 512 "$@"; }
judge() { "$python" "$here/compare_logits.py" "$oracle" "$@" --manifest "$manifest"; }
# llama.cpp ran with a context of 512; phi3's LongRoPE factors depend on it.
ref --describe --out "$tmp/f64.bin"
judge "$tmp/f64.bin" --report-only --label="float64 activations"
if [ "$max_rms_sd" != "$bound" ]; then
  # the manifest's own measure, to set beside its numpy_check
  "$python" -c 'import struct, sys, numpy as np
def rows(p):
    b = open(p, "rb").read()
    n, v = struct.unpack("<ii", b[:8])
    return np.frombuffer(b, "<f4", offset=8).reshape(n, v).astype(np.float64)
o, x = rows(sys.argv[1]), rows(sys.argv[2])
d = np.abs(x - o) / o.std(axis=1, keepdims=True)
print(f"float64 vs llama.cpp: mean |difference|/sd {d.mean():.5f}, max {d.max():.4f}"
      f" (manifest numpy_check: mean {sys.argv[3]})")' "$oracle" "$tmp/f64.bin" "${bound#* }"
fi
ref --q8-activations --out "$tmp/q8.bin"
judge "$tmp/q8.bin" --report-only --label=--q8-activations
ref --like-llama-cpp --out "$tmp/llama-cpp.bin"
# reported, not judged: the positions where the reference reproduces llama.cpp
# to float32 precision (the run from position 0 ends where float32 summation
# order first flips a rounding); only these show features whose effect is
# below the chaos, e.g. gemma4's rope_freqs or qwen35's rope layout
"$python" -c 'import struct, sys, numpy as np
def rows(p):
    b = open(p, "rb").read()
    n, v = struct.unpack("<ii", b[:8])
    return np.frombuffer(b, "<f4", offset=8).reshape(n, v).astype(np.float64)
o, x = rows(sys.argv[1]), rows(sys.argv[2])
r = np.sqrt(((x - o) ** 2).mean(axis=1)) / o.std(axis=1)
eq = [p for p in range(len(r)) if r[p] < 1e-5]
print(f"--like-llama-cpp equals llama.cpp (RMS/sd < 1e-5) at {len(eq)} of {len(r)} positions:",
      " ".join(map(str, eq)) or "none")' "$oracle" "$tmp/llama-cpp.bin"
judge "$tmp/llama-cpp.bin" --max-rms-sd "$max_rms_sd" --label=--like-llama-cpp
