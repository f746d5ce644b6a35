#!/usr/bin/env bash
# turbospark convert writes a checkpoint's generation_config.json as the general.sampling.* keys
# llama.cpp's converter writes (src/convert/hf_config.h), and the loader gives them back
# (ts_model_sampling, as `run` reports the sampling it uses):
#   1. models/demo (temperature, top_k, top_p): those three keys, as f32, i32 and f32, and no other;
#   2. a copy of the demo whose generation_config.json has the keys llama.cpp takes, one of them
#      null, and keys it leaves out: each key given written with llama.cpp's type and value, the null
#      and the others not; `run` samples with the file's temp, top-k, top-p and min-p, a flag winning;
#   3. malformed files (not a JSON object, a string or a fraction for an integer, values out of range,
#      a number for the sequence) are refused: exit status 1, one sentence naming the file and the
#      key, no output left;
#   4. without generation_config.json no general.sampling.* key is written.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup

# the keys of a GGUF file whose name starts with general.sampling., as "key type value" lines
sampling_keys() {
  $PY - "$1" "$repo" <<'PY'
import sys
sys.path.insert(0, sys.argv[2] + "/tools/oracle")
from mini_gguf import Reader
r = Reader(sys.argv[1])
names = {4: "u32", 5: "i32", 6: "f32", 8: "str"}
for k, v in r.kv.items():
    if k.startswith("general.sampling."):
        print(k, names.get(r.kv_type[k], r.kv_type[k]), f"{v:.6g}" if isinstance(v, float) else v)
PY
}

# 1. the demo checkpoint
"$TS_BIN" convert "$repo/models/demo" -o demo.gguf --quiet 2>err || { cat err; fail "convert models/demo"; }
want="general.sampling.top_k i32 40
general.sampling.top_p f32 0.95
general.sampling.temp f32 0.8"
got=$(sampling_keys demo.gguf)
[ "$got" = "$want" ] || fail "models/demo: general.sampling.* keys differ:
$got
expected:
$want"
echo "models/demo: $(tr '\n' ';' <<<"$got")"

# 2. every key llama.cpp takes (xtc_threshold null), and keys it does not take
copy() {
  rm -rf ckpt
  mkdir ckpt
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do ln -s "$repo/models/demo/$f" ckpt/; done
}
copy
cat >ckpt/generation_config.json <<'JSON'
{
  "do_sample": true, "repetition_penalty": 1.1, "max_new_tokens": 100, "eos_token_id": [4091, 4093],
  "sequence": "penalties;top_k;top_p;min_p;temperature", "top_k": 20, "top_p": 0.9, "min_p": 0.02,
  "xtc_probability": 0.1, "xtc_threshold": null, "temperature": 0.6, "penalty_last_n": -1,
  "penalty_repeat": 1.05, "mirostat": 2, "mirostat_tau": 5, "mirostat_eta": 0.1
}
JSON
"$TS_BIN" convert ckpt -o all.gguf --quiet 2>err || { cat err; fail "convert with every sampling key"; }
want="general.sampling.sequence str penalties;top_k;top_p;min_p;temperature
general.sampling.top_k i32 20
general.sampling.top_p f32 0.9
general.sampling.min_p f32 0.02
general.sampling.xtc_probability f32 0.1
general.sampling.temp f32 0.6
general.sampling.penalty_last_n i32 -1
general.sampling.penalty_repeat f32 1.05
general.sampling.mirostat i32 2
general.sampling.mirostat_tau f32 5
general.sampling.mirostat_eta f32 0.1"
got=$(sampling_keys all.gguf)
[ "$got" = "$want" ] || fail "every key: general.sampling.* keys differ:
$got
expected:
$want"
echo "every key: $(wc -l <<<"$got") keys written with llama.cpp's types (the null one and the others left out)"
"$TS_BIN" run -m all.gguf -p "And" -n 1 -s 1 >/dev/null 2>err || { cat err; fail "run on the converted file"; }
grep -q "sampling: temp 0.60 top-k 20 top-p 0.90 min-p 0.02 seed 1" err || { cat err; fail "run does not sample as the file says"; }
"$TS_BIN" run -m all.gguf -p "And" -n 1 -s 1 --top-k 5 --temp 0.3 >/dev/null 2>err || { cat err; fail "run with flags"; }
grep -q "sampling: temp 0.30 top-k 5 top-p 0.90 min-p 0.02 seed 1" err || { cat err; fail "flags do not win over the file"; }
echo "run: samples with the file's temp, top-k, top-p and min-p; flags win"

# 3. malformed files
refused() { # generation_config.json text, phrase the message must hold
  printf '%s' "$1" >ckpt/generation_config.json
  rm -f bad.gguf
  set +e
  "$TS_BIN" convert ckpt -o bad.gguf --quiet 2>err
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || { cat err; fail "$1: exit status $rc, expected 1"; }
  [ "$(wc -l <err)" -eq 1 ] || { cat err; fail "$1: expected one line on stderr"; }
  grep -q "ckpt/generation_config.json" err || { cat err; fail "$1: the message does not name the file"; }
  grep -qF -- "$2" err || { cat err; fail "$1: the message lacks '$2'"; }
  [ ! -e bad.gguf ] || fail "$1: a refused conversion left bad.gguf"
  echo "refused $1: $(cat err)"
}
refused '{"top_k": 40,' "is not valid JSON (error at byte offset 12)"
refused '[40]' "is not a JSON object"
refused '{"top_k": "40"}' "'top_k' must be an integer from 0 to 2147483647"
refused '{"top_k": 40.5}' "'top_k' must be an integer from 0 to 2147483647"
refused '{"temperature": -0.1}' "'temperature' must be a number from 0 to 100"
refused '{"top_p": 1.5}' "'top_p' must be a number from 0 to 1"
refused '{"mirostat": 3}' "'mirostat' must be an integer from 0 to 2"
refused '{"penalty_last_n": -2}' "'penalty_last_n' must be an integer from -1 to 2147483647"
refused '{"sequence": 5}' "'sequence' must be a string"

# 4. no generation_config.json
rm ckpt/generation_config.json
"$TS_BIN" convert ckpt -o none.gguf --quiet 2>err || { cat err; fail "convert without generation_config.json"; }
[ -z "$(sampling_keys none.gguf)" ] || fail "general.sampling.* keys written without generation_config.json"
echo "no generation_config.json: no general.sampling.* key"
rm -rf ckpt ./*.gguf err
echo "convert_sampling: ok"
