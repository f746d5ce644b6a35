#!/usr/bin/env bash
# The UD-style IQ2_XXS mix at the released widths, on the GPU (label cuda: needs a GPU and the
# realwidth_4l fixture of tests/cuda/realwidth.sh; exits 77, "skipped", without either). The fixture
# converted to BF16, an importance matrix made from its first 1,024 tokens (on the CPU: `imatrix` runs
# there), then ud_iq2_xxs quantized from BF16 with it; the CUDA backend's logits of that file over all
# 2,357 positions against the BF16 file's (CUDA too) and against transformers' fp32 logits:
#   mean KL(p_ref ‖ p_mix) over every position and over the held-out ones (1,024 on), top-1 agreement.
# At hidden 2560 the routed gate/up rows hold the mix's 256-blocks (IQ2_XXS and IQ3_XXS; the file is
# checked for IQ2_XXS tensors); the 640-wide routed down rows take the recipe's IQ4_NL fallback.
# Bound: mean KL against BF16 ≤ 0.05; measured 0.0098 on the H200 (2026-12-04, docs/BENCHMARKS.md).
# The fixture's logits are flat (max|logit| 7.3 over 248,320 tokens), so KL is small in absolute terms;
# a wrong block layout gives KL of order 1 (logits uncorrelated with the reference's).
# Other mixes: add NAME:TYPE:BOUND to mixes below.
#   TS_REALWIDTH=/tmp/rw/realwidth_4l TS_BIN=... TS_TMP=... bash tests/cuda/realwidth_kl.sh
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_realwidth_setup kl

step "$TS_BIN" convert "$fx" -o "$t.bf16.gguf" --type bf16
$PY -c "import numpy as np; np.save('$t.cal.npy', np.load('$fx/tokens.npy')[:1024].astype(np.int32))"
step "$TS_BIN" imatrix -m "$t.bf16.gguf" --tokens-npy "$t.cal.npy" -c 512 -o "$t.im.gguf"
step "$TS_BIN" logits -m "$t.bf16.gguf" --tokens-npy "$fx/tokens.npy" -o "$t.bf16.npy" --backend cuda
mixes="ud_iq2_xxs:iq2_xxs:0.05"
for spec in $mixes; do
  IFS=: read -r mix type bound <<<"$spec"
  step "$TS_BIN" quantize "$t.bf16.gguf" "$t.$mix.gguf" $mix --imatrix "$t.im.gguf" --quiet
  "$TS_BIN" inspect "$t.$mix.gguf" | grep -Eq "^  $type +[0-9]+ tensors" || { echo "FAIL: no $type tensor in the $mix file"; exit 1; }
  step "$TS_BIN" logits -m "$t.$mix.gguf" --tokens-npy "$fx/tokens.npy" -o "$t.$mix.npy" --backend cuda
  rm -f "$t.$mix.gguf"
  $PY - "$mix" "$bound" "$t.bf16.npy" "$fx/logits.npy" "$t.$mix.npy" <<'PY'
import sys, numpy as np
mix, bound = sys.argv[1], float(sys.argv[2])
refs = {"BF16 (CUDA)": np.load(sys.argv[3], mmap_mode="r"), "transformers fp32": np.load(sys.argv[4], mmap_mode="r")}
q_all = np.load(sys.argv[5], mmap_mode="r")
def log_softmax(x):
    x = np.asarray(x, np.float64); x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
for name, r_all in refs.items():
    assert r_all.shape == q_all.shape, f"shapes {r_all.shape} and {q_all.shape}"
    kl, top = [], []
    for i in range(0, r_all.shape[0], 256):
        r, q = log_softmax(r_all[i:i + 256]), log_softmax(q_all[i:i + 256])
        kl.append((np.exp(r) * (r - q)).sum(-1)); top.append(r.argmax(-1) == q.argmax(-1))
    kl, top = np.concatenate(kl), np.concatenate(top)
    print(f"{mix} vs {name}: mean KL {kl.mean():.4f} (held-out 1024..: {kl[1024:].mean():.4f}), "
          f"max {kl.max():.3f}, top-1 agreement {top.mean():.3f} (held-out {top[1024:].mean():.3f})")
    if name.startswith("BF16"):
        assert kl.mean() <= bound, f"{mix}: mean KL {kl.mean():.3g} above {bound}"
PY
  rm -f "$t.$mix.npy"
done
rm -f "$t".*
echo "realwidth_kl: ok"
