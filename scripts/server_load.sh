#!/usr/bin/env bash
# The server under load in one command: starts `turbospark serve` on MODEL with one slot per client,
# waits for /health, runs tools/load_test.py (CLIENTS concurrent streaming greedy requests, each
# compared with the same request sent alone, then the leak check), stops the server (SIGTERM: it must
# exit 0), runs `bench -b CLIENTS` on the same model (CLIENTS sequences holding the load test's mean
# prompt length, decoding up to 64 tokens each) and prints both figures and their ratio, then the same
# against bench --all-logits (every sequence's logits a step, as the server's steps ask).
#
#   scripts/server_load.sh MODEL [--backend cpu|cuda] [--clients 64] [--max-tokens 128]
#                                [--random-weights] [--tol T] [--min-ratio R] [--out DIR]
#   TS_BIN   the turbospark binary (default build/turbospark)
#   --min-ratio R   fail when the server's aggregate tokens/s is below R x bench's (default: report only)
#   --out DIR       where serve.log, report.json (load_test.py's), bench.json and summary.txt go
#                   (default $OUT/server_load when OUT is set, else a new folder under /tmp)
# Exit status 0 when the load test passed (every answer equal to alone, no leak), the server stopped
# cleanly, bench ran and the ratio is at least --min-ratio; 1 otherwise; 2 on bad usage.
#
# On the H200 with the device bundle (scripts/device_bundle.sh): the released shapes (random weights
# filled on the GPU) carrying the demo model's tokenizer, 64 clients, against bench -b 64:
#   tar xJf .device.tar.xz && export LD_LIBRARY_PATH=$PWD/.device/lib TS_BIN=.device/turbospark
#   $TS_BIN convert models/demo -o /tmp/demo.gguf --type bf16 --quiet
#   $TS_BIN synth --released --sparse --type q4_k_m --tokenizer-from /tmp/demo.gguf -o /tmp/rel-tok.gguf
#   bash scripts/server_load.sh /tmp/rel-tok.gguf --backend cuda --random-weights --clients 64 \
#     --max-tokens 128 --min-ratio 0.85
# (the alone phase is 64 x 128 tokens at batch-1 speed: about a minute at 130 tokens/s)
set -uo pipefail
usage() { sed -n '/^#   scripts/,/^#   TS_BIN/p' "$0" | sed 's/^# *//' >&2; exit 2; }
cd "$(dirname "$0")/.."
BIN=${TS_BIN:-build/turbospark}
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
model="" backend=cpu clients=64 max_tokens=128 random="" tol=1e-3 min_ratio="" out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) backend=${2:?}; shift 2 ;;
    --clients) clients=${2:?}; shift 2 ;;
    --max-tokens) max_tokens=${2:?}; shift 2 ;;
    --random-weights) random=--random-weights; shift ;;
    --tol) tol=${2:?}; shift 2 ;;
    --min-ratio) min_ratio=${2:?}; shift 2 ;;
    --out) out=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "server_load.sh: unknown option '$1'" >&2; usage ;;
    *) [ -z "$model" ] || { echo "server_load.sh: one MODEL only ('$model', then '$1')" >&2; exit 2; }; model=$1; shift ;;
  esac
done
[ -n "$model" ] || { echo "server_load.sh: no MODEL given" >&2; usage; }
[ -f "$model" ] || { echo "server_load.sh: $model is not a file" >&2; exit 2; }
[ -x "$BIN" ] || { echo "server_load.sh: no turbospark binary at $BIN (build it, or set TS_BIN)" >&2; exit 2; }
case "$clients$max_tokens" in *[!0-9]*|"") echo "server_load.sh: --clients and --max-tokens are numbers" >&2; exit 2 ;; esac
[ "$clients" -ge 1 ] && [ "$max_tokens" -ge 1 ] || { echo "server_load.sh: --clients and --max-tokens are at least 1" >&2; exit 2; }
if [ -z "$out" ]; then
  if [ -n "${OUT:-}" ]; then out=$OUT/server_load; else out=$(mktemp -d /tmp/server_load.XXXXXX); fi
fi
mkdir -p "$out" || exit 1

