#!/usr/bin/env bash
# Strings cJSON would read wrongly, on every endpoint that takes text (strings.cjs): \u0000 carried
# whole in a completion's prompt and /tokenize's content, refused by field name everywhere else; lone
# surrogates and invalid UTF-8 refused everywhere.
source "$(dirname "$0")/lib.sh"
sv_start -np 2 -c 1024
SV_URL="$SV_URL" ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/strings.cjs" || bad "strings.cjs failed (server log: $SV_LOG)"
sv_stop
[ $fail -eq 0 ] && echo "server strings: ok"
exit $fail
