#!/usr/bin/env bash
# turbospark convert and quantize on the golden fixtures (tiny transformers checkpoints made by
# tools/fixtures/make_golden.py, see tests/fixtures/golden/README.md). For every fixture:
#   1. convert to f32 GGUF; `inspect` must say "qwen4exp binds";
#   2. tools/check_convert.py re-applies every documented transform to the checkpoint in numpy and
#      requires every GGUF tensor to match exactly (plus the derived metadata);
#   3. the numpy oracle (tools/oracle/np_forward.py) runs the GGUF on the first 96 prompt tokens and
#      must match transformers' fp32 logits (logits.npy[:96]; causal, so a prefix is exact) to
#      1e-4 · max|logit| — this proves the transforms against transformers itself. Positions whose
#      indexer/router top-k has an exact tie at the cut (and, for a tie before the last layer, every
#      later position) are left out: torch.topk's tie order is unspecified (docs/MODEL.md §5.7); see
#      check_convert.py --oracle. At least one sparse-attention position must remain in all.
# Then, on one fixture: bad inputs (output_gate_type silu, a missing tensor, an unknown tensor, a
# wrong shape, a truncated safetensors file) must exit 1 with one sentence naming the problem and
# leave no output; --mtp with and without an MTP head; tokenizer.json → tokenizer.ggml.*; quantize
# to q8_0 and q4_k_m must bind, give each tensor the type the mix policy (src/convert/mix.h) says,
# equal `convert --type` of the same mix byte for byte, and dequantize within a stated relative
# error of the f32 file (q8_0 ≤ 1%, q4_k_m ≤ 8% relative RMS per tensor); quantize must refuse
# another architecture.
# A fixture directory without its files yet is skipped (said so); no fixture at all fails.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
repo=$(cd "$(dirname "$0")/../.." && pwd)
root="$TS_FIXTURES/golden"
mkdir -p "$TS_TMP"
PREFIX=96

if [ ! -d "$root" ]; then
  echo "SKIP: no golden fixtures yet ($root does not exist)"
  exit 0
fi

fail() { echo "FAIL: $*"; exit 1; }

n=0
sparse=0
first=""
for dir in "$root"/*/; do
  name=$(basename "$dir")
  if [ ! -f "$dir/config.json" ] || [ ! -f "$dir/tokens.npy" ] || [ ! -f "$dir/logits.npy" ] ||
     { [ ! -f "$dir/model.safetensors" ] && [ ! -f "$dir/model.safetensors.index.json" ]; }; then
    echo "skipped $name: its files are not all there yet"
    continue
  fi
  g="$TS_TMP/$name.f32.gguf"
  "$TS_BIN" convert "$dir" -o "$g" --type f32 --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "convert $name"; }
  "$TS_BIN" inspect "$g" | grep -q "qwen4exp binds" || fail "$name: the converted file does not bind"
  $PY "$repo/tools/check_convert.py" "$dir" "$g" >"$TS_TMP/check.out" || { cat "$TS_TMP/check.out"; fail "$name: values"; }
  $PY "$repo/tools/check_convert.py" --oracle "$g" "$dir/tokens.npy" "$dir/logits.npy" "$PREFIX" 1e-4 \
    >"$TS_TMP/oracle.out" || { cat "$TS_TMP/oracle.out"; fail "$name: oracle logits differ from transformers"; }
  echo "$name: $(tail -1 "$TS_TMP/check.out" | sed 's/^check_convert: //'); $(cat "$TS_TMP/oracle.out")"
  sparse=$((sparse + $(sed -n 's/.*(\([0-9]*\) past the QSA budget).*/\1/p' "$TS_TMP/oracle.out")))
  [ -n "$first" ] || first="$dir"
  n=$((n + 1))
done
[ "$n" -gt 0 ] || fail "no golden fixture in $root"
[ "$sparse" -gt 0 ] || fail "no fixture compared a sparse-attention position free of top-k ties: indexer unverified"

