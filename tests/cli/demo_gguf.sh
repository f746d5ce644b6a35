#!/usr/bin/env bash
# The demo GGUF as `make demo` makes it: `turbospark convert models/demo --type bf16` is
# deterministic (two conversions are byte-identical) and `turbospark run` on it produces text.
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"
"$TS_BIN" convert "$repo/models/demo" -o "$TS_TMP/demo.gguf" --type bf16 >/dev/null 2>&1
"$TS_BIN" convert "$repo/models/demo" -o "$TS_TMP/demo2.gguf" --type bf16 >/dev/null 2>&1
cmp "$TS_TMP/demo.gguf" "$TS_TMP/demo2.gguf" || { echo "FAIL: two conversions differ"; exit 1; }
out=$("$TS_BIN" run -m "$TS_TMP/demo.gguf" -p "And it came to pass" -n 30 --temp 0 2>"$TS_TMP/err")
grep -q "generation: 30 tokens" "$TS_TMP/err" || { cat "$TS_TMP/err"; echo "FAIL: run did not generate 30 tokens"; exit 1; }
[ "$(wc -w <<<"$out")" -gt 15 ] || { echo "FAIL: too little text: $out"; exit 1; }
echo "$out"
echo "demo_gguf: ok"
