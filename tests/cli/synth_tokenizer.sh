#!/usr/bin/env bash
# turbospark synth --tokenizer-from: a synthetic model carrying the demo model's tokenizer.
#   - --tiny takes the tokenizer's 4,160 tokens as its vocabulary: every tokenizer.* key equals the
#     demo file's, the model binds and runs;
#   - --released keeps its 248,320 rows: the token list is padded with [PAD<id>] tokens of type UNUSED,
#     every other tokenizer.* key equals the demo file's;
#   - both tokenize the 433 parity texts to Hugging Face's ids (tests/fixtures/tokenizer/parity.json,
#     made with the demo tokenizer) and give the demo file's pieces (bytes of every token);
#   - a token list longer than the config's vocabulary, and a file without a tokenizer, are refused.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
"$TS_BIN" convert "$repo/models/demo" -o demo.gguf --quiet 2>err.txt || { cat err.txt; fail "convert models/demo"; }
"$TS_BIN" synth --tiny --tokenizer-from demo.gguf -o tiny.gguf 2>log.txt || { cat log.txt; fail "synth --tiny"; }
grep -q "demo.gguf's tokenizer: 4160 tokens (the config's vocabulary resized to it); PLE end-of-sequence id 4091" log.txt ||
  { cat log.txt; fail "synth --tiny did not say how it fitted the tokenizer"; }
"$TS_BIN" synth --released --sparse --tokenizer-from demo.gguf -o rel.gguf 2>log.txt || { cat log.txt; fail "synth --released"; }
grep -q "4160 tokens, padded to 248320 with \[PAD<id>\] tokens of type UNUSED; PLE end-of-sequence id 4091" log.txt ||
  { cat log.txt; fail "synth --released did not say it padded the token list"; }

keys() { "$TS_BIN" inspect "$1" | grep '^  tokenizer\.'; }
keys demo.gguf >keys_demo.txt
keys tiny.gguf >keys_tiny.txt
keys rel.gguf >keys_rel.txt
diff keys_demo.txt keys_tiny.txt || fail "the tiny synth's tokenizer keys differ from the demo file's"
grep -q 'tokenizer.chat_template = ' keys_tiny.txt || fail "no chat template carried"
# the released synth: the same keys but the two per-token arrays, which are padded
diff <(grep -v -e 'tokenizer.ggml.tokens =' -e 'tokenizer.ggml.token_type =' keys_demo.txt) \
     <(grep -v -e 'tokenizer.ggml.tokens =' -e 'tokenizer.ggml.token_type =' keys_rel.txt) ||
  fail "the released synth's tokenizer keys differ from the demo file's"
grep -q 'tokenizer.ggml.tokens = \[string x 248320\]' keys_rel.txt || fail "released token list not padded to 248320"
grep -q 'tokenizer.ggml.token_type = \[i32 x 248320\]' keys_rel.txt || fail "released token types not padded"
"$TS_BIN" inspect tiny.gguf | grep -q "qwen4exp binds: 4 layers .* vocab 4160" || fail "the tiny synth does not bind with vocab 4160"
"$TS_BIN" inspect rel.gguf | grep -q "qwen4exp binds: 48 layers .* vocab 248320" || fail "the released synth does not bind"
# the padding, read from the file's header: [PAD<id>] tokens of type UNUSED (5) after the demo's 4160
$PY - rel.gguf demo.gguf <<'PY' || fail "the released synth's token list is not the demo's padded with [PAD<id>] UNUSED tokens"
import struct, sys
def tokenizer(path):
    """tokenizer.ggml.tokens and token_type from a GGUF header (the data section is never read)."""
    b = open(path, "rb").read(1 << 24)
    n_t, n_kv = struct.unpack_from("<QQ", b, 8)
    pos, out = 24, {}
    size = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
    def val(t, p):
        if t == 8:
            (n,) = struct.unpack_from("<Q", b, p)
            return b[p + 8:p + 8 + n], p + 8 + n
        if t == 9:
            et, n = struct.unpack_from("<IQ", b, p)
            p += 12
            items = []
            for _ in range(n):
                v, p = val(et, p)
                items.append(v)
            return items, p
        fmt = {4: "<I", 5: "<i"}.get(t)
        return (struct.unpack_from(fmt, b, p)[0] if fmt else None), p + size[t]
    for _ in range(n_kv):
        (n,) = struct.unpack_from("<Q", b, pos)
        key = b[pos + 8:pos + 8 + n].decode()
        (t,) = struct.unpack_from("<I", b, pos + 8 + n)
        v, pos = val(t, pos + 12 + n)
        out[key] = v
    return out["tokenizer.ggml.tokens"], out["tokenizer.ggml.token_type"]
