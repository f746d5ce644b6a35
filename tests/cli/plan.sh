#!/usr/bin/env bash
# turbospark plan: the released shapes' capacity table (one 262,144-token sequence fits an H200 with
# the PLE table on the GPU or in host memory), a file and its configuration plan the same bytes,
# -np refuses with the backend's sentence, and bad flags are refused with a sentence (exit 2).
set -uo pipefail
mkdir -p "$TS_TMP"
fail() { echo "FAIL: $*"; exit 1; }

out=$("$TS_BIN" plan --released) || fail "plan --released exited $?"
grep -q "^weights      78.16 GiB on the GPU" <<<"$out" || fail "released q4_k_m weights: $out"
grep -q "^PLE table    32.78 GiB" <<<"$out" || fail "released PLE table: $out"
grep -q "^GPU memory   139.80 GiB (default: an H200" <<<"$out" || fail "default GPU memory: $out"
grep -q "^| 4096 | 241.6 MiB | 562.3 MiB | 115 | 254 |$" <<<"$out" || fail "4K row: $out"
grep -q "^| 262144 | 8.17 GiB | 621.5 MiB | 3 | 7 |$" <<<"$out" || fail "262K row: $out"
grep -q "not measured" <<<"$out" || fail "the table must say it is computed"

# --cache-gpu: serve's snapshot memory comes off the sequences (4 GiB: 254 → 237 sequences of 4,096 in
# host memory, by hand: (139.8 − 78.16 − 0.549 − 1 − 4) GiB / 241.6 MiB = 237.7), and names itself when
# it is what does not fit
out=$("$TS_BIN" plan --released --cache-gpu 4096) || fail "plan --cache-gpu exited $?"
grep -q "^snapshots    4.00 GiB of GPU memory for the prefix cache" <<<"$out" || fail "--cache-gpu line: $out"
grep -q "^| 4096 | 241.6 MiB | 562.3 MiB | 98 | 237 |$" <<<"$out" || fail "--cache-gpu 4K row: $out"
err=$("$TS_BIN" plan --released --cache-gpu 4096 -c 262144 -np 7 --ple host 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] && grep -q "asked for snapshots (serve's --cache-gpu) do not fit" <<<"$err" ||
  fail "--cache-gpu refusal (exit $rc): $err"
"$TS_BIN" plan --released --cache-gpu x >/dev/null 2>&1 && fail "--cache-gpu x accepted"

# the JSON form, and one sequence of the trained context fits with either placement
json=$("$TS_BIN" plan --released -o json -c 262144) || fail "plan -o json exited $?"
python3 - "$json" <<'EOF' || fail "JSON output: $json"
import json, sys
d = json.loads(sys.argv[1])
c = d["contexts"][0]
assert c["ctx"] == 262144 and c["seq_state_bytes"] == 8775088384, c
assert c["seqs_table_gpu"] >= 1 and c["seqs_table_host"] >= 1, c
assert d["longest_ctx_table_gpu"] >= 262144 and d["n_ctx_train"] == 262144, d
EOF

# -np: the backend's check and sentence
"$TS_BIN" plan --released -c 262144 -np 3 --ple gpu >/dev/null 2>&1 || fail "three 262K sequences with the table on the GPU should fit"
"$TS_BIN" plan --released -c 262144 -np 7 --ple host >/dev/null 2>&1 || fail "seven 262K sequences with the table in host memory should fit"
err=$("$TS_BIN" plan --released -c 262144 -np 4 --ple gpu 2>&1 >/dev/null); rc=$?
[ $rc -eq 1 ] || fail "-np 4 at 262K with the table on the GPU: exit $rc, expected 1"
grep -q "does not fit on a GPU of 139.80 GiB: it needs .* state 32.69 for 4 sequence(s) of 262144 tokens" <<<"$err" ||
  fail "-np refusal sentence: $err"

# a file plans what its configuration plans (the UD mix and the tiny shapes here)
"$TS_BIN" synth --tiny --sparse --type ud_q2_k_xl -o "$TS_TMP/tiny.gguf" 2>/dev/null || fail "synth"
a=$("$TS_BIN" plan -m "$TS_TMP/tiny.gguf" -c 100,4096 -ub 16 | tail -n +2)
b=$("$TS_BIN" plan --tiny --type ud_q2_k_xl -c 100,4096 -ub 16 | tail -n +2)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "file and configuration differ:\n$a\n---\n$b"
rm -f "$TS_TMP/tiny.gguf"

# refusals: a sentence on stderr, exit 2
expect() { # expect 'stderr pattern' args...
  local pat=$1; shift
  local e rc
  e=$("$TS_BIN" plan "$@" 2>&1 >/dev/null); rc=$?
  [ $rc -eq 2 ] || fail "plan $*: exit $rc, expected 2 ($e)"
  grep -q -- "$pat" <<<"$e" || fail "plan $*: '$e' does not say '$pat'"
}
for v in abc 0 -5 nan inf 1e30 12XB ""; do
  expect "--gpu-mem takes the GPU's memory in GiB" --released --gpu-mem "$v"
done
for v in 0 -1 abc "" 4096, ,4096 "1,,2" 1073741824 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17; do
  expect "takes up to 16 token counts from 1 to 1073741823" --released --ctx "$v"
done
expect "-c takes up to 16" --released -c 0
expect "--ple is auto, gpu or host" --released --ple disk
expect "-o is md or json" --released -o csv
expect "-ub takes the rows of a micro-batch" --released -ub 0
expect "-np takes a number of sequences" --released -np 0
expect "no model" -c 4096
expect "not both" --released -m x.gguf
expect "--type is for a configuration" -m x.gguf --type q4_k_m
expect "unknown type or mix 'q9'" --released --type q9
expect "unknown option '--nope'" --released --nope 1
expect "unknown or incomplete option '--gpu-mem'" --released --gpu-mem
# a file that is not there: exit 1 with the loader's sentence
e=$("$TS_BIN" plan -m "$TS_TMP/none.gguf" 2>&1); [ $? -eq 1 ] && grep -q "none.gguf" <<<"$e" || fail "missing file: $e"
"$TS_BIN" plan --help | grep -q "^usage: turbospark plan" || fail "--help"
echo "plan: ok"
