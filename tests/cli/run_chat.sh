#!/usr/bin/env bash
# turbospark run / chat on the demo model: seeded sampling reproduces, greedy is deterministic,
# stop strings cut the output, chat keeps a conversation over stdin and leaves on /exit, and bad
# input gets a clear error.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"; cd "$TS_TMP"
m="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$repo/models/demo" -o "$m" --type bf16 --quiet || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
a=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 40 -s 7 2>/dev/null)
b=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 40 -s 7 2>/dev/null)
c=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 40 -s 8 2>/dev/null)
[ "$a" = "$b" ] || bad "the same seed gave different text"
[ "$a" != "$c" ] || bad "different seeds gave the same text"
g1=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 20 --temp 0 -s 1 2>/dev/null)
g2=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 20 --temp 0 -s 2 2>/dev/null)
[ "$g1" = "$g2" ] || bad "greedy depends on the seed"
# a stop string: the output ends before it
s=$("$TS_BIN" run -m "$m" -p "And the LORD said" -n 100 --temp 0 --stop "," 2>err.txt)
grep -q "stopped by stop string" err.txt || bad "stop string not reported: $(cat err.txt)"
[[ "${s#And the LORD said}" != *,* ]] || bad "output contains the stop string: $s"
# chat over stdin: two turns, then /exit
printf 'Who was Moses?\nAnd Aaron?\n/exit\n' | "$TS_BIN" chat -m "$m" -n 20 -s 3 >chat.out 2>chat.err || bad "chat failed: $(cat chat.err)"
[ "$(grep -c 'tokens/s' chat.err)" -eq 2 ] || bad "chat did not answer two turns: $(cat chat.err)"
# the file's own template through the Jinja engine by default; the built-in one with --no-jinja; a file
grep -q "^chat template: jinja\." chat.err || bad "chat did not use the file's template: $(head -2 chat.err)"
echo /exit | "$TS_BIN" chat -m "$m" --no-jinja >/dev/null 2>chat.err; grep -q "^chat template: qwen3\." chat.err || bad "--no-jinja: $(head -2 chat.err)"
printf 'Hi\n/exit\n' | "$TS_BIN" chat -m "$m" -n 4 --chat-template-file "$repo/tests/fixtures/templates/qwen3.5.jinja" >/dev/null 2>chat.err \
  && grep -q "^chat template: jinja\." chat.err && grep -q "tokens/s" chat.err || bad "--chat-template-file: $(cat chat.err)"
printf '{%% raw %%}' >raw.jinja
"$TS_BIN" chat -m "$m" --chat-template-file raw.jinja </dev/null >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "{% raw %} is not supported" err.txt || bad "unsupported template file: $(cat err.txt)"
# bad input
"$TS_BIN" run -m "$m" -p "x" --temp -1 >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "temperature must be" err.txt || bad "negative temperature: $(cat err.txt)"
"$TS_BIN" run -m "$m" -p "$(printf 'word %.0s' $(seq 600))" -c 64 >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "more than the context" err.txt || bad "long prompt: $(cat err.txt)"
"$TS_BIN" run -m "$m" >/dev/null 2>err.txt; [ $? -eq 2 ] || bad "run without a prompt should exit 2"
"$TS_BIN" chat -m "$m" --chat-template jinja2 </dev/null >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "chat" err.txt || bad "unknown chat template: $(cat err.txt)"
"$TS_BIN" run -m /nonexistent.gguf -p x >/dev/null 2>err.txt; [ $? -eq 1 ] && grep -q "cannot open" err.txt || bad "missing model"
[ $fail -eq 0 ] && echo "run_chat: ok"
exit $fail
