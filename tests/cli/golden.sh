#!/usr/bin/env bash
# Golden tests: the CPU forward against transformers itself. For every fixture under
# tests/fixtures/golden (a tiny random qwen4_exp checkpoint, its prompt and the reference fp32
# logits of every position, made by tools/fixtures/make_golden.py on the GPU machine):
#   convert the checkpoint to f32 GGUF, run the prompt, and require
#   - max|Δlogit| ≤ 1e-2 · max|logit| at every position,
#   - the same top-1 token wherever the reference's top-2 margin exceeds that bound,
#   - the greedy continuation equal to the reference's (cached path),
#   - chunked prefill (micro-batches 1, 3, the compress ratio, whole) equal to the whole prompt.
# Prints the worst figure per fixture.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
root="$TS_FIXTURES/golden"
[ -d "$root" ] || { echo "no golden fixtures directory ($root)"; exit 1; }
mkdir -p "$TS_TMP"
n=0
for dir in "$root"/*/; do
  [ -f "$dir/config.json" ] || continue
  name=$(basename "$dir")
  g="$TS_TMP/$name.gguf"
  "$TS_BIN" convert "$dir" -o "$g" --type f32 >/dev/null 2>"$TS_TMP/convert.err" ||
    { cat "$TS_TMP/convert.err"; echo "FAIL: convert $name"; exit 1; }
  "$TS_BIN" logits -m "$g" --tokens-npy "$dir/tokens.npy" -o "$TS_TMP/$name.logits.npy" 2>/dev/null
  ratio=$("$TS_BIN" inspect "$g" | sed -n 's/.*in blocks of \([0-9]*\).*/\1/p')
  for ub in 1 3 ${ratio:-4}; do
    "$TS_BIN" logits -m "$g" --tokens-npy "$dir/tokens.npy" -o "$TS_TMP/$name.ub$ub.npy" --ubatch "$ub" 2>/dev/null
  done
  ng=$($PY -c "import numpy as np; print(len(np.load('$dir/greedy.npy')))")
  "$TS_BIN" generate -m "$g" --tokens-npy "$dir/tokens.npy" -n "$ng" -o "$TS_TMP/$name.greedy.npy" 2>/dev/null
  $PY - "$dir" "$TS_TMP" "$name" "${ratio:-4}" <<'PY'
import sys, numpy as np
d, tmp, name, ratio = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ref = np.load(f"{d}/logits.npy").astype(np.float64)
got = np.load(f"{tmp}/{name}.logits.npy").astype(np.float64)
assert got.shape == ref.shape, f"{name}: logits shape {got.shape} != reference {ref.shape}"
scale = np.abs(ref).max()
err = np.abs(got - ref).max(-1) / scale
bound = 1e-2
srt = np.sort(ref, -1)
margin = (srt[:, -1] - srt[:, -2]) / scale
decided = margin > bound
top1 = got.argmax(-1) == ref.argmax(-1)
print(f"{name}: T={ref.shape[0]} V={ref.shape[1]} worst max|d|/max|logit| = {err.max():.2e} at p={err.argmax()}, "
      f"top-1 equal at {top1[decided].mean()*100:.1f}% of {decided.sum()} decided positions")
assert err.max() <= bound, f"{name}: logits differ by {err.max():.3g} of max|logit| (bound {bound})"
assert top1[decided].all(), f"{name}: top-1 differs at decided positions {np.nonzero(decided & ~top1)[0][:10]}"
for ub in (1, 3, int(ratio)):
    dd = np.abs(np.load(f"{tmp}/{name}.ub{ub}.npy") - got).max() / scale
    assert dd <= 1e-5, f"{name}: micro-batch {ub} differs from the whole prompt by {dd:.3g}"
g_ref, g_got = np.load(f"{d}/greedy.npy"), np.load(f"{tmp}/{name}.greedy.npy")
same = int(np.argmin(np.append(g_ref == g_got, False)))
assert (g_ref == g_got).all(), f"{name}: greedy continuation differs from position {same}: {g_got[:same+3]} vs {g_ref[:same+3]}"
print(f"{name}: greedy continuation of {len(g_ref)} tokens identical; micro-batches 1, 3, {ratio} equal")
PY
  rm -f "$g" "$TS_TMP/$name".*.npy
  n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "FAIL: no golden fixture found in $root"; exit 1; }
echo "golden: $n fixtures ok"
