#!/usr/bin/env bash
# The UD-style mixes (src/convert/mix.h) on the demo model (hidden 256, so routed experts' gate/up
# rows hold IQ2_XXS / IQ2_S / Q2_K super-blocks): an importance matrix of the first 8 windows of 256
# tokens of the held-out text, each mix quantized with it from f32, and the mean KL divergence
# KL(p_f32 || p_mix) of the next-token distributions over the held-out tokens 2048..3071.
# Measured 2026-12-03 (deterministic; without the imatrix in brackets):
#   q4_k_m 0.0283 (0.0276), ud_q3_k_xl 0.0304 (0.0313), ud_q2_k_xl 0.0488 (0.0551), ud_iq2_m 0.0473
#   (0.0526), ud_iq2_xxs 0.0615, ud_iq1_m 0.0874 (these two need the imatrix).
# Checked: bounds about 1.5x those, the imatrix lowers KL for ud_q2_k_xl and ud_iq2_m, the files
# shrink in the order of the recipes, ud_iq2_xxs / ud_iq1_m hold IQ2_XXS / IQ1_M tensors; ud_iq2_xxs without an
# importance matrix is refused by quantize and convert with a sentence saying how to make one;
# convert --type ud_q2_k_xl gives quantize's logits; `synth --released --sizes` prints a table whose
# roles add up to its total.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$TS_TMP"
cd "$TS_TMP"
fail() { echo "FAIL: $*"; exit 1; }
H="$TS_FIXTURES/demo/heldout.txt"
"$TS_BIN" convert "$repo/models/demo" -o f32.gguf --type f32 --quiet 2>/dev/null
"$TS_BIN" imatrix -m f32.gguf -f "$H" -c 256 --chunks 8 -o im.gguf 2>/dev/null
"$TS_BIN" tokenize -m f32.gguf -f "$H" --npy ids.npy 2>/dev/null
$PY -c "import numpy as np; np.save('eval.npy', np.load('ids.npy')[2048:3072].astype(np.int32))"
"$TS_BIN" logits -m f32.gguf --tokens-npy eval.npy -o f32.npy 2>/dev/null
for m in ud_q3_k_xl ud_q2_k_xl ud_iq2_m ud_iq2_xxs ud_iq1_m; do
  "$TS_BIN" quantize f32.gguf $m.gguf $m --imatrix im.gguf --quiet 2>/dev/null || fail "quantize $m"
  "$TS_BIN" logits -m $m.gguf --tokens-npy eval.npy -o $m.npy 2>/dev/null
done
for m in ud_q2_k_xl ud_iq2_m; do
  "$TS_BIN" quantize f32.gguf ${m}_plain.gguf $m --quiet 2>/dev/null
  "$TS_BIN" logits -m ${m}_plain.gguf --tokens-npy eval.npy -o ${m}_plain.npy 2>/dev/null
done
# convert --type takes the recipes too: from the checkpoint, the same logits as quantize from f32
"$TS_BIN" convert "$repo/models/demo" -o conv.gguf --type ud_q2_k_xl --quiet 2>/dev/null
"$TS_BIN" logits -m conv.gguf --tokens-npy eval.npy -o conv.npy 2>/dev/null
cmp -s conv.npy ud_q2_k_xl_plain.npy || fail "convert --type ud_q2_k_xl differs from quantize ... ud_q2_k_xl"
$PY - <<'PY'
import numpy as np
def log_softmax(x):
    x = x.astype(np.float64); x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))
b = log_softmax(np.load("f32.npy"))
kl = {}
for t in ("ud_q3_k_xl", "ud_q2_k_xl", "ud_iq2_m", "ud_iq2_xxs", "ud_iq1_m", "ud_q2_k_xl_plain", "ud_iq2_m_plain"):
    q = log_softmax(np.load(f"{t}.npy"))
    k = (np.exp(b) * (b - q)).sum(-1)
    kl[t] = k.mean()
    print(f"demo {t}: mean KL {k.mean():.4f}, max {k.max():.3f}, top-1 agreement {(b.argmax(-1) == q.argmax(-1)).mean():.3f}")
for t, bound in (("ud_q3_k_xl", 0.045), ("ud_q2_k_xl", 0.075), ("ud_iq2_m", 0.075), ("ud_iq2_xxs", 0.09),
                 ("ud_iq1_m", 0.13)):
    assert kl[t] <= bound, f"{t}: mean KL {kl[t]:.4f} above {bound}"
for t in ("ud_q2_k_xl", "ud_iq2_m"):
    assert kl[t] < kl[t + "_plain"], f"{t}: the imatrix did not lower KL ({kl[t]:.4f} vs {kl[t + '_plain']:.4f})"
PY
size() { stat -c %s "$1"; }
[ "$(size ud_iq1_m.gguf)" -lt "$(size ud_iq2_xxs.gguf)" ] && [ "$(size ud_iq2_xxs.gguf)" -lt "$(size ud_iq2_m.gguf)" ] && [ "$(size ud_iq2_m.gguf)" -lt "$(size ud_q2_k_xl.gguf)" ] &&
  [ "$(size ud_q2_k_xl.gguf)" -lt "$(size ud_q3_k_xl.gguf)" ] || fail "the mixes' sizes are out of order"
"$TS_BIN" inspect ud_iq2_xxs.gguf | grep -Eq '^  iq2_xxs +[0-9]+ tensors' || fail "no IQ2_XXS tensor in ud_iq2_xxs"
"$TS_BIN" inspect ud_iq2_m.gguf | grep -Eq '^  iq2_s +[0-9]+ tensors' || fail "no IQ2_S tensor in ud_iq2_m"
"$TS_BIN" inspect ud_iq1_m.gguf | grep -Eq '^  iq1_m +[0-9]+ tensors' || fail "no IQ1_M tensor in ud_iq1_m"
# IQ2_XXS needs importance weights: refused without them, nothing written
if "$TS_BIN" quantize f32.gguf x.gguf ud_iq2_xxs --quiet 2>err.txt; then fail "ud_iq2_xxs without an imatrix was accepted"; fi
grep -q "only with importance weights: make them with \`turbospark imatrix" err.txt || { cat err.txt; fail "no sentence (quantize)"; }
if "$TS_BIN" convert "$repo/models/demo" -o x.gguf --type ud_iq2_xxs --quiet 2>err.txt; then fail "convert ud_iq2_xxs was accepted"; fi
grep -q "convert to bf16 first, make an importance matrix" err.txt || { cat err.txt; fail "no sentence (convert)"; }
[ ! -e x.gguf ] || fail "a refused command left x.gguf"
# the size table of the released shapes: the roles add up to the total
"$TS_BIN" synth --released --type ud_iq2_xxs --sizes >sizes.txt
grep -q "routed experts gate/up" sizes.txt || { cat sizes.txt; fail "no routed experts row"; }
$PY - <<'PY'
import re
lines = open("sizes.txt").read().splitlines()
total = int(re.search(r"G parameters, (\d+) bytes", lines[0]).group(1))
rows = [l.split() for l in lines[2:]]
sums = sum(int(next(x for x in r if x.isdigit() and len(x) > 6)) for r in rows)
assert sums == total, (sums, total)
PY
if "$TS_BIN" synth --released --type q4_K --sizes 2>err.txt; then fail "--sizes with a type, not a mix, was accepted"; fi
grep -q "needs --type with a mix name" err.txt || { cat err.txt; fail "no sentence (--sizes)"; }
echo "quant_ud: ok"
