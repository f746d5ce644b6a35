# Shared helpers for the server tests in tests/server (sourced, not run).
# Env (set by tests/CMakeLists.txt): TS_BIN, TS_TMP, TS_NODE_MODULES (the pinned openai client).
# Every server a test starts listens on a free loopback port (--port 0; the port is read from its
# log) and is stopped with SIGTERM, which must end it with status 0; an EXIT trap kills any left.
set -uo pipefail
TS_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TS_SERVER_TESTS="$TS_REPO/tests/server"
mkdir -p "$TS_TMP"
# The demo GGUF is converted from the committed checkpoint (about a second; see docs/DECISIONS.md).
TS_MODEL="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$TS_REPO/models/demo" -o "$TS_MODEL" --type bf16 --quiet || { echo "FAIL: convert models/demo"; exit 1; }
fail=0
bad() { echo "FAIL: $*"; fail=1; }
SV_PIDS=()

# sv_start [serve options...]: sets SV_PID, SV_URL, SV_LOG.
sv_start() {
  SV_LOG="$TS_TMP/serve.$(date +%s%N).log"
  "$TS_BIN" serve -m "$TS_MODEL" --host 127.0.0.1 --port 0 "$@" 2>"$SV_LOG" &
  SV_PID=$!
  SV_PIDS+=("$SV_PID")
  local port=""
  for _ in $(seq 400); do
    port=$(sed -n 's/^serve: listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$SV_LOG")
    [ -n "$port" ] && break
    kill -0 "$SV_PID" 2>/dev/null || { echo "FAIL: the server did not start:"; cat "$SV_LOG"; exit 1; }
    sleep 0.05
  done
  [ -n "$port" ] || { echo "FAIL: the server printed no port within 20 s"; cat "$SV_LOG"; exit 1; }
  SV_URL="http://127.0.0.1:$port"
}

# sv_stop [seconds]: SIGTERM, then the server must exit with status 0 within the limit (default 30).
sv_stop() {
  local limit=${1:-30} pid=$SV_PID
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq $((limit * 20))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$pid" 2>/dev/null; then
    bad "the server did not exit within $limit s of SIGTERM"
    kill -KILL "$pid" 2>/dev/null
  fi
  wait "$pid"
  local rc=$?
  [ $rc -eq 0 ] || bad "the server exited with status $rc after SIGTERM: $(tail -3 "$SV_LOG")"
}

sv_cleanup() { for p in "${SV_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done; return 0; }
trap sv_cleanup EXIT

# sv_rss_kib: the server's resident set in KiB.
sv_rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$SV_PID/status"; }

# ts_node FILE [args]: node with the pinned openai client on NODE_PATH, under a time limit.
ts_node() {
  [ -f "$TS_NODE_MODULES/openai/package.json" ] || { echo "FAIL: the openai client is not installed in $TS_NODE_MODULES (the server_npm_ci test does it)"; return 1; }
  NODE_PATH="$TS_NODE_MODULES" timeout -k 5 "${NODE_TIMEOUT:-240}" node "$@"
}

# PY: Debian's python3 (starts in 30 ms; a pyenv shim takes 400).
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
