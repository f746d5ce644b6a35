#!/usr/bin/env bash
# llama.cpp's flags on the demo model (src/cli/args.c): long names and short forms take effect,
# escapes make --stop "\n" a newline, -1 means until the end, flags that mean nothing here get a
# note and the command still runs, a capped -c warns, the seed is random unless given, perplexity
# ends with llama.cpp's "Final estimate" line and bench -o json/csv parses.
set -uo pipefail
source "$(dirname "$0")/../lib.sh"
ts_find_python
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"; cd "$TS_TMP"
m="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$repo/models/demo" -o "$m" --type bf16 --quiet || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
P="And the LORD said"
gen_count() { sed -n 's/.*generation: \([0-9]*\) tokens.*/\1/p' "$1"; }

# --n-predict with --ignore-eos: exactly that many tokens; the long and short forms agree
a=$("$TS_BIN" run --model "$m" --prompt "$P" --n-predict 16 --ctx-size 256 --seed 1 --ignore-eos 2>err.txt) || bad "long flags: $(cat err.txt)"
[ "$(gen_count err.txt)" = 16 ] || bad "--n-predict 16 did not give 16 tokens: $(cat err.txt)"
b=$("$TS_BIN" run -m "$m" -p "$P" -n 16 -c 256 -s 1 --ignore-eos 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] || bad "long and short flags differ: '$a' vs '$b'"
c=$("$TS_BIN" run -m "$m" -p "$P" -n16 -c256 -s1 --ignore-eos 2>/dev/null)
[ "$a" = "$c" ] || bad "attached values (-n16) differ: '$c'"

# greedy without --ignore-eos ends at an end-of-generation token (the demo model does within 300);
# with it, the same run goes on to -n, and -n -1 goes on to the end of the context
"$TS_BIN" run -m "$m" -p "$P" -n 300 --temp 0 >/dev/null 2>err.txt
grep -q "stopped by end of generation" err.txt || bad "greedy did not reach an end-of-generation token: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -n 300 --temp 0 --ignore-eos >/dev/null 2>err.txt
[ "$(gen_count err.txt)" = 300 ] && grep -q "stopped by n_predict" err.txt || bad "--ignore-eos: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -n -1 -c 64 --temp 0 --ignore-eos >/dev/null 2>err.txt
grep -q "stopped by context full" err.txt || bad "-n -1 did not run to the end of the context: $(cat err.txt)"

# --stop "\n" is a newline (escapes on by default): without it the greedy text has one in 200 tokens
full=$("$TS_BIN" run -m "$m" -p "$P" -n 200 --temp 0 2>/dev/null)
[[ "$full" == *$'\n'* ]] || bad "the greedy continuation holds no newline, so the next check means nothing"
s=$("$TS_BIN" run -m "$m" -p "$P" -n 200 --temp 0 --stop "\n" 2>err.txt)
grep -q "stopped by stop string" err.txt || bad "--stop \\n did not stop: $(cat err.txt)"
[[ "$s" != *$'\n'* ]] && [ "${full#"$s"}" != "$full" ] || bad "--stop \\n output: '$s'"
"$TS_BIN" run -m "$m" -p "$P" -n 200 --temp 0 --no-escape --stop "\n" >/dev/null 2>err.txt
grep -q "stopped by stop string" err.txt && bad "--no-escape --stop \\n stopped (it is a backslash and an n)"
# -p escapes: "\x41" is A
e=$("$TS_BIN" run -m "$m" -p 'x\x41y' -n 1 --temp 0 2>/dev/null)
[[ "$e" == xAy* ]] || bad "-p escapes: '$e'"
e=$("$TS_BIN" run -m "$m" -p 'x\x41y' -n 1 --temp 0 --no-escape 2>/dev/null)
[[ "$e" == 'x\x41y'* ]] || bad "-p --no-escape: '$e'"

# -f - reads the prompt from stdin; the same as -p
f=$(printf '%s' "$P" | "$TS_BIN" run -m "$m" -f - -n 8 --temp 0 2>/dev/null)
g=$("$TS_BIN" run -m "$m" -p "$P" -n 8 --temp 0 2>/dev/null)
[ -n "$f" ] && [ "$f" = "$g" ] || bad "-f - differs from -p: '$f' vs '$g'"

