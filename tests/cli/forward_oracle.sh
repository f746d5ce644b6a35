#!/usr/bin/env bash
# The CPU forward against the numpy oracle (tools/oracle, itself checked against transformers) on a
# synthetic tiny model in f32 with every feature on: PLE with EOS resets, sparse QSA on most
# positions (budget 16 tokens: first sparse query at p = 19), GDN with 3 value heads per key head,
# 8 experts top-2. Also: chunked prefill with micro-batches 1, 3, 4 (= the compress ratio) and 64
# equals the whole prompt; FORCE_DENSE equals the sparse path up to the budget and differs after.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
mkdir -p "$TS_TMP"
cd "$TS_TMP"
"$TS_BIN" synth --tiny --type f32 --seed 3 -o tiny.gguf 2>/dev/null
$PY - <<'PY'
import numpy as np
rng = np.random.default_rng(1)
t = rng.integers(0, 512, size=203).astype(np.int32)
t[[0, 7, 8, 20, 100, 101, 150]] = 500          # the PLE EOS, twice in a row too
np.save("toks.npy", t)
PY
"$TS_BIN" logits -m tiny.gguf --tokens-npy toks.npy -o full.npy 2>/dev/null
$PY "$(dirname "$0")/../../tools/oracle/np_forward.py" tiny.gguf toks.npy --logits oracle.npy
for ub in 1 3 4 64; do
  "$TS_BIN" logits -m tiny.gguf --tokens-npy toks.npy -o ub$ub.npy --ubatch $ub 2>/dev/null
done
TURBOSPARK_QSA_FORCE_DENSE=1 "$TS_BIN" logits -m tiny.gguf --tokens-npy toks.npy -o dense.npy 2>/dev/null
$PY - <<'PY'
import numpy as np
full, ref = np.load("full.npy"), np.load("oracle.npy").astype(np.float64)
scale = np.abs(ref).max()
err = np.abs(full - ref).max() / scale
print(f"CPU vs oracle: max|d| = {err:.2e} of max|logit| over {full.shape[0]} positions")
assert err < 1e-4, "CPU forward differs from the oracle"
assert (full.argmax(-1) == ref.argmax(-1)).mean() > 0.99
for ub in (1, 3, 4, 64):
    d = np.abs(np.load(f"ub{ub}.npy") - full).max()
    print(f"micro-batch {ub}: max|d| vs whole prompt = {d:.2e}")
    assert d <= 1e-5 * scale, f"chunked prefill (ubatch {ub}) differs"
dense = np.load("dense.npy")
d = np.abs(dense - full).max(-1)
first = int(np.nonzero(d > 0)[0][0])
print(f"FORCE_DENSE: identical up to p = {first - 1}, first difference at p = {first}")
assert first == 19, "dense and sparse must agree exactly until the first sparse query (p = budget + B - 1 = 19)"
PY
echo "forward_oracle: ok"
