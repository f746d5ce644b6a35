#!/usr/bin/env bash
# Structured output, tool calls and reasoning with the official OpenAI client (demo model, CPU):
# structured.cjs against a server with Qwen3's template; reasoning.cjs against the thinking template with a reasoning
# budget, split (deepseek) and unsplit (none).
source "$(dirname "$0")/lib.sh"
# The demo model's own template lists no tools: Qwen3's official one does (the file's as --chat-template-file).
sv_start -np 4 -c 2048 --chat-template-file "$TS_REPO/tests/fixtures/templates/qwen3.jinja"
SV_URL="$SV_URL" ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/structured.cjs" || bad "structured.cjs failed (server log: $SV_LOG)"
grep -q "serve: .* POST /v1/chat/completions 200 .* tool_calls" "$SV_LOG" || bad "the log does not show tool_calls outcomes"
sv_stop

BUDGET=6
sv_start -np 2 -c 2048 --chat-template qwen3-thinking --reasoning-budget $BUDGET
URL1=$SV_URL
PID1=$SV_PID
sv_start -np 2 -c 2048 --chat-template qwen3-thinking --reasoning-budget $BUDGET --reasoning-format none
URL2=$SV_URL
SV_URL="$URL1" SV_URL_NONE="$URL2" BUDGET=$BUDGET ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/reasoning.cjs" \
  || bad "reasoning.cjs failed (server log: $SV_LOG)"
sv_stop
SV_PID=$PID1
sv_stop
[ $fail -eq 0 ] && echo "server structured: ok"
exit $fail
