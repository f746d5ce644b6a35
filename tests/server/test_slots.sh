#!/usr/bin/env bash
# llama-server-style slot persistence (serve --slot-save-path; demo model, CPU): slots.cjs against
#   A  the directory, 2 slots, the prefix cache off (a reused prefix can only come from a slot)
#   B  the same directory, 1 slot, the prefix cache on: restores what A saved (another process)
#   C  no --slot-save-path (slot actions refused with 501)
#   E  the same directory, a context of 128 tokens (a saved slot too long for it)
#   F  another model (synth --tiny with the demo's tokenizer) and the same directory (a foreign file)
source "$(dirname "$0")/lib.sh"
DIR="$TS_TMP/slots"
rm -rf "$DIR" && mkdir -p "$DIR"
TINY="$TS_TMP/tiny.gguf"
"$TS_BIN" synth --tiny --tokenizer-from "$TS_MODEL" -o "$TINY" >/dev/null 2>&1 || { echo "FAIL: synth --tiny"; exit 1; }
URLS=() PIDS=()
start() { sv_start "$@"; URLS+=("$SV_URL"); PIDS+=("$SV_PID"); }
start -np 2 -c 1024 --cache-ram 0 --slot-save-path "$DIR"
start -np 1 -c 1024 --slot-save-path "$DIR"
start -np 1 -c 1024
start -np 1 -c 128 --slot-save-path "$DIR"
DEMO=$TS_MODEL
TS_MODEL=$TINY
start -np 1 -c 256 --slot-save-path "$DIR"
TS_MODEL=$DEMO
# a server must refuse a --slot-save-path that is not a writable directory, at startup
if timeout -k 5 20 "$TS_BIN" serve -m "$TS_MODEL" --port 0 --slot-save-path "$DIR/none" >/dev/null 2>"$TS_TMP/bad.log"; then
  bad "serve started with a --slot-save-path that does not exist"
fi
grep -q "slot-save-path .* is not a directory" "$TS_TMP/bad.log" || bad "no clear error for a missing --slot-save-path: $(cat "$TS_TMP/bad.log")"
SV_A=${URLS[0]} SV_B=${URLS[1]} SV_C=${URLS[2]} SV_E=${URLS[3]} SV_F=${URLS[4]} SLOT_DIR="$DIR" \
  TS_BIN="$TS_BIN" TS_MODEL="$TS_MODEL" ts_node --test --test-reporter=spec "$TS_SERVER_TESTS/slots.cjs" ||
  bad "slots.cjs failed (server logs: $TS_TMP/serve.*.log)"
for p in "${PIDS[@]}"; do SV_PID=$p; sv_stop; done
[ $fail -eq 0 ] && echo "server slots: ok"
exit $fail