# llama.cpp flags that mean nothing here: one note each, and the run goes on
"$TS_BIN" run -m "$m" -p "$P" -n 4 -ngl 99 -fa on --mlock --no-mmap --n-gpu-layers 10 -t 1 >out.txt 2>err.txt || bad "ignored flags failed: $(cat err.txt)"
[ "$(grep -c 'note: .* has no effect here' err.txt)" = 5 ] || bad "expected 5 notes: $(cat err.txt)"
[ "$(gen_count err.txt)" ] || bad "ignored flags: no generation"
# unknown flags are still errors
"$TS_BIN" run -m "$m" -p "$P" --no-such-flag >/dev/null 2>err.txt; [ $? -eq 2 ] && grep -q "unknown option '--no-such-flag'" err.txt || bad "unknown flag: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -n >/dev/null 2>err.txt; [ $? -eq 2 ] && grep -q "needs a value" err.txt || bad "missing value: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -c abc >/dev/null 2>err.txt; [ $? -eq 2 ] && grep -q "'-c abc' is not a valid value" err.txt || bad "bad value: $(cat err.txt)"

# a capped value warns: the demo model was trained on 4096 tokens
"$TS_BIN" run -m "$m" -p "$P" -n 2 -c 100000 >/dev/null 2>err.txt || bad "-c 100000 failed: $(cat err.txt)"
grep -q "warning: -c 100000 capped to 4096" err.txt || bad "no warning for a capped -c: $(cat err.txt)"
grep -q "state for 4096 tokens" err.txt || bad "-c not capped to 4096: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -n 2 -c 256 >/dev/null 2>err.txt
grep -q "warning" err.txt && bad "a warning without a capped value: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$P" -n 2 -ub 64 -b 16 >/dev/null 2>err.txt
grep -q "warning: -ub 64 capped to 16" err.txt || bad "no warning for -ub above -b: $(cat err.txt)"

# the seed: random and printed unless given; the printed seed repeats the run
"$TS_BIN" run -m "$m" -p "$P" -n 24 >r1.txt 2>e1.txt
"$TS_BIN" run -m "$m" -p "$P" -n 24 >r2.txt 2>e2.txt
s1=$(sed -n 's/.* seed \([0-9]*\) (random.*/\1/p' e1.txt); s2=$(sed -n 's/.* seed \([0-9]*\) (random.*/\1/p' e2.txt)
[ -n "$s1" ] && [ -n "$s2" ] && [ "$s1" != "$s2" ] || bad "random seeds not printed or equal: '$s1' '$s2'"
"$TS_BIN" run -m "$m" -p "$P" -n 24 -s "$s1" >r3.txt 2>/dev/null
cmp -s r1.txt r3.txt || bad "-s with the printed seed did not repeat the run"

# chat takes the same flags (-sys, --n-predict)
printf 'Who was Moses?\n/exit\n' | "$TS_BIN" chat --model "$m" --n-predict 8 --ignore-eos -sys "Be brief." -ngl 1 >/dev/null 2>err.txt || bad "chat: $(cat err.txt)"
grep -q '\[8 tokens' err.txt || bad "chat --n-predict 8: $(cat err.txt)"

# perplexity: -f - and llama.cpp's closing line
out=$("$TS_BIN" perplexity --model "$m" -f - --ctx-size 64 --chunks 2 <"$TS_FIXTURES/demo/heldout.txt" 2>err.txt) || bad "perplexity: $(cat err.txt)"
$PY - "$out" <<'PY' || bad "perplexity output: $out"
import re, sys
out = sys.argv[1]
ppl = float(re.search(r"^perplexity: ([0-9.]+)", out, re.M).group(1))
m = re.search(r"^Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)$", out, re.M)
assert m, "no Final estimate line"
assert abs(float(m.group(1)) - ppl) < 1e-3 and 0 < float(m.group(2)) < ppl, out
PY