# ---- bad input: a copy of the first fixture, edited --------------------------------------------
name=$(basename "$first")
bad="$TS_TMP/bad"
expect_refusal() { # what, phrase
  local out="$TS_TMP/bad.gguf"
  rm -f "$out"
  set +e
  "$TS_BIN" convert "$bad" -o "$out" --quiet 2>"$TS_TMP/err"
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] || { cat "$TS_TMP/err"; fail "$1: exit status $rc, expected 1"; }
  [ "$(wc -l <"$TS_TMP/err")" -eq 1 ] || { cat "$TS_TMP/err"; fail "$1: expected one line on stderr"; }
  grep -q -- "$2" "$TS_TMP/err" || { cat "$TS_TMP/err"; fail "$1: message lacks '$2'"; }
  [ ! -e "$out" ] || fail "$1: a refused conversion left $out behind"
  echo "refused $1: $(cat "$TS_TMP/err")"
}
# Repacks the fixture's checkpoint into one model.safetensors with an edit:
#   drop NAME | add NAME | transpose NAME | truncate BYTES | gate-silu
edit() {
  rm -rf "$bad"
  mkdir -p "$bad"
  $PY - "$first" "$bad" "$@" <<'PY'
import json, os, struct, sys
src, dst, op = sys.argv[1], sys.argv[2], sys.argv[3]
arg = sys.argv[4] if len(sys.argv) > 4 else None
cfg = json.load(open(f"{src}/config.json"))
if op == "gate-silu":
    (cfg.get("text_config") or cfg)["output_gate_type"] = "silu"
json.dump(cfg, open(f"{dst}/config.json", "w"))
idx = f"{src}/model.safetensors.index.json"
files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
tensors = {}
for fn in files:
    buf = open(f"{src}/{fn}", "rb").read()
    (n,) = struct.unpack_from("<Q", buf)
    hdr = json.loads(buf[8:8 + n])
    for k, e in hdr.items():
        if k != "__metadata__":
            b, en = e["data_offsets"]
            tensors[k] = [e["dtype"], e["shape"], buf[8 + n + b:8 + n + en]]
embed = next(k for k in tensors if k.endswith("embed_tokens.weight"))
if op == "drop":
    del tensors[next(k for k in tensors if k.endswith("." + arg))]
elif op == "add":
    tensors[embed.replace("embed_tokens.weight", arg)] = ["BF16", [2, 2], bytes(8)]
elif op == "poke":  # add 1 to the first int64 of a buffer
    e = tensors[next(k for k in tensors if k.endswith("." + arg))]
    e[2] = (int.from_bytes(e[2][:8], "little") + 1).to_bytes(8, "little") + e[2][8:]
elif op == "transpose":
    e = tensors[next(k for k in tensors if k.endswith("." + arg))]
    e[1] = e[1][::-1]
elif op == "mtp":  # an MTP head (docs/MODEL.md §4.6; block named like Qwen3-Next's mtp.layers.0.*) from the last QSA layer
    import numpy as np
    P = embed[:-len("embed_tokens.weight")]
    last = max(int(k[len(P) + 7:].split(".")[0]) for k in tensors if k.startswith(P + "layers.") and ".self_attn." in k)
    lp = f"{P}layers.{last}."
    for k in [k for k in tensors if k.startswith(lp)]:
        tensors["mtp.layers.0." + k[len(lp):]] = list(tensors[k])
    for k in [k for k in tensors if k.startswith(P + "hyper_connection_mixer.")]:
        tensors["mtp." + k[len(P):]] = list(tensors[k])
    H = tensors[embed][1][1]
    W = tensors[P + "hyper_connection_mixer.hc_norm.weight"][1][0]
    rng = np.random.default_rng(7)
    bf16 = lambda n, s: (rng.standard_normal(n).astype(np.float32) * s).view(np.uint32) >> 16
    for name, shape, sc in (("fc_embedding.weight", [H, H], 0.2), ("fc_hidden.weight", [H, H], 0.2),
                            ("pre_fc_norm_embedding.weight", [H], 0.3), ("pre_fc_norm_hidden.weight", [W], 0.3)):
        tensors["mtp." + name] = ["BF16", shape, bf16(int(np.prod(shape)), sc).astype(np.uint16).tobytes()]
hdr, off = {}, 0
for k, (dt, sh, data) in tensors.items():
    hdr[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(data)]}
    off += len(data)
