#!/usr/bin/env bash
# quantize --imatrix on the demo model (f32): an importance matrix of the first 8 windows of 256
# tokens of the held-out text, then q4_k_m with and without it.
#   - the imatrix run names the file in quantize.imatrix.* and says how many tensors it weighed;
#   - the weights change the bytes and lower the perplexity over 18 windows of 256 (measured
#     2026-12-03: f32 32.939, q4_k_m 33.165, q4_k_m with the imatrix 32.919 — 32.915 before its Q6_K
#     tensors were weighted too);
#   - the .dat form of the same imatrix (means times call counts: rounded differently) is used too;
#   - an imatrix of another model (the synthetic tiny one) and a missing file are refused.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
repo=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$TS_TMP"
cd "$TS_TMP"
fail() { echo "FAIL: $*"; exit 1; }
H="$TS_FIXTURES/demo/heldout.txt"
"$TS_BIN" convert "$repo/models/demo" -o demo.f32.gguf --type f32 --quiet 2>/dev/null
"$TS_BIN" imatrix -m demo.f32.gguf -f "$H" -c 256 --chunks 8 -o im.gguf 2>/dev/null
"$TS_BIN" imatrix --in-file im.gguf --output-format dat -o im.dat 2>/dev/null
"$TS_BIN" quantize demo.f32.gguf plain.gguf q4_k_m --quiet 2>/dev/null
"$TS_BIN" quantize demo.f32.gguf weighted.gguf q4_k_m --imatrix im.gguf 2>err.txt || { cat err.txt; fail "quantize --imatrix"; }
grep -Eq "importance weights from im.gguf for [1-9][0-9]* tensors" err.txt || { cat err.txt; fail "no count of weighted tensors"; }
"$TS_BIN" quantize demo.f32.gguf weighted_dat.gguf q4_k_m --imatrix im.dat --quiet 2>/dev/null
"$TS_BIN" inspect weighted.gguf | grep -q 'quantize.imatrix.file = "im.gguf"' || fail "no quantize.imatrix.file"
"$TS_BIN" inspect weighted.gguf | grep -q 'quantize.imatrix.chunks_count = 8' || fail "no quantize.imatrix.chunks_count"
cmp -s plain.gguf weighted.gguf && fail "the importance weights changed nothing"
"$TS_BIN" inspect weighted_dat.gguf | grep -q 'quantize.imatrix.file = "im.dat"' || fail "no quantize.imatrix.file (dat)"
cmp -s plain.gguf weighted_dat.gguf && fail "the .dat importance weights changed nothing"
ppl() { "$TS_BIN" perplexity -m "$1" -f "$H" -c 256 --chunks 18 2>/dev/null | sed -n 's/^perplexity: \([0-9.]*\) .*/\1/p'; }
p_plain=$(ppl plain.gguf)
p_weighted=$(ppl weighted.gguf)
echo "q4_k_m perplexity: $p_plain without the imatrix, $p_weighted with it"
awk -v a="$p_weighted" -v b="$p_plain" 'BEGIN { exit !(a < b) }' || fail "the imatrix did not lower the perplexity"
"$TS_BIN" synth --tiny --type f32 -o tiny.gguf 2>/dev/null
python3 -c "import numpy; numpy.save('t.npy', numpy.arange(64, dtype=numpy.int32))" 2>/dev/null ||
  /usr/bin/python3 -c "import numpy; numpy.save('t.npy', numpy.arange(64, dtype=numpy.int32))"
"$TS_BIN" imatrix -m tiny.gguf --tokens-npy t.npy -c 64 -o tiny_im.gguf 2>/dev/null
if "$TS_BIN" quantize demo.f32.gguf x.gguf q4_k_m --imatrix tiny_im.gguf --quiet 2>err.txt; then fail "a foreign imatrix was accepted"; fi
grep -q "another model" err.txt || { cat err.txt; fail "no sentence about the foreign imatrix"; }
if "$TS_BIN" quantize demo.f32.gguf x.gguf q4_k_m --imatrix missing.gguf --quiet 2>err.txt; then fail "a missing imatrix was accepted"; fi
grep -q "cannot open the imatrix file missing.gguf" err.txt || { cat err.txt; fail "no sentence about the missing file"; }
[ ! -e x.gguf ] || fail "a refused quantize left x.gguf"
echo "quantize_imatrix: ok"
