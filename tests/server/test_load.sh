#!/usr/bin/env bash
# A bounded load on loopback (load.cjs): a warm-up, then two identical rounds of COUNT streamed
# requests CONC at a time. Reports throughput, latency and time-to-first-token percentiles, the
# server's own tokens/s (/metrics) and its RSS before and after each round; the RSS must not grow
# from round to round (nothing leaks per request). Figures go to stdout and $TS_TMP/load.txt.
source "$(dirname "$0")/lib.sh"
COUNT=${LOAD_COUNT:-64}
CONC=${LOAD_CONC:-8}
MAX_TOKENS=${LOAD_MAX_TOKENS:-64}
# --cache-ram 0: the prefix cache grows by design up to its budget, which would hide a leak here
# (its budget is checked by test_cache.sh)
sv_start -np 8 -c 1024 --quiet --cache-ram 0
report="$TS_TMP/load.txt"
: >"$report"
round() { # round NAME COUNT
  local rss0 rss1 out
  rss0=$(sv_rss_kib)
  out=$(SV_URL="$SV_URL" COUNT=$2 CONC=$CONC MAX_TOKENS=$MAX_TOKENS TIME_LIMIT_S=80 NODE_TIMEOUT=90 ts_node "$TS_SERVER_TESTS/load.cjs") \
    || bad "load round '$1' failed: $out"
  rss1=$(sv_rss_kib)
  echo "$1: $out" | tee -a "$report"
  echo "$1: server RSS ${rss0} KiB before, ${rss1} KiB after" | tee -a "$report"
  LAST_RSS=$rss1
}
round warmup 16
r0=$LAST_RSS
round round1 "$COUNT"
r1=$LAST_RSS
round round2 "$COUNT"
r2=$LAST_RSS
m=$(curl -s -m 10 "$SV_URL/metrics")
echo "server: $(echo "$m" | grep -E '^turbospark_(generation_tokens_total|prompt_tokens_total|batch_steps_total|batch_sequences_total|busy_seconds_total) ' | tr '\n' ' ')" | tee -a "$report"
# RSS: round 2 may not end above round 1 by more than 4 MiB (allocator noise), nor round 1 above the
# warm-up by more than 16 MiB (first use of the slots' pages, thread stacks). Not in the sanitizer
# build: ASan keeps freed memory in quarantine (RSS grows with every allocation, leak or not); there
# LeakSanitizer checks at the server's exit, and sv_stop fails on its non-zero status.
if [ "${TS_SANITIZE:-0}" = 1 ]; then
  echo "(sanitizer build: RSS bounds not checked; LeakSanitizer checks the exit)"
else
  [ $((r2 - r1)) -le 4096 ] || bad "the server's RSS grew from ${r1} to ${r2} KiB between two identical rounds"
  [ $((r1 - r0)) -le 16384 ] || bad "the server's RSS grew from ${r0} to ${r1} KiB after the warm-up"
fi
sv_stop
[ $fail -eq 0 ] && echo "server load: ok"
exit $fail
