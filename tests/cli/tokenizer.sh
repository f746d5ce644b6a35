#!/usr/bin/env bash
# turbospark tokenize on the demo model's Hugging Face tokenizer (--hf: tokenizer.json read the way
# convert writes it) against the ids of HF tokenizers (tests/fixtures/tokenizer/parity.json): a
# sample of cases through -p and through -f (raw bytes, invalid UTF-8 included), --no-special,
# --npy; then bad input: a folder without tokenizer.json, a missing file, conflicting options.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
HF="$repo/models/demo"
[ -f "$HF/tokenizer.json" ] || fail "no $HF/tokenizer.json"

# Every parity case through -f (its raw bytes), with and without specials.
$PY - "$TS_FIXTURES/tokenizer/parity.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
with open("cases.tsv", "w") as out:
    for i, c in enumerate(d["cases"]):
        open(f"case{i}.bin", "wb").write(bytes.fromhex(c["bytes_hex"]))
        ns = c["ids_no_special"] if c["ids_no_special"] is not None else c["ids"]
        out.write(f"{i}\t{c['name']}\t{' '.join(map(str, c['ids']))}\t{' '.join(map(str, ns))}\n")
PY
n=0
while IFS=$'\t' read -r i name ids ids_ns; do
  got=$("$TS_BIN" tokenize --hf "$HF" -f "case$i.bin")
  [ "$got" = "$ids" ] || fail "case $name: ids '$got' != HF '$ids'"
  got=$("$TS_BIN" tokenize --hf "$HF" -f "case$i.bin" --no-special)
  [ "$got" = "$ids_ns" ] || fail "case $name --no-special: ids '$got' != HF '$ids_ns'"
  n=$((n + 1))
  [ $n -lt 40 ] || break      # a sample here; the unit test checks all of them, demo_tokenizer.sh too
done < cases.tsv
echo "tokenize -f: $n parity cases equal to HF"

# -p, --count, --pieces, --npy
got=$("$TS_BIN" tokenize --hf "$HF" -p "<|im_start|>user")
[ "${got%% *}" = "4092" ] || fail "-p with a special token: '$got'"
[ "$("$TS_BIN" tokenize --hf "$HF" -p "In the beginning" --count)" -ge 2 ] || fail "--count"
"$TS_BIN" tokenize --hf "$HF" -p "<think>x" --pieces | head -1 | grep -q "^4094	<think>$" || fail "--pieces"
"$TS_BIN" tokenize --hf "$HF" -f case2.bin --npy ids.npy 2>/dev/null
$PY -c "import numpy as np; a = np.load('ids.npy'); assert a.dtype == np.int32 and a.ndim == 1 and len(a) > 5, a"

# bad input: one sentence, exit status 1 (2 for usage)
set +e
"$TS_BIN" tokenize --hf "$TS_TMP" -p x 2>err.txt; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "tokenizer.json" err.txt || fail "a folder without tokenizer.json: rc $rc, $(cat err.txt)"
set +e
"$TS_BIN" tokenize --hf "$HF" -f /nonexistent/file 2>err.txt; rc=$?
set -e
[ $rc -eq 1 ] && grep -q "cannot open" err.txt || fail "a missing file: rc $rc"
set +e
"$TS_BIN" tokenize --hf "$HF" -p x -f y 2>/dev/null; rc=$?
set -e
[ $rc -eq 2 ] || fail "-p and -f together: rc $rc"
echo "tokenizer: ok"
