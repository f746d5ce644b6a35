#!/usr/bin/env bash
# serve --cache-gpu (the prefix cache's GPU tier, tests/cuda/serve_cache_cuda.sh runs it) on a
# machine without a GPU: every misuse stops serve with status 2 and a sentence naming the flag
# before anything loads (the CPU backend, by default or named; a value that is not a number of MiB;
# the cache turned off by --cache-ram 0 or --no-cache-prompt), and --cache-gpu 0 on the CPU backend
# serves with the per-tier metrics present: host entries after a request, nothing on the GPU.
source "$(dirname "$0")/lib.sh"

# refused EXPECTED_TEXT ARGS...: serve exits with status 2 and says EXPECTED_TEXT on stderr.
refused() {
  local want=$1
  shift
  local out rc
  out=$(timeout -k 5 30 "$TS_BIN" serve -m "$TS_MODEL" --port 0 "$@" 2>&1)
  rc=$?
  [ $rc -eq 2 ] || bad "serve $* exited with status $rc, not 2: $out"
  grep -qF -- "$want" <<<"$out" || bad "serve $* did not say '$want': $out"
}

refused "--cache-gpu needs --backend cuda" --cache-gpu 64
refused "--cache-gpu needs --backend cuda" --backend cpu --cache-gpu 1
refused "'--cache-gpu abc' is not a valid value" --backend cuda --cache-gpu abc
refused "'--cache-gpu -1' is not a valid value" --backend cuda --cache-gpu -1
refused "'--cache-gpu 2.5' is not a valid value" --backend cuda --cache-gpu 2.5
refused "'--cache-gpu 16777217' is not a valid value" --backend cuda --cache-gpu 16777217
refused "--cache-gpu needs the prefix cache on" --backend cuda --cache-gpu 8 --cache-ram 0
refused "--cache-gpu needs the prefix cache on" --backend cuda --cache-gpu 8 --no-cache-prompt

sv_start -np 1 -c 256 --quiet --cache-gpu 0
curl -s -m 60 -H "Content-Type: application/json" \
  -d '{"prompt": "In the beginning", "max_tokens": 4, "temperature": 0}' "$SV_URL/v1/completions" >/dev/null ||
  bad "a completion with --cache-gpu 0"
"$PY" - "$SV_URL" <<'PYEOF' || bad "the per-tier metrics"
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1] + "/metrics", timeout=10).read().decode()
def value(name, tier=None):
    label = re.escape('{tier="%s"}' % tier) if tier else ""
    m = re.search(r"^%s%s (\S+)$" % (name, label), text, re.M)
    assert m, f"no {name} {tier or ''} in /metrics"
    return float(m.group(1))
entries = value("turbospark_prefix_cache_entries")
assert entries >= 1, f"{entries} entries after a request"
assert value("turbospark_prefix_cache_tier_entries", "host") == entries
assert value("turbospark_prefix_cache_tier_entries", "gpu") == 0
assert value("turbospark_prefix_cache_tier_bytes", "gpu") == 0
assert value("turbospark_prefix_cache_tier_bytes", "host") == value("turbospark_prefix_cache_bytes") > 0
assert value("turbospark_prefix_cache_spills_total") == 0
assert value("turbospark_prefix_cache_tier_hits_total", "gpu") == value("turbospark_prefix_cache_tier_hits_total", "host") == 0
print("ok: the per-tier metrics")
PYEOF
sv_stop
[ $fail -eq 0 ] && echo "serve --cache-gpu arguments: ok"
exit $fail
