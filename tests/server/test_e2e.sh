#!/usr/bin/env bash
# The official OpenAI client against turbospark serve (demo model, CPU): models, completions and
# chat, streamed and whole, stop strings, seeds, error objects, API key, client aborts (e2e.cjs).
source "$(dirname "$0")/lib.sh"
key="test-key-$RANDOM$RANDOM"
sv_start -np 4 -c 4096 --api-key "$key"
SV_URL="$SV_URL" SV_KEY="$key" TS_BIN="$TS_BIN" TS_MODEL="$TS_MODEL" ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/e2e.cjs" \
  || bad "e2e.cjs failed (server log: $SV_LOG)"
sv_stop
[ $fail -eq 0 ] && echo "server e2e: ok"
exit $fail
