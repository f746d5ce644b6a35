#!/usr/bin/env bash
# Continuous batching gives every greedy client the answer it gets alone (concurrency.cjs), with
# fewer slots than clients (queueing, small prefill chunks) and with as many slots as clients.
source "$(dirname "$0")/lib.sh"
for opts in "-np 4 -ub 32 -b 64" "-np 8 -ub 256 -b 512"; do
  # shellcheck disable=SC2086
  sv_start $opts -c 2048
  SV_URL="$SV_URL" ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/concurrency.cjs" || bad "concurrency.cjs failed with $opts (log: $SV_LOG)"
  sv_stop
done
[ $fail -eq 0 ] && echo "server concurrency: ok"
exit $fail
