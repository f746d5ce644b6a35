#!/usr/bin/env bash
# turbospark run with a prompt that opens <think> (as the thinking template ends): --reasoning-budget
# forces </think> after N tokens; --reasoning-format deepseek sends the reasoning to stderr and the
# answer to stdout, and the two equal the unsplit text (none) cut at </think>.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$TS_TMP"; cd "$TS_TMP"
m="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$repo/models/demo" -o "$m" --type bf16 --quiet || exit 1
fail=0
bad() { echo "FAIL: $*"; fail=1; }
PY=python3; [ -x /usr/bin/python3 ] && PY=/usr/bin/python3
printf '<|im_start|>user\nWho begat Enos?<|im_end|>\n<|im_start|>assistant\n<think>\n' > prompt.txt
"$TS_BIN" run -m "$m" -f prompt.txt -n 30 --temp 0 --reasoning-budget 5 --reasoning-format none >raw.txt 2>/dev/null || bad "run (none) failed"
"$TS_BIN" run -m "$m" -f prompt.txt -n 30 --temp 0 --reasoning-budget 5 --reasoning-format deepseek >split.txt 2>split.err || bad "run (deepseek) failed"
"$PY" - <<'PY' || bad "the split differs from the raw text cut at </think>: $(cat raw.txt) / $(cat split.txt) / $(cat split.err)"
prompt = open("prompt.txt").read()
raw = open("raw.txt").read()[len(prompt):]
assert raw.count("</think>") == 1, raw
before, after = raw.split("</think>")
split = open("split.txt").read()
assert "</think>" not in split
err = open("split.err").read()
assert before.strip("\n") in err, (before, err)  # the reasoning went to stderr
assert split[len(prompt):] == after.lstrip("\n"), (split, after)
PY
[ $fail -eq 0 ] && echo "reasoning: ok"
exit $fail
