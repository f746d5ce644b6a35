#!/usr/bin/env bash
# Quantized conversions against BF16: the mean KL divergence KL(p_bf16 || p_quant) of the next-token
# distributions over every position of two golden fixtures stays under a bound per type.
# Bounds: q8_0 2e-3, q4_k_m 3e-2. Measured on 2026-12-02 (deterministic): causal_i3_hc4 q8_0 6.9e-4,
# q4_k_m 1.1e-2; condgen_i4_hc4 q8_0 1.3e-3, q4_k_m 2.3e-2.
# These tiny random models are far more sensitive than trained ones (no redundancy in 16-64 wide
# rows); the bounds catch a broken quantizer or mix (a wrong block layout gives KL ≫ 1).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
mkdir -p "$TS_TMP"
cd "$TS_TMP"
for name in causal_i3_hc4 condgen_i4_hc4; do
  F="$TS_FIXTURES/golden/$name"
  for t in bf16 q8_0 q4_k_m; do
    "$TS_BIN" convert "$F" -o $t.gguf --type $t >/dev/null 2>&1
    "$TS_BIN" logits -m $t.gguf --tokens-npy "$F/tokens.npy" -o $t.npy 2>/dev/null
  done
  $PY - "$name" <<'PY'
import sys, numpy as np
def log_softmax(x):
    x = x.astype(np.float64); x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
b = log_softmax(np.load("bf16.npy"))
for t, bound in (("q8_0", 2e-3), ("q4_k_m", 3e-2)):
    q = log_softmax(np.load(f"{t}.npy"))
    kl = (np.exp(b) * (b - q)).sum(-1)
    print(f"{sys.argv[1]} {t}: mean KL {kl.mean():.2e} (bound {bound:.0e}), max {kl.max():.2e}, "
          f"top-1 agreement {(b.argmax(-1) == q.argmax(-1)).mean():.3f}")
    assert kl.mean() <= bound, f"{t}: mean KL {kl.mean():.3g} above {bound}"
PY
done
echo "quant_kl: ok"