h = json.dumps(hdr).encode()
h += b" " * (-len(h) % 8)
blob = struct.pack("<Q", len(h)) + h + b"".join(t[2] for t in tensors.values())
if op == "truncate":
    blob = blob[:-int(arg)]
open(f"{dst}/model.safetensors", "wb").write(blob)
PY
}
edit gate-silu;                                  expect_refusal "output_gate_type silu" "output gate is 'silu'"
edit drop "layers.0.mlp.shared_expert_gate.weight"; expect_refusal "missing tensor" "has no tensor '.*layers.0.mlp.shared_expert_gate.weight'"
edit add "layers.0.mlp.mystery.weight";          expect_refusal "unknown tensor" "'.*layers.0.mlp.mystery.weight' is not part of"
edit transpose "layers.0.mlp.gate.weight";       expect_refusal "wrong shape" "layers.0.mlp.gate.weight' has shape"
edit truncate 100;                               expect_refusal "truncated safetensors" "truncated"
edit poke "ple_embedding.layer_multipliers";     expect_refusal "PLE buffer vs config" "layer_multipliers'\[0\] is .* but the config"
edit none;                                       # the repacked copy itself converts, but has no MTP head
"$TS_BIN" convert "$bad" -o "$TS_TMP/bad.gguf" --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "repacked copy"; }
rm -f "$TS_TMP/bad.gguf"
expect_refusal_mtp() {
  set +e
  "$TS_BIN" convert "$bad" -o "$TS_TMP/bad.gguf" --mtp --quiet 2>"$TS_TMP/err"
  local rc=$?
  set -e
  [ "$rc" -eq 1 ] && grep -q "has no mtp" "$TS_TMP/err" || { cat "$TS_TMP/err"; fail "--mtp without an MTP head: rc $rc"; }
  echo "refused --mtp without mtp.* tensors: $(cat "$TS_TMP/err")"
}
expect_refusal_mtp
# with an MTP head: skipped without --mtp, converted as blk.L with it (values checked like the trunk)
edit mtp
"$TS_BIN" convert "$bad" -o "$TS_TMP/bad.gguf" --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "mtp.* not skipped"; }
"$TS_BIN" inspect "$TS_TMP/bad.gguf" | grep "qwen4exp binds" | grep -vq "+ MTP" || fail "MTP converted without --mtp"
"$TS_BIN" convert "$bad" -o "$TS_TMP/bad.gguf" --mtp --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "--mtp"; }
"$TS_BIN" inspect "$TS_TMP/bad.gguf" | grep -q "binds: .* + MTP" || fail "--mtp: the file does not bind with its MTP block"
$PY "$repo/tools/check_convert.py" "$bad" "$TS_TMP/bad.gguf" >"$TS_TMP/check.out" || { cat "$TS_TMP/check.out"; fail "--mtp values"; }
echo "--mtp: $(tail -1 "$TS_TMP/check.out" | sed 's/^check_convert: //')"
# tokenizer.json (+ tokenizer_config.json, chat_template.jinja) becomes tokenizer.ggml.* metadata
edit none
$PY - "$bad" "$TS_TMP/bad.gguf" "$repo" <<'PY'
import json, sys
d, out, repo = sys.argv[1:4]
V = json.load(open(f"{d}/config.json")).get("vocab_size")
vocab = {("\u0120" if i % 2 else "") + f"t{i}": i for i in range(V - 5)}
added = [{"id": V - 3 + k, "content": c, "special": True, "normalized": False}
         for k, c in enumerate(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])]
demo = json.load(open(f"{repo}/models/demo/tokenizer.json"))  # Qwen's split regex + ByteLevel
json.dump({"version": "1.0", "added_tokens": added, "normalizer": {"type": "NFC"},
           "pre_tokenizer": demo["pre_tokenizer"], "decoder": demo["decoder"],
           "model": {"type": "BPE", "vocab": vocab, "merges": [["t", "1"], "t 2"]}}, open(f"{d}/tokenizer.json", "w"))
