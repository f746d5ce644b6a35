#!/usr/bin/env bash
# The committed demo GGUF (models/demo.gguf) is exactly what `turbospark convert models/demo --type
# bf16` writes today, and `turbospark run` on it produces text (what `make demo` does).
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"
"$TS_BIN" convert "$repo/models/demo" -o "$TS_TMP/demo.gguf" --type bf16 >/dev/null 2>&1
cmp "$TS_TMP/demo.gguf" "$repo/models/demo.gguf" || { echo "FAIL: models/demo.gguf is stale: convert models/demo again"; exit 1; }
out=$("$TS_BIN" run -m "$repo/models/demo.gguf" -p "And it came to pass" -n 30 --temp 0 2>"$TS_TMP/err")
grep -q "generation: 30 tokens" "$TS_TMP/err" || { cat "$TS_TMP/err"; echo "FAIL: run did not generate 30 tokens"; exit 1; }
[ "$(wc -w <<<"$out")" -gt 15 ] || { echo "FAIL: too little text: $out"; exit 1; }
echo "$out"
echo "demo_gguf: ok"
