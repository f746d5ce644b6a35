#!/usr/bin/env bash
# turbospark imatrix on the synthetic tiny model (f32, every feature on, 8 experts top-2):
#   1. one chunk of 96 tokens: the sums of blk.0.hc_attn_down (the RMS-normed embedding streams) and
#      of blk.2.hc_attn_down (the normed residual after layer 1, from the numpy oracle's trace) equal
#      a direct computation; every dense count is 96;
#   2. the routed experts: per layer the expert counts add up to 96 x 2 (top-2), the gate and up
#      entries are equal (same input), and the sum over experts of ffn_gate_exps' sums is twice the
#      router's (ffn_gate_inp sees every token once, the experts each token twice); the same with
#      fused gate_up experts (one entry, its input counted once);
#   3. files: --in-file X -o Y rewrites X byte for byte; two --in-file add up; the .dat form written
#      from the GGUF reads back to the same weights (mean of x²); bad files are refused by name.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
ORACLE="$(cd "$(dirname "$0")/../../tools/oracle" && pwd)"
mkdir -p "$TS_TMP"
cd "$TS_TMP"
fail() { echo "FAIL: $*"; exit 1; }
"$TS_BIN" synth --tiny --type f32 --seed 3 -o tiny.gguf 2>/dev/null
"$TS_BIN" synth --tiny --type f32 --seed 3 --fused-experts -o fused.gguf 2>/dev/null
$PY - <<'PY'
import numpy as np
rng = np.random.default_rng(5)
t = rng.integers(0, 512, size=200).astype(np.int32)
t[[0, 9, 50]] = 500  # the PLE EOS
np.save("toks.npy", t)
np.save("toks96.npy", t[:96])
PY
"$TS_BIN" imatrix -m tiny.gguf --tokens-npy toks.npy -c 96 --chunks 1 -o im.gguf 2>err.txt || { cat err.txt; fail "imatrix"; }
"$TS_BIN" imatrix -m fused.gguf --tokens-npy toks.npy -c 96 --chunks 1 -o fused_im.gguf 2>/dev/null
$PY "$ORACLE/np_forward.py" tiny.gguf toks96.npy --trace trace >/dev/null
$PY - "$ORACLE" <<'PY'
import sys
import numpy as np
sys.path.insert(0, sys.argv[1])
from mini_gguf import Reader
m, im = Reader("tiny.gguf"), Reader("im.gguf")
assert im.kv["general.type"] == "imatrix" and im.kv["imatrix.chunk_count"] == 1 and im.kv["imatrix.chunk_size"] == 96
ids = np.load("toks96.npy")
H, C, eps = 64, 4, m.kv["qwen4exp.attention.layer_norm_rms_epsilon"]
def normed(R, w):  # the hyper-connection read's RMS norm, per stream of H
    x = R.reshape(len(R), C, H).astype(np.float64)
    return (x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)).reshape(len(R), C * H) * w
def check(name, x):
    want, got = (x * x).sum(0), im.tensors[name + ".in_sum2"][0]
    err = np.abs(got - want).max() / np.abs(want).max()
    print(f"{name}: in_sum2 max rel err {err:.2e}; in_sum {np.abs(im.tensors[name + '.in_sum'][0] - x.sum(0)).max():.2e}")
    assert err < 1e-5 and np.allclose(im.tensors[name + ".in_sum"][0], x.sum(0), rtol=1e-4, atol=1e-4 * np.abs(x).max())
    assert im.tensors[name + ".counts"].ravel().tolist() == [96.0]
E0 = np.tile(m.tensors["token_embd.weight"][ids], (1, C))
check("blk.0.hc_attn_down.weight", normed(E0, m.tensors["blk.0.hc_attn_norm.weight"]))
check("blk.2.hc_attn_down.weight", normed(np.load("trace/layer_01.npy"), m.tensors["blk.2.hc_attn_norm.weight"]))
f = Reader("fused_im.gguf")
for l in range(4):
    b = f"blk.{l}."
    c = f.tensors[b + "ffn_gate_up_exps.weight.counts"].ravel()
    assert c.sum() == 96 * 2 and c.shape == (8,), (l, c)
    assert np.allclose(f.tensors[b + "ffn_gate_up_exps.weight.in_sum2"].sum(0),
                       2 * f.tensors[b + "ffn_gate_inp.weight.in_sum2"][0], rtol=1e-5), l
    c = im.tensors[b + "ffn_gate_exps.weight.counts"].ravel()
    assert c.sum() == 96 * 2 and c.shape == (8,), (l, c)
    g, u = im.tensors[b + "ffn_gate_exps.weight.in_sum2"], im.tensors[b + "ffn_up_exps.weight.in_sum2"]
    assert g.shape == (8, 64) and np.array_equal(g, u)
    r = im.tensors[b + "ffn_gate_inp.weight.in_sum2"][0]
    assert np.allclose(g.sum(0), 2 * r, rtol=1e-5), l
    assert im.tensors[b + "ffn_down_exps.weight.in_sum2"].shape == (8, 32)
    assert b + "ffn_gate_inp.weight.in_sum2" in im.tensors and b + "ffn_down_shexp.weight.counts" in im.tensors
