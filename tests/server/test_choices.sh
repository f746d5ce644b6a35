#!/usr/bin/env bash
# logprobs and n > 1 with the official OpenAI client (demo model, CPU), checked against the
# `turbospark generate` and `turbospark logits` commands (choices.cjs).
source "$(dirname "$0")/lib.sh"
sv_start -np 4 -c 1024
SV_URL="$SV_URL" TS_BIN="$TS_BIN" TS_MODEL="$TS_MODEL" TS_TMP="$TS_TMP" ts_node --test --test-reporter=spec \
  "$TS_SERVER_TESTS/choices.cjs" || bad "choices.cjs failed (server log: $SV_LOG)"
sv_stop
[ $fail -eq 0 ] && echo "server choices: ok"
exit $fail