json.dump({"eos_token": "<|im_end|>", "pad_token": {"content": "<|endoftext|>"}, "bos_token": None,
           "add_bos_token": False}, open(f"{d}/tokenizer_config.json", "w"))
open(f"{d}/chat_template.jinja", "w").write("{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}")
PY
"$TS_BIN" convert "$bad" -o "$TS_TMP/bad.gguf" --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "convert with tokenizer.json"; }
$PY - "$TS_TMP/bad.gguf" "$repo" <<'PY'
import sys
sys.path.insert(0, sys.argv[2] + "/tools/oracle")
from mini_gguf import Reader
kv = Reader(sys.argv[1]).kv
V = len(kv["tokenizer.ggml.tokens"])
toks, types = kv["tokenizer.ggml.tokens"], kv["tokenizer.ggml.token_type"]
assert kv["tokenizer.ggml.model"] == "gpt2" and kv["tokenizer.ggml.pre"] == "qwen35"
assert toks[0] == "t0" and toks[1] == "\u0120t1" and toks[V - 5] == f"[PAD{V - 5}]" and toks[V - 1] == "<|im_end|>", toks[-6:]
assert types[0] == 1 and types[V - 5] == 5 and types[V - 1] == 3, types[-6:]
assert kv["tokenizer.ggml.merges"] == ["t 1", "t 2"]
assert kv["tokenizer.ggml.eos_token_id"] == V - 1 and kv["tokenizer.ggml.padding_token_id"] == V - 3
# bos_token is None here and config.json has no bos_token_id: as llama.cpp, no bos key is written
assert kv.get("tokenizer.ggml.bos_token_id") is None and kv["tokenizer.ggml.add_bos_token"] is False
assert kv["tokenizer.chat_template"].startswith("{% for m in messages %}")
print(f"tokenizer: {V} tokens (2 padded), 2 merges, eos/pad ids and chat template written")
PY
rm -rf "$bad" "$TS_TMP/bad.gguf"

# ---- quantize ---------------------------------------------------------------------------------
f32="$TS_TMP/$name.f32.gguf"
for mix in q8_0 q4_k_m; do
  q="$TS_TMP/$name.$mix.gguf"
  "$TS_BIN" quantize "$f32" "$q" "$mix" --quiet 2>"$TS_TMP/err" || { cat "$TS_TMP/err"; fail "quantize $mix"; }
  "$TS_BIN" inspect "$q" | grep -q "qwen4exp binds" || fail "$mix: the quantized file does not bind"
  # convert --type MIX applies the same policy to the same values: the files are byte-identical
  "$TS_BIN" convert "$first" -o "$TS_TMP/direct.gguf" --type "$mix" --quiet 2>/dev/null || fail "convert --type $mix"
  cmp -s "$q" "$TS_TMP/direct.gguf" || fail "convert --type $mix differs from quantize(f32 file, $mix)"
  rm -f "$TS_TMP/direct.gguf"
  "$TS_BIN" inspect "$q" --tensors >"$TS_TMP/tensors.txt"
  mkdir -p "$TS_TMP/dump"
  $PY - "$f32" "$q" "$mix" "$TS_TMP/tensors.txt" "$TS_TMP/dump" "$TS_BIN" "$repo" <<'PY'
import os, re, subprocess, sys
import numpy as np
f32, q, mix, listing, dump, ts_bin, repo = sys.argv[1:8]
sys.path.insert(0, f"{repo}/tools/oracle")
from mini_gguf import Reader
r = Reader(f32)
kv = lambda k: r.kv["qwen4exp." + k]  # noqa: E731
types = {}
for line in open(listing):
    m = re.match(r"\s*\d+\s+(\S+)\s+(\S+)\s+\[", line)
    if m and m.group(1) in r.tensors:
        types[m.group(1)] = m.group(2).lower()
