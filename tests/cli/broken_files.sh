#!/usr/bin/env bash
# Every file in tests/fixtures/broken/ must be refused by `turbospark inspect` cleanly: exit status
# exactly 1, one non-empty line on stderr that contains the substring MANIFEST.tsv gives for it, no
# sanitizer report, no hang. Every broken .gguf must be listed in the manifest (and every listed
# file must exist). The valid sample must be accepted and summarized.
# Env (set by tests/CMakeLists.txt): TS_BIN, TS_FIXTURES, TS_TMP.
set -uo pipefail
: "${TS_BIN:?}" "${TS_FIXTURES:?}" "${TS_TMP:?}"
mkdir -p "$TS_TMP"
dir="$TS_FIXTURES/broken"
manifest="$dir/MANIFEST.tsv"
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }
run() { # run ARGS...: stdout to $TS_TMP/out, stderr to $TS_TMP/err, status in $rc
    timeout 20 "$@" >"$TS_TMP/out" 2>"$TS_TMP/err"
    rc=$?
}

[ -f "$manifest" ] || { echo "FAIL: $manifest is missing" >&2; exit 1; }

# Every broken file is in the manifest.
declare -A listed=()
while IFS=$'\t' read -r name expect; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    listed[$name]=1
done <"$manifest"
for f in "$dir"/*.gguf; do
    [ -e "$f" ] || continue
    [ -n "${listed[$(basename "$f")]+x}" ] || bad "$(basename "$f") is not listed in MANIFEST.tsv"
done

n=0
while IFS=$'\t' read -r name expect; do
    [[ -z "$name" || "$name" == \#* ]] && continue
    n=$((n + 1))
    f="$dir/$name"
    [ -f "$f" ] || { bad "$name is listed in MANIFEST.tsv but missing"; continue; }
    [ -n "$expect" ] || { bad "$name has no expected substring in MANIFEST.tsv"; continue; }
    run "$TS_BIN" inspect "$f"
    err=$(cat "$TS_TMP/err")
    lines=$(wc -l <"$TS_TMP/err")
    if [ "$rc" -eq 124 ]; then bad "$name: inspect hung (killed after 20 s)"; continue; fi
    [ "$rc" -eq 1 ] || bad "$name: exit status $rc, expected 1 (stderr: $err)"
    grep -q -e "AddressSanitizer" -e "runtime error" -e "LeakSanitizer" "$TS_TMP/err" "$TS_TMP/out" &&
        bad "$name: sanitizer report: $err"
    [ -n "$err" ] || bad "$name: stderr is empty"
    [ "$lines" -eq 1 ] || bad "$name: stderr has $lines lines, expected one sentence: $err"
    [[ "$err" == *"$expect"* ]] || bad "$name: stderr does not contain '$expect': $err"
done <"$manifest"
[ "$n" -gt 0 ] || bad "MANIFEST.tsv lists no files"

# The valid sample is accepted and summarized.
sample="$TS_FIXTURES/gguf/sample.gguf"
run "$TS_BIN" inspect "$sample"
[ "$rc" -eq 0 ] || bad "sample.gguf: exit status $rc, expected 0 (stderr: $(cat "$TS_TMP/err"))"
grep -q -e "AddressSanitizer" -e "runtime error" "$TS_TMP/err" && bad "sample.gguf: sanitizer report"
grep -Eq '^architecture +qwen4exp$' "$TS_TMP/out" || bad "sample.gguf: output does not name the architecture qwen4exp"
grep -Eq '^tensors +8,' "$TS_TMP/out" || bad "sample.gguf: output does not give the tensor count 8"

# Edited copies of the demo model (tests/cli/gguf_edit.py: a few bytes changed in place, as a careless
# or hostile editor would): refused by `run` with exit status 1 and one sentence, before anything
# sized by the edited value is allocated. Until issue 17 the block_count edit made the loader
# allocate 16 GB and run for 40 s; it must now take well under 2 s and 200 MB.
repo="$(cd "$(dirname "$0")/../.." && pwd)"
PY=python3
[ -x /usr/bin/python3 ] && PY=/usr/bin/python3
demo="$TS_TMP/demo.gguf"
"$TS_BIN" convert "$repo/models/demo" -o "$demo" --type bf16 --quiet || bad "convert models/demo"
m=0
edited() { # edited NAME 'EXPECTED SUBSTRING' EDIT...: the edited copy is refused by run with that sentence
    local name=$1 expect=$2
    shift 2
    m=$((m + 1))
    "$PY" "$repo/tests/cli/gguf_edit.py" "$demo" "$TS_TMP/$name.gguf" "$@" || { bad "$name: gguf_edit.py failed"; return; }
    run "$TS_BIN" run -m "$TS_TMP/$name.gguf" -p "And it came to pass" -n 2
    local err
    err=$(grep -v '^run: loaded' "$TS_TMP/err" | grep -v '^$')
    [ "$rc" -eq 1 ] || bad "$name: exit status $rc, expected 1 (stderr: $err)"
    [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || bad "$name: expected one sentence on stderr: $err"
    [[ "$err" == *"$expect"* ]] || bad "$name: stderr does not contain '$expect': $err"
}
a=qwen4exp
edited block_count_max "'$a.block_count' is 4294967295, expected 1 to 1024" u32:$a.block_count=4294967295
edited block_count_1000 "block_count is 1000, but the file holds" u32:$a.block_count=1000
edited context_length_max "'$a.context_length' is 4294967295" u32:$a.context_length=4294967295
edited experts_max "'$a.expert_count' is 4000000000" u32:$a.expert_count=4000000000
edited eps_inf "layer_norm_rms_epsilon is inf, expected a finite value" f32:$a.attention.layer_norm_rms_epsilon=inf
edited eps_nan "layer_norm_rms_epsilon is nan" f32:$a.attention.layer_norm_rms_epsilon=nan
edited eps_0 "layer_norm_rms_epsilon is 0" f32:$a.attention.layer_norm_rms_epsilon=0
edited rope_inf "rope.freq_base is inf" f32:$a.rope.freq_base=inf
edited rope_nan "rope.freq_base is nan" f32:$a.rope.freq_base=nan
edited norm_f16 "'blk.0.ssm_norm.weight' (f16, 128 bytes) is followed by 128 unused bytes" type:blk.0.ssm_norm.weight=1
edited hc_norm_bf16 "'blk.3.hc_ffn_norm.weight' (bf16, 2048 bytes) is followed by 2048 unused bytes" type:blk.3.hc_ffn_norm.weight=30
edited ssm_a_f16 "'blk.0.ssm_a' has type f16, which turbospark cannot use there (it must be f32)" type:blk.0.ssm_a=1
edited name_5000 "has a name of 5000 bytes" "rename:blk.0.ssm_a=$(head -c 5000 /dev/zero | tr '\0' n)"
# NaN weights load (nothing in the header is wrong) but the logits are refused, never sampled; the
# debug switch names the layer where the first NaN appears.
edited nan_weights "the logits at position 4 hold NaN" fill:blk.1.hc_ffn_norm.weight=nan
TURBOSPARK_CHECK_FINITE=1 timeout 20 "$TS_BIN" run -m "$TS_TMP/nan_weights.gguf" -p "And it came to pass" -n 2 \
    >/dev/null 2>"$TS_TMP/err"
grep -q "first appears in layer 1, after its MoE block" "$TS_TMP/err" || bad "TURBOSPARK_CHECK_FINITE: $(cat "$TS_TMP/err")"
# ... and in the server's batched steps (ts_batch_eval checks every entry's row): two requests at once
# both end with the engine's sentence, and the server stops cleanly
"$TS_BIN" serve -m "$TS_TMP/nan_weights.gguf" --host 127.0.0.1 --port 0 -np 2 -c 64 2>"$TS_TMP/nan_serve.log" &
nan_pid=$!
"$PY" - "$TS_TMP/nan_serve.log" <<'EOF2' >"$TS_TMP/nan_serve.out" 2>&1 || bad "serve with NaN weights: $(cat "$TS_TMP/nan_serve.out")"
import json, re, sys, threading, time, urllib.error, urllib.request
port = None
for _ in range(400):
    m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(sys.argv[1]).read())
    if m:
        port = m.group(1)
        break
    time.sleep(0.05)
if not port:
    sys.exit("no port in the log")
out = [None, None]
def ask(i):
    body = json.dumps({"prompt": "And it came to pass %d" % i, "max_tokens": 2, "temperature": 0}).encode()
    req = urllib.request.Request("http://127.0.0.1:%s/v1/completions" % port, body, {"Content-Type": "application/json"})
    try:
        out[i] = (200, urllib.request.urlopen(req, timeout=30).read().decode())
    except urllib.error.HTTPError as e:
        out[i] = (e.code, e.read().decode())
ts = [threading.Thread(target=ask, args=(i,)) for i in range(2)]
for t in ts: t.start()
for t in ts: t.join()
for code, text in out:
    if code == 200 or "hold NaN" not in text:
        sys.exit("expected an error naming NaN logits, got %s %s" % (code, text[:300]))
EOF2
kill -TERM $nan_pid 2>/dev/null
wait $nan_pid || bad "serve with NaN weights exited with status $? after SIGTERM: $(tail -3 "$TS_TMP/nan_serve.log")"
# the block_count edit: time and peak memory of the refusal
"$PY" - "$TS_BIN" "$TS_TMP/block_count_max.gguf" <<'EOF2' >"$TS_TMP/cost" || bad "block_count refusal: $(cat "$TS_TMP/cost")"
import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run([sys.argv[1], "inspect", sys.argv[2]], capture_output=True)
dt = time.monotonic() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB
print("block_count edit refused by inspect in %.3f s, peak RSS %d KiB" % (dt, rss))
sys.exit(0 if dt < 2 and rss < 200 * 1024 and b"does NOT bind" in r.stdout else 1)
EOF2
cat "$TS_TMP/cost"

[ "$fail" -eq 0 ] && echo "ok: $n broken files and $m edited models refused cleanly; sample.gguf accepted"
exit "$fail"
