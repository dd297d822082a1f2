#!/bin/sh
# Checks the engine's embeddings (sipllm embed) against the independent
# reference's (gguf_reference.py --embedding) for each text and pooling.
#   check_embeddings.sh PYTHON SIPLLM MODEL POOLING MIN_COSINE TEXT...
# Both are unit vectors, so their dot product is the cosine of the angle
# between them; the engine keeps its KV cache in F16 and rounds activations
# to 8 bits, which moves the vector a little, never its direction.
set -eu
python=$1 sipllm=$2 model=$3 pooling=$4 min_cosine=$5
shift 5
here=$(dirname "$0")
status=0
for text in "$@"; do
  ids=$("$sipllm" tokenize -m "$model" -p "$text")
  engine=$("$sipllm" embed -m "$model" -p "$text" --pooling "$pooling")
  reference=$("$python" "$here/gguf_reference.py" "$model" --tokens "$ids" --embedding "$pooling")
  "$python" - "$engine" "$reference" "$min_cosine" "$text" <<'PY' || status=1
import sys
import numpy as np
engine = np.array([float(v) for v in sys.argv[1].split()])
reference = np.array([float(v) for v in sys.argv[2].split()])
if engine.shape != reference.shape:
    print(f"FAIL {sys.argv[4]!r}: the engine gives {engine.size} values, the reference {reference.size}")
    sys.exit(1)
cosine = float(engine @ reference)
norm = float(np.linalg.norm(engine))
ok = cosine >= float(sys.argv[3]) and abs(norm - 1) < 1e-4
print(f"{'PASS' if ok else 'FAIL'} {sys.argv[4]!r}: cosine {cosine:.6f} (min {sys.argv[3]}), engine norm {norm:.6f}")
sys.exit(0 if ok else 1)
PY
done
exit $status
