#!/usr/bin/env bash
# The load test's tools on the CPU (the same ones run at the released shapes on the GPU):
#   - scripts/server_load.sh on the demo model: 8 streaming greedy clients x 16 tokens, each equal to
#     the same request sent alone, decoded together, no leak; the server stops cleanly, bench -b 8
#     runs with and without --all-logits, the figures and their ratios are printed;
#   - tools/load_test.py's leak check fails while a request it did not send holds a slot;
#   - a tiny synthetic model carrying the demo model's tokenizer (synth --tokenizer-from) is served:
#     its /props has the demo's vocabulary and chat template, and chat requests are answered (alone
#     and together, equal);
#   - serve --random-weights is refused on the CPU backend.
source "$(dirname "$0")/lib.sh"
LOAD="$TS_REPO/tools/load_test.py"

out="$TS_TMP/server_load"
rm -rf "$out"
TS_BIN="$TS_BIN" timeout -k 5 120 bash "$TS_REPO/scripts/server_load.sh" "$TS_MODEL" --clients 8 --max-tokens 16 \
  --out "$out" >"$TS_TMP/server_load.txt" 2>&1 || bad "server_load.sh failed: $(cat "$TS_TMP/server_load.txt")"
cat "$TS_TMP/server_load.txt"
grep -q '^load_test: 8 clients x 16 tokens: .* 8/8 equal to alone, .*; no leak; ok$' "$TS_TMP/server_load.txt" ||
  bad "no passing load_test summary"
grep -q '^server: .* tokens/s aggregate at 8 clients; bench -b 8 (-n 16, depth [0-9]*): .* tokens/s; ratio [0-9.]*; with every sequence.s logits (--all-logits) [0-9,.]*, ratio [0-9.]*$' \
  "$TS_TMP/server_load.txt" || bad "no server/bench ratio line"
$PY - "$out/report.json" <<'PY' || bad "the load report is not what 8 clients x 16 tokens give"
import json, sys
r = json.load(open(sys.argv[1]))
c = r["concurrent"]
assert r["ok"] and r["compare"]["equal"] == 8 and not r["leaks"] and not r["errors"], r
assert c["completion_tokens"] == 8 * 16 and len(r["requests"]) == 8, c
assert c["mean_batch"] > 2, f"requests were not decoded together (mean batch {c['mean_batch']})"
assert all(q["ttft_s"] > 0 and q["completion_tokens"] == 16 for q in r["requests"]), r["requests"]
PY

# the leak check: a request of someone else's running through the test is caught
sv_start -np 4 -c 2048 --quiet
curl -sN -m 60 "$SV_URL/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "And it came to pass", "max_tokens": 1000, "ignore_eos": true, "stream": true}' >/dev/null &
curl_pid=$!
for _ in $(seq 100); do
  curl -s "$SV_URL/health" | grep -q '"slots_processing":1' && break
  sleep 0.05
done
timeout -k 5 60 $PY "$LOAD" --url "$SV_URL" --clients 2 --max-tokens 4 >"$TS_TMP/leak.txt" 2>&1
rc=$?
cat "$TS_TMP/leak.txt"
[ $rc -eq 1 ] && grep -q 'LEAK; FAILED' "$TS_TMP/leak.txt" &&
  grep -Eq 'turbospark_slots_busy is 1|requests finished by stop or length since the start, expected 4' "$TS_TMP/leak.txt" ||
  bad "a request left running was not reported as a leak (status $rc)"
wait $curl_pid
sv_stop

# a tiny synthetic model with the demo model's tokenizer, served
"$TS_BIN" synth --tiny --tokenizer-from "$TS_MODEL" -o "$TS_TMP/tiny.gguf" 2>/dev/null || bad "synth --tiny --tokenizer-from"
TS_MODEL="$TS_TMP/tiny.gguf" sv_start -np 2 -c 512 --quiet
curl -s "$SV_URL/props" >"$TS_TMP/props.json"
$PY - "$TS_TMP/props.json" "$TS_REPO/models/demo/tokenizer_config.json" <<'PY' || bad "the tiny synth's /props"
import json, sys
p, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert p["n_vocab"] == 4160, p["n_vocab"]
assert p["chat_template"] == t["chat_template"], "not the demo's chat template"
assert p["chat_template_name"] == "jinja", p["chat_template_name"]
PY
timeout -k 5 60 $PY "$LOAD" --url "$SV_URL" --clients 2 --max-tokens 8 --kind chat --report "$TS_TMP/tiny.json" ||
  bad "chat on the tiny synth failed"
$PY -c 'import json, sys; r = json.load(open(sys.argv[1])); assert all(q["completion_tokens"] == 8 for q in r["requests"])' \
  "$TS_TMP/tiny.json" || bad "the tiny synth's chat answers are not 8 tokens"
sv_stop

set +e
"$TS_BIN" serve -m "$TS_MODEL" --random-weights 2>"$TS_TMP/rw.txt"
rc=$?
set -e
[ $rc -eq 2 ] && grep -q -- "--random-weights needs --backend cuda" "$TS_TMP/rw.txt" || bad "--random-weights on the CPU was not refused"
set +e
[ $fail -eq 0 ] && echo "server load client: ok"
exit $fail
