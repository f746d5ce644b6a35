#!/usr/bin/env bash
# The demo model's perplexity on held-out text, from our runtime, equals transformers' within 1%
# (tests/fixtures/demo/perplexity.json, made by tools/demo/train_demo.py: fp32 forward of the bf16
# checkpoint, llama.cpp's convention: non-overlapping windows of n_ctx tokens from an empty state,
# the second half of each window scored).
#   1. convert models/demo to f32 GGUF (bf16 weights upcast exactly, like the reference);
#   2. tokenize heldout.txt with the file's tokenizer, specials not parsed: ids equal the reference's;
#   3. turbospark perplexity over the same windows; |ppl - ref| <= 1% of ref;
#   4. perplexity -f heldout.txt (tokenizing itself) prints the same number.
# Needs convert to write the tokenizer (src/tokenizer: ts_tokenizer_write_gguf).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
FX="$TS_FIXTURES/demo"
"$TS_BIN" convert "$repo/models/demo" -o demo.f32.gguf --type f32 --quiet 2>err.txt || { cat err.txt; fail "convert models/demo"; }
"$TS_BIN" tokenize -m demo.f32.gguf -f "$FX/heldout.txt" --no-special --npy heldout.npy 2>/dev/null
read -r n_ctx n_chunks ref < <($PY - "$FX/perplexity.json" <<'PY'
import json, sys
import numpy as np
d = json.load(open(sys.argv[1]))
got = np.load("heldout.npy")
want = np.array(d["tokens"], dtype=np.int32)
if got.shape != want.shape or (got != want).any():
    bad = int(np.argmax(got[:len(want)] != want[:len(got)])) if len(got) and len(want) else 0
    sys.exit(f"FAIL: held-out tokens differ from transformers' ({len(got)} vs {len(want)}, first difference at {bad})")
print(d["n_ctx"], d["n_chunks"], d["ppl"])
PY
)
out=$("$TS_BIN" perplexity -m demo.f32.gguf --tokens-npy heldout.npy -c "$n_ctx" --chunks "$n_chunks" 2>/dev/null)
echo "$out"
ppl=$(sed -n 's/^perplexity: \([0-9.]*\) .*/\1/p' <<<"$out")
[ -n "$ppl" ] || fail "no perplexity in the output"
$PY - "$ppl" "$ref" <<'PY'
import sys
ppl, ref = float(sys.argv[1]), float(sys.argv[2])
rel = abs(ppl - ref) / ref
print(f"demo perplexity: turbospark {ppl:.4f}, transformers {ref:.4f} (relative difference {rel:.2e})")
assert rel <= 0.01, "perplexity differs from transformers' by more than 1%"
PY
out_f=$("$TS_BIN" perplexity -m demo.f32.gguf -f "$FX/heldout.txt" -c "$n_ctx" --chunks "$n_chunks" 2>/dev/null)
[ "$(sed -n 's/^perplexity: \([0-9.]*\) .*/\1/p' <<<"$out_f")" = "$ppl" ] || fail "perplexity -f differs from --tokens-npy: $out_f"
echo "demo_perplexity: ok"
