#!/usr/bin/env bash
# Abuse on loopback (abuse.py; issue 17), every count and wait bounded: a 520-connection slow-header
# flood must not keep /health out; the head and body deadlines close tricklers that an idle timeout
# would keep; 8 concurrent 8 MiB bodies (token ids, messages, prompt text) are refused before a JSON
# tree is built, with the server's peak RSS bounded; POSTs need application/json (415), the Host
# must be this machine (403), foreign origins get no CORS and no POST (403) unless --cors says so;
# every error body echoing hostile bytes is valid UTF-8 JSON; /metrics counts every reply; and
# SIGTERM with slow connections open ends the server at once whatever --drain allows.
source "$(dirname "$0")/lib.sh"
LIMITS=(--header-timeout 2 --body-timeout 2 --max-connections 200 --quiet) # --max-parsing: 64 (default)

sv_start -np 2 -c 1024 "${LIMITS[@]}"
timeout -k 5 200 "$PY" "$TS_SERVER_TESTS/abuse.py" flood "$SV_URL" "$SV_PID" | tee "$TS_TMP/abuse.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || bad "abuse.py flood (above)"
kill -0 "$SV_PID" 2>/dev/null || bad "the server died under abuse: $(tail -5 "$SV_LOG")"
sv_stop

sv_start -np 1 -c 512 --cors http://ok.example --allow-host my.box "${LIMITS[@]}"
timeout -k 5 60 "$PY" "$TS_SERVER_TESTS/abuse.py" cors "$SV_URL" || bad "abuse.py cors (above)"
sv_stop

# shutdown: 20 connections in the middle of their request heads do not hold the server for --drain
sv_start -np 1 -c 512 --drain 60 --header-timeout 30 --quiet
timeout -k 5 30 "$PY" "$TS_SERVER_TESTS/abuse.py" hold "$SV_URL" 20 15 &
holder=$!
sleep 1.5
t0=$(date +%s%N)
sv_stop 5
echo "SIGTERM with 20 slow heads open (--drain 60): stopped in $(( ($(date +%s%N) - t0) / 1000000 )) ms" | tee -a "$TS_TMP/abuse.txt"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null

[ $fail -eq 0 ] && echo "server abuse: ok"
exit $fail