# bench -o json parses, with the fields llama-bench users read; csv has one header and a row a test
"$TS_BIN" bench -m "$m" -p 16 -n 4 -b 1,2 -r 3 -o json >bench.json 2>err.txt || bad "bench json: $(cat err.txt)"
$PY - <<'PY' || bad "bench json: $(cat bench.json)"
import json
rows = json.load(open("bench.json"))
assert [r["test"] for r in rows] == ["pp16", "tg4 @ b1 ctx128", "tg4 @ b2 ctx128"], rows
for r in rows:
    assert r["avg_ts"] > 0 and r["stddev_ts"] >= 0 and len(r["samples_ts"]) == 3, r
    assert r["model_n_params"] > 10_000_000 and r["model_size"] > 1_000_000, r
PY
# --all-logits: every sequence's logits a step, named in the batched rows (batch 1 always has them)
"$TS_BIN" bench -m "$m" -p 0 -n 2 -b 1,2 -r 1 -o json --all-logits >bench_al.json 2>err.txt || bad "bench --all-logits: $(cat err.txt)"
$PY -c 'import json,sys; t=[r["test"] for r in json.load(open("bench_al.json"))]; sys.exit(t != ["tg2 @ b1 ctx128", "tg2 @ b2 ctx128 +logits"])' ||
    bad "bench --all-logits rows: $(cat bench_al.json)"
"$TS_BIN" bench -m "$m" -p 16 -n 4 -r 2 -o csv >bench.csv 2>/dev/null || bad "bench csv"
[ "$(wc -l <bench.csv)" = 3 ] && head -1 bench.csv | grep -q "avg_ts,stddev_ts" || bad "bench csv: $(cat bench.csv)"
"$TS_BIN" bench -m "$m" -p 16 -n 4 -r 2 >bench.md 2>/dev/null || bad "bench md"
grep -q "^| .* ± " bench.md || bad "bench md has no ± column: $(cat bench.md)"
"$TS_BIN" bench -m "$m" -o xml >/dev/null 2>&1 && bad "bench -o xml accepted"
"$TS_BIN" bench -m "$m" -p 16 -n 4 -b 1,2 --profile-batch 4 >/dev/null 2>err.txt && bad "bench --profile-batch 4 with -b 1,2 accepted"
grep -q "more sequences than the largest batch" err.txt || bad "bench --profile-batch: $(cat err.txt)"
"$TS_BIN" bench -m "$m" -p 16,24 -ub 8,16 -n 2 -r 1 >bench_ub.md 2>/dev/null || bad "bench -ub 8,16"
[ "$(grep -cE '^\| .* \| pp(16|24) @ ub(8|16) \|' bench_ub.md)" = 4 ] || bad "bench -ub 8,16: $(cat bench_ub.md)"
"$TS_BIN" bench -m "$m" -p 0 -n 2 -b 1,2 -d 8,16 -r 1 >bench_d.md 2>/dev/null || bad "bench -d 8,16"
[ "$(grep -cE '^\| .* \| tg2 @ b(1|2) ctx(8|16) \|' bench_d.md)" = 4 ] || bad "bench -d 8,16: $(cat bench_d.md)"
"$TS_BIN" bench -m "$m" -ub 0 >/dev/null 2>err.txt && bad "bench -ub 0 accepted"
grep -q "'0' is not a valid value for --ubatch-size" err.txt || bad "bench -ub 0: $(cat err.txt)"
"$TS_BIN" bench -m "$m" -p 16 -n 4 --gpu-mem 80x >/dev/null 2>err.txt && bad "bench --gpu-mem 80x accepted"
grep -q "takes a GPU's memory in GiB" err.txt || bad "bench --gpu-mem 80x: $(cat err.txt)"
"$TS_BIN" bench -m "$m" -p 16 -n 4 --gpu-mem 80 >/dev/null 2>err.txt && bad "bench --gpu-mem on the CPU accepted"
grep -q "gpu-mem needs --backend cuda" err.txt || bad "bench --gpu-mem on the CPU: $(cat err.txt)"

[ $fail -eq 0 ] && echo "llama_flags: ok"
exit $fail