assert set(types) == set(r.tensors), f"{mix}: tensor list differs: {sorted(set(r.tensors) ^ set(types))[:5]}"
# the mix policy of src/convert/mix.h, restated
blocks = {"q4_k": 256, "q5_k": 256, "q6_k": 256, "q8_0": 32, "q5_0": 32, "q5_1": 32, "f16": 1, "f32": 1}
fallback = {"q4_k": "q5_0", "q5_k": "q5_1", "q6_k": "q8_0"}
def fit(t, ne0):
    if ne0 % blocks[t] == 0:
        return t
    t = fallback.get(t, "q8_0")
    return t if ne0 % blocks[t] == 0 else "f16"
ratios = kv("attention.compress_ratios")
n_block = kv("block_count")
qsa = [l for l in range(n_block) if ratios[l]]
more = lambda i, n: i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2  # noqa: E731
def policy(name, arr):
    if name.endswith("ffn_gate_inp.weight"):  # routers: bf16 only where that rounds no value
        exact = not (np.ascontiguousarray(arr, dtype=np.float32).view(np.uint32) & 0xFFFF).any()
        return "bf16" if exact else "f32"
    if arr.ndim == 1 or name.endswith("ssm_conv1d.weight") or name.endswith("ple_conv1d.weight"):
        return "f32"  # vectors, conv kernels
    ne0 = arr.shape[-1]
    if mix == "q8_0":
        return fit("q8_0", ne0)
    t = "q4_k"
    m = re.match(r"blk\.(\d+)\.(.*)", name)
    if name in ("output.weight", "token_embd.weight"):
        t = "q6_k"
    elif m and m.group(2) == "attn_qkv.weight":
        t = "q5_k"
    elif m and m.group(2) == "attn_v.weight" and more(qsa.index(int(m.group(1))), len(qsa)):
        t = "q6_k"
    elif m and m.group(2).startswith("ffn_down") and more(int(m.group(1)), n_block):
        t = "q6_k"
    return fit(t, ne0)
wrong = [(n, types[n], policy(n, a)) for n, a in r.tensors.items() if types[n] != policy(n, a)]
assert not wrong, f"{mix}: types differ from the policy (name, file, policy): {wrong[:8]}"
# values: dequantized matrices against the f32 file, relative RMS error per tensor
bound = {"q8_0": 0.01, "q4_k_m": 0.08}[mix]
worst, wname, used = 0.0, "", {}
for name, a in r.tensors.items():
    used[types[name]] = used.get(types[name], 0) + 1
    if types[name] == "f32":
        continue
    out = os.path.join(dump, "t.npy")
    subprocess.run([ts_bin, "inspect", q, "--dump", name, "-o", out], check=True, capture_output=True)
    d = np.load(out).reshape(a.shape).astype(np.float64)
    e = np.linalg.norm(d - a) / max(np.linalg.norm(a), 1e-30)
    if e > worst:
        worst, wname = e, name
assert worst <= bound, f"{mix}: {wname} dequantizes with relative RMS error {worst:.3g} (bound {bound})"
print(f"quantize {mix}: {len(types)} tensors, types {dict(sorted(used.items()))} as the policy says; "
      f"worst relative RMS error {worst:.2e} ({wname}), bound {bound}")
PY
  rm -rf "$q" "$TS_TMP/dump"
done
# another architecture is refused by name
$PY - "$TS_TMP/llama.gguf" <<'PY'
import struct, sys
key, val = b"general.architecture", b"llama"
blob = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key + struct.pack("<I", 8)
blob += struct.pack("<Q", len(val)) + val
open(sys.argv[1], "wb").write(blob)
PY
set +e
"$TS_BIN" quantize "$TS_TMP/llama.gguf" "$TS_TMP/x.gguf" q8_0 2>"$TS_TMP/err"
rc=$?
set -e
[ "$rc" -eq 1 ] && grep -q "'llama' model" "$TS_TMP/err" || { cat "$TS_TMP/err"; fail "quantize of a llama file: rc $rc"; }
[ ! -e "$TS_TMP/x.gguf" ] || fail "refused quantize left output"
rm -f "$TS_TMP"/*.gguf "$TS_TMP"/*.npy
echo "convert: $n fixtures ok"
