#!/usr/bin/env bash
# Quantized conversions against BF16: the mean KL divergence KL(p_bf16 || p_quant) of the next-token
# distributions over every position of two golden fixtures stays under a bound per type.
# Bounds: q8_0 2e-3, q4_k_m 3e-2, iq3_s 1e-1, iq3_xxs 1.5e-1. Measured on 2026-12-02/03
# (deterministic): causal_i3_hc4 q8_0 6.9e-4, q4_k_m 1.1e-2, iq3_s 3.5e-2, iq3_xxs 5.8e-2;
# condgen_i4_hc4 q8_0 1.3e-3, q4_k_m 2.3e-2, iq3_s 6.2e-2, iq3_xxs 8.5e-2. Rows narrower than 256
# take the i-quant mixes' IQ4_NL fallback: only causal_i3_hc4 (4 x 64 = 256-wide hyper-connection
# rows) holds IQ3_XXS / IQ3_S tensors, which the check below makes sure of.
# ud_iq2_xxs (the UD-style mix, quantized from bf16 with an importance matrix of the fixture's own
# tokens: the fixtures have no tokenizer, so no text): bound 5e-2, measured 1.72e-2 and 3.64e-2. At
# these widths none of its IQ2_XXS / K-quant blocks fit, so the file holds its 32-element fallbacks
# and Q8_0 only; tests/cli/quant_ud.sh measures its IQ2_XXS experts on the demo model.
# These tiny random models are far more sensitive than trained ones (no redundancy in 16-64 wide
# rows); the bounds catch a broken quantizer or mix (a wrong block layout gives KL ≫ 1).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
mkdir -p "$TS_TMP"
cd "$TS_TMP"
for name in causal_i3_hc4 condgen_i4_hc4; do
  F="$TS_FIXTURES/golden/$name"
  for t in bf16 q8_0 q4_k_m iq3_s iq3_xxs; do
    "$TS_BIN" convert "$F" -o $t.gguf --type $t >/dev/null 2>&1
    "$TS_BIN" logits -m $t.gguf --tokens-npy "$F/tokens.npy" -o $t.npy 2>/dev/null
  done
  "$TS_BIN" imatrix -m bf16.gguf --tokens-npy "$F/tokens.npy" -c 100 -o im.gguf 2>/dev/null
  "$TS_BIN" quantize bf16.gguf ud_iq2_xxs.gguf ud_iq2_xxs --imatrix im.gguf --quiet 2>/dev/null
  "$TS_BIN" logits -m ud_iq2_xxs.gguf --tokens-npy "$F/tokens.npy" -o ud_iq2_xxs.npy 2>/dev/null
  $PY - "$name" <<'PY'
import sys, numpy as np
def log_softmax(x):
    x = x.astype(np.float64); x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
b = log_softmax(np.load("bf16.npy"))
for t, bound in (("q8_0", 2e-3), ("q4_k_m", 3e-2), ("iq3_s", 1e-1), ("iq3_xxs", 1.5e-1), ("ud_iq2_xxs", 5e-2)):
    q = log_softmax(np.load(f"{t}.npy"))
    kl = (np.exp(b) * (b - q)).sum(-1)
    print(f"{sys.argv[1]} {t}: mean KL {kl.mean():.2e} (bound {bound:g}), max {kl.max():.2e}, "
          f"top-1 agreement {(b.argmax(-1) == q.argmax(-1)).mean():.3f}")
    assert kl.mean() <= bound, f"{t}: mean KL {kl.mean():.3g} above {bound}"
PY
  if [ "$name" = causal_i3_hc4 ]; then
    "$TS_BIN" inspect iq3_s.gguf | grep -Eq '^  iq3_s +[0-9]+ tensors' || { echo "no IQ3_S tensor in the iq3_s mix"; exit 1; }
    "$TS_BIN" inspect iq3_xxs.gguf | grep -Eq '^  iq3_xxs +[0-9]+ tensors' || { echo "no IQ3_XXS tensor in the iq3_xxs mix"; exit 1; }
  fi
done
echo "quant_kl: ok"