assert not any(n.startswith("output") for n in im.tensors), "output.weight is not collected (llama.cpp's default)"
print("direct sums: ok")
PY
# files
"$TS_BIN" imatrix --in-file im.gguf -o rt.gguf 2>/dev/null
cmp im.gguf rt.gguf || fail "--in-file X -o Y changed the file"
"$TS_BIN" imatrix --in-file im.gguf --in-file im.gguf -o twice.gguf 2>/dev/null
"$TS_BIN" imatrix --in-file im.gguf --output-format dat -o im.dat 2>/dev/null
"$TS_BIN" imatrix --in-file im.dat -c 96 -o fromdat.gguf 2>/dev/null
"$TS_BIN" imatrix -m tiny.gguf --tokens-npy toks.npy -c 64 --in-file im.gguf -o more.gguf 2>err.txt ||
  { cat err.txt; fail "imatrix with --in-file and new tokens"; }
grep -q "chunks of 96 tokens, this run 64" err.txt || fail "no note about the different chunk sizes"
$PY - "$ORACLE" <<'PY'
import sys, struct
import numpy as np
sys.path.insert(0, sys.argv[1])
from mini_gguf import Reader
a, b, d = Reader("im.gguf"), Reader("twice.gguf"), Reader("fromdat.gguf")
assert b.kv["imatrix.chunk_count"] == 2 and b.kv["imatrix.datasets"] == a.kv["imatrix.datasets"] * 2
for n, t in a.tensors.items():
    assert np.array_equal(b.tensors[n], 2 * t), n
# the .dat file: per entry the mean of x² times ncall, one row of n_mat * n_in values
blob = open("im.dat", "rb").read()
(n_entries,) = struct.unpack_from("<i", blob, 0)
assert n_entries == sum(1 for n in a.tensors if n.endswith(".in_sum2"))
for n in a.tensors:
    if not n.endswith(".in_sum2"):
        continue
    name = n[: -len(".in_sum2")]
    s2, c = a.tensors[n], a.tensors[name + ".counts"].reshape(-1, 1)
    want = np.where(c > 0, s2 / np.maximum(c, 1), 1.0).ravel()
    got_s2, got_c = d.tensors[n].ravel(), d.tensors[name + ".counts"].ravel()
    assert got_c.shape == (1,) and name + ".in_sum" not in d.tensors
    got = got_s2 / got_c[0]
    assert np.allclose(got, want, rtol=2e-6, atol=0), (name, np.abs(got - want).max())
m = Reader("more.gguf")
assert m.kv["imatrix.chunk_count"] == 1 + 3 and len(m.kv["imatrix.datasets"]) == 2
c = m.tensors["blk.0.hc_attn_down.weight.counts"].ravel()
assert c.tolist() == [96.0 + 3 * 64], c
print("files: ok")
PY
# bad input
expect_fail() {  # expect_fail "message part" args...
  local want=$1; shift
  if "$TS_BIN" imatrix "$@" >out.txt 2>&1; then fail "imatrix $* succeeded"; fi
  grep -q -- "$want" out.txt || { cat out.txt; fail "imatrix $*: no '$want' in the message"; }
}
expect_fail "no importance data" --in-file tiny.gguf -o x.gguf
head -c 100 im.dat >trunc.dat
expect_fail "truncated or malformed" --in-file trunc.dat -o x.gguf
expect_fail "do not fill one chunk" -m tiny.gguf --tokens-npy toks.npy -c 4096 -o x.gguf
expect_fail "another" -m tiny.gguf --tokens-npy toks.npy -c 64 --in-file fromdat.gguf -o x.gguf
expect_fail "cannot open" --in-file missing.gguf -o x.gguf
expect_fail "needs the model" --tokens-npy toks.npy -o x.gguf
[ ! -e x.gguf ] || fail "a failed run left x.gguf"
echo "imatrix: ok"