# serve: one slot per client, each with room for a prompt of up to 256 tokens and the reply
"$BIN" serve -m "$model" --backend "$backend" $random --host 127.0.0.1 --port 0 -np "$clients" \
  -c $((256 + max_tokens)) --quiet 2>"$out/serve.log" &
pid=$!
trap 'kill -KILL $pid 2>/dev/null' EXIT
port=""
for _ in $(seq 12000); do # model upload on a GPU can take minutes: up to 20 minutes
  port=$(sed -n 's/^serve: listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$out/serve.log")
  [ -n "$port" ] && break
  kill -0 $pid 2>/dev/null || { echo "server_load.sh: the server did not start:" >&2; tail -5 "$out/serve.log" >&2; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "server_load.sh: the server printed no port within 20 minutes" >&2; exit 1; }
url=http://127.0.0.1:$port
$PY - "$url" <<'PY' || { echo "server_load.sh: $url/health did not answer ok" >&2; exit 1; }
import json, sys, time, urllib.request
for _ in range(100):
    try:
        if json.load(urllib.request.urlopen(sys.argv[1] + "/health", timeout=5)).get("status") == "ok":
            sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(1)
PY
$PY tools/load_test.py --url "$url" --clients "$clients" --max-tokens "$max_tokens" --tol "$tol" \
  --report "$out/report.json" | tee "$out/summary.txt"
load_rc=${PIPESTATUS[0]}
kill -TERM $pid
wait $pid
serve_rc=$?
trap - EXIT
[ $serve_rc -eq 0 ] || echo "server_load.sh: the server exited with status $serve_rc after SIGTERM: $(tail -2 "$out/serve.log")" | tee -a "$out/summary.txt"
[ -s "$out/report.json" ] || exit 1

# bench: decode of CLIENTS sequences holding the load test's mean prompt; a step's rate is the same
# over 64 steps as over more, and fewer keep the whole run within a device call of 10 minutes
depth=$($PY -c 'import json,sys; print(max(1, round(json.load(open(sys.argv[1]))["concurrent"]["mean_prompt_tokens"])))' "$out/report.json")
n_gen=$((max_tokens < 64 ? max_tokens : 64))
"$BIN" bench -m "$model" --backend "$backend" $random -p 0 -n "$n_gen" -b "$clients" -d "$depth" -r 3 -o json \
  >"$out/bench.json" 2>"$out/bench.log"
bench_rc=$?
[ $bench_rc -eq 0 ] || { echo "server_load.sh: bench failed: $(tail -2 "$out/bench.log")" | tee -a "$out/summary.txt"; exit 1; }
# the same with every sequence's logits a step, as the server's steps ask (reported, not a condition)
"$BIN" bench -m "$model" --backend "$backend" $random -p 0 -n "$n_gen" -b "$clients" -d "$depth" -r 3 -o json \
  --all-logits >"$out/bench_all.json" 2>"$out/bench_all.log" || echo '[]' >"$out/bench_all.json"
$PY - "$out/report.json" "$out/bench.json" "${min_ratio:-0}" "$clients" "$out/bench_all.json" <<'PY' | tee -a "$out/summary.txt"
import json, sys
r, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))[0]
serve, bench, want = r["concurrent"]["tokens_per_s"], b["median_ts"], float(sys.argv[3])
ratio = serve / bench if bench > 0 else 0
every = json.load(open(sys.argv[5]))
print(f"server: {serve:,.1f} tokens/s aggregate at {sys.argv[4]} clients; bench -b {b['n_batch']} "
      f"(-n {b['n_gen']}, depth {b['n_depth']}): {bench:,.1f} tokens/s; ratio {ratio:.3f}"
      + (f" (at least {want} wanted: {'ok' if ratio >= want else 'BELOW'})" if want > 0 else "")
      + (f"; with every sequence's logits (--all-logits) {every[0]['median_ts']:,.1f}, ratio "
         f"{serve / every[0]['median_ts']:.3f}" if every and every[0]["median_ts"] > 0 else ""))
sys.exit(0 if ratio >= want else 1)
PY
ratio_rc=${PIPESTATUS[0]}
echo "server_load.sh: files in $out"
[ $load_rc -eq 0 ] && [ $serve_rc -eq 0 ] && [ $ratio_rc -eq 0 ]
