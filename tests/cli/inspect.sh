#!/usr/bin/env bash
# `turbospark inspect` on the valid sample (tests/fixtures/gguf/sample.gguf, written by
# tools/make_test_gguf.py): --tensors lists every tensor with its type and shape; --dump of every
# tensor gives a float32 .npy equal, bit for bit, to the values the generator wrote
# (sample_<tensor>.npy; Q8_0 ones are the exactly dequantized values); bad usage exits 2; --dump of
# a tensor that is not there exits 1 with one sentence.
# Env (set by tests/CMakeLists.txt): TS_BIN, TS_FIXTURES, TS_TMP.
set -uo pipefail
: "${TS_BIN:?}" "${TS_FIXTURES:?}" "${TS_TMP:?}"
mkdir -p "$TS_TMP"
sample="$TS_FIXTURES/gguf/sample.gguf"
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
run() { timeout 20 "$@" >"$TS_TMP/out" 2>"$TS_TMP/err"; rc=$?; }

# A python with numpy (Debian's python3-numpy lives in /usr/bin/python3; a pyenv one may lack it).
PY=""
for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c "import numpy" 2>/dev/null; then PY=$p; break; fi
done
[ -n "$PY" ] || { echo "FAIL: no python3 with numpy (install python3-numpy)" >&2; exit 1; }

# name  type  shape (ggml ne) -- as tools/make_test_gguf.py writes them
expected="token_embd.weight q8_0 [64, 16]
output_norm.weight f32 [64]
blk.0.attn_norm.weight f32 [64]
blk.0.attn_qkv.weight f16 [64, 24]
blk.0.ffn_gate_inp.weight bf16 [64, 8]
blk.0.ssm_conv1d.weight f32 [4, 32]
blk.0.ffn_up_exps.weight q8_0 [64, 8, 4]
blk.0.ple_test.weight bf16 [4, 3, 2, 2]"

# --tensors lists every tensor with type and shape.
run "$TS_BIN" inspect "$sample" --tensors
[ "$rc" -eq 0 ] || bad "--tensors: exit status $rc (stderr: $(cat "$TS_TMP/err"))"
while read -r name type shape; do
    grep -Eq "^ +[0-9]+ +$(printf '%s' "$name" | sed 's/\./\\./g') +$type +$(printf '%s' "$shape" | sed 's/\[/\\[/;s/\]/\\]/') " "$TS_TMP/out" ||
        bad "--tensors: no line for $name $type $shape"
done <<<"$expected"
listed=$(grep -Ec '^ +[0-9]+ +[^ ]+ +[a-z0-9_]+ +\[' "$TS_TMP/out")
[ "$listed" -eq 8 ] || bad "--tensors: $listed tensor lines, expected 8"

# --dump of every tensor equals the generator's values exactly.
while read -r name type shape; do
    out="$TS_TMP/$name.npy"
    rm -f "$out"
    run "$TS_BIN" inspect "$sample" --dump "$name" -o "$out"
    [ "$rc" -eq 0 ] || { bad "--dump $name: exit status $rc (stderr: $(cat "$TS_TMP/err"))"; continue; }
    "$PY" - "$out" "$TS_FIXTURES/gguf/sample_$name.npy" "$name" <<'PYEOF' || bad "--dump $name: values differ"
import sys
import numpy as np
got, want, name = np.load(sys.argv[1]), np.load(sys.argv[2]), sys.argv[3]
if got.dtype != np.float32 or got.shape != want.shape:
    sys.exit("%s: got %s %s, expected float32 %s" % (name, got.dtype, got.shape, want.shape))
if not np.array_equal(got.view(np.uint32), want.astype(np.float32).view(np.uint32)):
    i = np.flatnonzero(got.ravel() != want.ravel())
    sys.exit("%s: %d of %d values differ, first at flat index %d: %r != %r"
             % (name, i.size, got.size, i[0] if i.size else -1,
                got.ravel()[i[0]] if i.size else None, want.ravel()[i[0]] if i.size else None))
PYEOF
done <<<"$expected"

# --dump of a tensor that is not there: exit 1 and one sentence naming it.
run "$TS_BIN" inspect "$sample" --dump no.such.tensor -o "$TS_TMP/none.npy"
[ "$rc" -eq 1 ] || bad "--dump of a missing tensor: exit status $rc, expected 1"
[ "$(wc -l <"$TS_TMP/err")" -eq 1 ] && grep -q "no.such.tensor" "$TS_TMP/err" ||
    bad "--dump of a missing tensor: expected one line naming it, got: $(cat "$TS_TMP/err")"
[ ! -e "$TS_TMP/none.npy" ] || bad "--dump of a missing tensor left $TS_TMP/none.npy behind"

# Bad usage exits 2 with a message.
usage_case() {
    run "$TS_BIN" inspect "$@"
    [ "$rc" -eq 2 ] || bad "inspect $*: exit status $rc, expected 2"
    [ -s "$TS_TMP/err" ] || bad "inspect $*: nothing on stderr"
}
usage_case
usage_case --bogus "$sample"
usage_case "$sample" --dump token_embd.weight
usage_case "$sample" -o "$TS_TMP/x.npy"
usage_case "$sample" "$sample"
usage_case "$sample" --dump

# A file that does not exist: exit 1 with one sentence.
run "$TS_BIN" inspect "$TS_TMP/does-not-exist.gguf"
[ "$rc" -eq 1 ] && [ "$(wc -l <"$TS_TMP/err")" -eq 1 ] || bad "missing file: exit $rc, stderr: $(cat "$TS_TMP/err")"

[ "$fail" -eq 0 ] && echo "ok: inspect --tensors, --dump of 8 tensors, usage errors"
exit "$fail"
