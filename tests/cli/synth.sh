#!/usr/bin/env bash
# turbospark synth: the released config as a sparse file binds with 1,224 tensors and uses no real
# disk; the tiny config with data binds in every matrix type synth can write.
set -euo pipefail
mkdir -p "$TS_TMP"
f="$TS_TMP/released.gguf"
"$TS_BIN" synth --sparse -o "$f" 2>/dev/null
out=$("$TS_BIN" inspect "$f")
grep -q "^tensors       1224," <<<"$out" || { echo "released synth: expected 1224 tensors"; exit 1; }
grep -q "qwen4exp binds: 48 layers (36 GDN, 12 QSA)" <<<"$out" || { echo "released synth does not bind"; echo "$out" | tail -3; exit 1; }
used=$(du -k "$f" | cut -f1)
[ "$used" -lt 4096 ] || { echo "sparse synth used ${used} KiB of disk"; exit 1; }
"$TS_BIN" inspect "$f" --tensors | grep -q "per_layer_token_embd.weight *q8_0 *\[160, 320001536\]" ||
  { echo "PLE table shape wrong"; exit 1; }
rm -f "$f"
for t in f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 q4_K q5_K q6_K iq4_nl; do
  "$TS_BIN" synth --tiny --type "$t" -o "$TS_TMP/tiny.gguf" 2>/dev/null
  "$TS_BIN" inspect "$TS_TMP/tiny.gguf" | grep -q "qwen4exp binds: 4 layers" || { echo "tiny $t does not bind"; exit 1; }
done
# any config of the family from a config.json: the same model line as the converted checkpoint
for fx in "$TS_FIXTURES"/golden/*/; do
  "$TS_BIN" synth --config "$fx/config.json" --type f32 -o "$TS_TMP/cfg.gguf" 2>/dev/null
  "$TS_BIN" convert "$fx" -o "$TS_TMP/conv.gguf" --type f32 >/dev/null 2>&1
  a=$("$TS_BIN" inspect "$TS_TMP/cfg.gguf" | grep "^model")
  b=$("$TS_BIN" inspect "$TS_TMP/conv.gguf" | grep "^model")
  [ -n "$a" ] && [ "$a" = "$b" ] || { echo "synth --config $fx: '$a' vs converted '$b'"; exit 1; }
done
rm -f "$TS_TMP/cfg.gguf" "$TS_TMP/conv.gguf"
# bad usage
set +e
"$TS_BIN" synth --tiny 2>/dev/null; [ $? -eq 2 ] || { echo "synth without -o should exit 2"; exit 1; }
"$TS_BIN" synth --type q9_9 -o "$TS_TMP/x.gguf" 2>/dev/null; [ $? -eq 2 ] || { echo "bad type should exit 2"; exit 1; }
echo "synth: ok"
