#!/usr/bin/env bash
# The demo model converted by `turbospark convert` carries a tokenizer equal to Hugging Face's:
#   - the tokenizer.ggml.* keys llama.cpp's converter writes for Qwen (gpt2 / qwen35, 4160 tokens
#     padded with [PADn], eos <|im_end|>, bos = pad = <|endoftext|>, add_bos false, chat template);
#   - `turbospark tokenize -m` on the converted file gives HF tokenizers' ids for every case of
#     tests/fixtures/tokenizer/parity.json, with and without specials.
# Needs convert to write the tokenizer (src/tokenizer: ts_tokenizer_write_gguf).
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
"$TS_BIN" convert "$repo/models/demo" -o demo.gguf --quiet 2>err.txt || { cat err.txt; fail "convert models/demo"; }
"$TS_BIN" inspect demo.gguf >inspect.txt
for want in 'tokenizer.ggml.model = "gpt2"' 'tokenizer.ggml.pre = "qwen35"' 'tokenizer.ggml.tokens = \[string x 4160\]' \
            'tokenizer.ggml.token_type = \[i32 x 4160\]' 'tokenizer.ggml.merges = \[string x 3835\]' \
            'tokenizer.ggml.eos_token_id = 4093' 'tokenizer.ggml.bos_token_id = 4091' \
            'tokenizer.ggml.padding_token_id = 4091' 'tokenizer.ggml.add_bos_token = false' 'tokenizer.chat_template = '; do
  grep -q "$want" inspect.txt || fail "the converted file lacks: $want"
done

$PY - "$TS_FIXTURES/tokenizer/parity.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
with open("cases.tsv", "w") as out:
    for i, c in enumerate(d["cases"]):
        open(f"case{i}.bin", "wb").write(bytes.fromhex(c["bytes_hex"]))
        ns = c["ids_no_special"] if c["ids_no_special"] is not None else c["ids"]
        out.write(f"{i}\t{c['name']}\t{' '.join(map(str, c['ids']))}\t{' '.join(map(str, ns))}\n")
PY
cut -f3 cases.tsv >want.txt
cut -f4 cases.tsv >want_ns.txt
files=$(cut -f1 cases.tsv | sed 's/.*/case&.bin/')
# shellcheck disable=SC2086
"$TS_BIN" tokenize -m demo.gguf $(printf -- '-f %s ' $files) >got.txt
# shellcheck disable=SC2086
"$TS_BIN" tokenize -m demo.gguf --no-special $(printf -- '-f %s ' $files) >got_ns.txt
n=$(wc -l <cases.tsv)
paste cases.tsv got.txt got_ns.txt | awk -F'\t' '$3 != $5 || $4 != $6 { print "FAIL: case " $2 ": ids " $5 " / " $6 " != HF " $3 " / " $4; bad = 1 } END { exit bad }' ||
  fail "the converted file's tokenizer differs from HF"
[ $n -gt 400 ] || fail "only $n parity cases"
echo "demo_tokenizer: the converted demo file tokenizes $n parity cases exactly as HF tokenizers"
