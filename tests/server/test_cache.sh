#!/usr/bin/env bash
# The prefix cache across requests (demo model, CPU): cache.cjs against a server with the default
# budget, and LRU eviction against one whose budget holds about two snapshots of 300 tokens.
source "$(dirname "$0")/lib.sh"
sv_start -np 4 -c 2304 --cache-every 128
URL1=$SV_URL
PID1=$SV_PID
sv_start -np 2 -c 1024 --cache-ram 4
URL2=$SV_URL
SV_URL="$URL1" SV_URL_SMALL="$URL2" TS_BIN="$TS_BIN" TS_MODEL="$TS_MODEL" ts_node --test --test-reporter=spec \
  "$TS_SERVER_TESTS/cache.cjs" || bad "cache.cjs failed (server log: $SV_LOG)"
sv_stop
SV_PID=$PID1
sv_stop
[ $fail -eq 0 ] && echo "server cache: ok"
exit $fail