rt, rty = tokenizer(sys.argv[1])
dt, dty = tokenizer(sys.argv[2])
assert len(rt) == len(rty) == 248320 and len(dt) == len(dty) == 4160
assert rt[:4160] == dt and rty[:4160] == dty, "the demo's tokens are not kept as they are"
bad = [i for i in range(4160, 248320) if rt[i] != f"[PAD{i}]".encode() or rty[i] != 5]
assert not bad, f"padding wrong at ids {bad[:5]}"
PY

# tokenization: Hugging Face's ids for every parity text, through each file
$PY - "$TS_FIXTURES/tokenizer/parity.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
with open("want.txt", "w") as out:
    for i, c in enumerate(d["cases"]):
        open(f"case{i}.bin", "wb").write(bytes.fromhex(c["bytes_hex"]))
        out.write(" ".join(map(str, c["ids"])) + "\n")
PY
n=$(wc -l <want.txt)
[ "$n" -gt 400 ] || fail "only $n parity cases"
files=$(seq 0 $((n - 1)) | sed 's/.*/-f case&.bin/')
for m in tiny rel; do
  # shellcheck disable=SC2086
  "$TS_BIN" tokenize -m $m.gguf $files >got_$m.txt
  cmp -s want.txt got_$m.txt || { diff want.txt got_$m.txt | head -5; fail "$m: ids differ from Hugging Face's"; }
done
# detokenization: the bytes of every token of those texts (and of written [PAD<id>] names, which
# stay plain text), equal to the demo file's
printf '[PAD4159][PAD4160][PAD248319]<|im_start|>user\n' >pad.bin
for m in demo tiny rel; do
  # shellcheck disable=SC2086
  "$TS_BIN" tokenize -m $m.gguf --pieces $files -f pad.bin >pieces_$m.txt
done
[ "$(wc -l <pieces_demo.txt)" -gt 5000 ] || fail "too few pieces"
cmp -s pieces_demo.txt pieces_tiny.txt || fail "tiny: pieces differ from the demo file's"
cmp -s pieces_demo.txt pieces_rel.txt || fail "rel: pieces differ from the demo file's"

# the tiny synth runs: a greedy continuation through its own tokenizer
"$TS_BIN" run -m tiny.gguf -p "And it came to pass" -n 8 --temp 0 >run.txt 2>run_err.txt || { cat run_err.txt; fail "run on the tiny synth"; }

# refusals: a token list longer than the config's vocabulary; a file without a tokenizer
set +e
"$TS_BIN" synth --config "$repo/models/demo/config.json" --tokenizer-from rel.gguf -o x.gguf 2>err.txt
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "its tokenizer has 248320 tokens, more than this config's vocabulary of 4160" err.txt ||
  { cat err.txt; fail "a longer token list was not refused (rc $rc)"; }
set +e
"$TS_BIN" synth --tiny --tokenizer-from "$TS_FIXTURES/gguf/sample.gguf" -o x.gguf 2>err.txt
rc=$?
set -e
[ $rc -eq 1 ] && grep -q "the file has no tokenizer" err.txt || { cat err.txt; fail "a file without a tokenizer was not refused"; }
[ ! -e x.gguf ] || fail "a refused synth left x.gguf behind"
rm -f rel.gguf
echo "synth_tokenizer: ok ($n texts tokenized as Hugging Face does, pieces as the demo file's)"
