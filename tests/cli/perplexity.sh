#!/usr/bin/env bash
# turbospark perplexity against transformers: with one window as long as a golden fixture's prompt,
# the perplexity of its second half must equal the one computed from the reference logits.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
mkdir -p "$TS_TMP"
cd "$TS_TMP"
F="$TS_FIXTURES/golden/causal_i3_hc4"
"$TS_BIN" convert "$F" -o m.gguf --type f32 >/dev/null 2>&1
T=$($PY -c "import numpy as np; print(len(np.load('$F/tokens.npy')))")
out=$("$TS_BIN" perplexity -m m.gguf --tokens-npy "$F/tokens.npy" -c "$T" 2>/dev/null)
echo "$out"
ppl=$(sed -n 's/^perplexity: \([0-9.]*\) .*/\1/p' <<<"$out")
$PY - "$F" "$T" "$ppl" <<'PY'
import sys, numpy as np
F, T, ppl = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
x = np.load(f"{F}/logits.npy").astype(np.float64); t = np.load(f"{F}/tokens.npy")
first = T // 2
lse = np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1)) + x.max(-1)
nll = [lse[i] - x[i, t[i + 1]] for i in range(first, T - 1)]
ref = float(np.exp(np.mean(nll)))
print(f"reference (transformers logits): {ref:.6f}, turbospark: {ppl:.6f}")
assert abs(ppl - ref) <= 1e-4 * ref, "perplexity differs from the reference"
PY
# bad input: a window longer than the tokens
if "$TS_BIN" perplexity -m m.gguf --tokens-npy "$F/tokens.npy" -c 100000 2>err.txt; then echo "FAIL: accepted"; exit 1; fi
grep -q "do not fill one window" err.txt
echo "perplexity: ok"
