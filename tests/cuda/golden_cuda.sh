#!/usr/bin/env bash
# The CUDA backend against transformers and against the CPU backend, on every golden fixture
# (label cuda: needs a GPU; exits 77, "skipped", without one). Per fixture: convert to f32 GGUF,
# then on the GPU
#   - the logits of every position within the precision gate, 2e-3 of max|logit|, of transformers'
#     and of the CPU backend's (docs/DECISIONS.md, "Precision of the CUDA backend"), same top-1 where the reference's margin
#     exceeds the gate;
#   - micro-batches 1, 3 and the compress ratio within the gate of the whole prompt;
#   - the greedy continuation (cached path: one token a step, graph replay) equal to the reference.
# The causal_budget2048 fixture crosses the released 2,048-token budget.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
root="$TS_FIXTURES/golden"
mkdir -p "$TS_TMP"
"$TS_BIN" devices 2>/dev/null | grep -q "^  0: " || { echo "skipped: no CUDA device"; exit 77; }
n=0
for dir in "$root"/*/; do
  [ -f "$dir/config.json" ] || continue
  name=$(basename "$dir")
  g="$TS_TMP/$name.gguf"
  "$TS_BIN" convert "$dir" -o "$g" --type f32 >/dev/null 2>"$TS_TMP/convert.err" ||
    { cat "$TS_TMP/convert.err"; echo "FAIL: convert $name"; exit 1; }
  "$TS_BIN" logits -m "$g" --tokens-npy "$dir/tokens.npy" -o "$TS_TMP/$name.cpu.npy" 2>/dev/null
  "$TS_BIN" logits -m "$g" --tokens-npy "$dir/tokens.npy" -o "$TS_TMP/$name.cuda.npy" --backend cuda 2>"$TS_TMP/err" ||
    { cat "$TS_TMP/err"; echo "FAIL: $name on CUDA"; exit 1; }
  ratio=$("$TS_BIN" inspect "$g" | sed -n 's/.*in blocks of \([0-9]*\).*/\1/p')
  for ub in 1 3 ${ratio:-4}; do
    "$TS_BIN" logits -m "$g" --tokens-npy "$dir/tokens.npy" -o "$TS_TMP/$name.ub$ub.npy" --ubatch "$ub" --backend cuda 2>/dev/null
  done
  ng=$($PY -c "import numpy as np; print(len(np.load('$dir/greedy.npy')))")
  "$TS_BIN" generate -m "$g" --tokens-npy "$dir/tokens.npy" -n "$ng" -o "$TS_TMP/$name.greedy.npy" --backend cuda 2>/dev/null
  $PY - "$dir" "$TS_TMP" "$name" "${ratio:-4}" <<'PY'
import sys, numpy as np
d, tmp, name, ratio = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ref = np.load(f"{d}/logits.npy").astype(np.float64)
cpu = np.load(f"{tmp}/{name}.cpu.npy").astype(np.float64)
got = np.load(f"{tmp}/{name}.cuda.npy").astype(np.float64)
assert got.shape == ref.shape, f"{name}: logits shape {got.shape} != reference {ref.shape}"
scale = np.abs(ref).max()
e_ref = np.abs(got - ref).max(-1) / scale
e_cpu = np.abs(got - cpu).max(-1) / np.abs(cpu).max()
srt = np.sort(ref, -1)
gate = 2e-3
decided = (srt[:, -1] - srt[:, -2]) / scale > gate
top1 = got.argmax(-1) == ref.argmax(-1)
print(f"{name}: T={ref.shape[0]} CUDA vs transformers {e_ref.max():.2e} of max|logit| (p={e_ref.argmax()}), "
      f"CUDA vs CPU {e_cpu.max():.2e} (p={e_cpu.argmax()}); top-1 equal at {top1[decided].mean()*100:.1f}% of decided")
assert e_ref.max() <= gate, f"{name}: CUDA differs from transformers by {e_ref.max():.3g}"
assert e_cpu.max() <= gate, f"{name}: CUDA differs from the CPU backend by {e_cpu.max():.3g}"
assert top1[decided].all(), f"{name}: top-1 differs at {np.nonzero(decided & ~top1)[0][:10]}"
for ub in (1, 3, int(ratio)):
    dd = np.abs(np.load(f"{tmp}/{name}.ub{ub}.npy") - got).max() / scale
    assert dd <= gate, f"{name}: micro-batch {ub} differs from the whole prompt by {dd:.3g}"
g_ref, g_got = np.load(f"{d}/greedy.npy"), np.load(f"{tmp}/{name}.greedy.npy")
assert (g_ref == g_got).all(), f"{name}: greedy continuation differs: {g_got} vs {g_ref}"
print(f"{name}: greedy continuation of {len(g_ref)} tokens identical; micro-batches 1, 3, {ratio} equal")
PY
  rm -f "$g" "$TS_TMP/$name".*.npy
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no golden fixture found in $root"; exit 1; }
echo "cuda golden: $n fixtures ok"
