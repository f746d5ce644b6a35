#!/usr/bin/env bash
# The server's prefix cache on the CUDA backend (label cuda: needs a GPU; exits 77, "skipped",
# without one). Two `serve --backend cuda` on the demo model (converted as the server tests do), 2
# slots each, prompts evaluated in chunks of 64 tokens:
#   A  the cache on, a snapshot every 64 prompt tokens (chunks end there, as they do in B);
#   B  the cache off (--no-cache-prompt): the cold reference.
# Checks, greedy (temperature 0) with log-probabilities:
#   - a prompt of 300 tokens sent twice to A: the second has cached_tokens ≥ 90 % of its prompt
#     (restored whole, into the other slot: the least recently used one takes a restore) and the
#     same text and log-probabilities as the first, which equals B's answer;
#   - a prompt sharing 200 tokens with one A answered before, then diverging: A restores the
#     snapshot at 192 (the last multiple of 64 inside the shared part) and answers as B does;
#   - the cache's metrics (hits, entries, bytes within --cache-ram), and both servers end with
#     status 0 on SIGTERM.
# The snapshots are copies of the sequences' regions in host memory; equal answers mean that a
# snapshot holds the whole state (GDN, QSA K/V and indexer keys, PLE) and a restore puts it back.
set -uo pipefail
"$TS_BIN" devices 2>/dev/null | grep -q "^  0: " || { echo "skipped: no CUDA device"; exit 77; }
source "$(dirname "$0")/../server/lib.sh"

common=(--backend cuda -np 2 -c 1024 -ub 64 --quiet)
sv_start "${common[@]}" --cache-every 64 --cache-ram 64
URL_A=$SV_URL
PID_A=$SV_PID
sv_start "${common[@]}" --no-cache-prompt
URL_B=$SV_URL
PID_B=$SV_PID

timeout -k 5 120 "$PY" - "$URL_A" "$URL_B" "$TS_BIN" "$TS_MODEL" <<'PY' || bad "the cache checks failed (server logs under $TS_TMP)"
import json, math, re, subprocess, sys, urllib.request

url_a, url_b, ts_bin, model = sys.argv[1:5]
failed = []


def check(ok, what):
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failed.append(what)


def tokens(text):
    out = subprocess.run([ts_bin, "tokenize", "-m", model, "-p", text], check=True, capture_output=True, text=True)
    return [int(t) for t in out.stdout.split()]


def ask(url, prompt):
    body = {"model": "demo.gguf", "prompt": prompt, "max_tokens": 16, "temperature": 0, "logprobs": 1,
            "ignore_eos": True}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        reply = json.load(r)
    c = reply["choices"][0]
    return c["text"], c["logprobs"]["token_logprobs"], reply["usage"]


def metric(url, name):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        m = re.search(r"^%s (\S+)$" % name, r.read().decode(), re.M)
    return float(m.group(1)) if m else float("nan")


def same(a, b):
    """Text and log-probabilities equal; the largest log-probability difference otherwise."""
    if a[0] == b[0] and a[1] == b[1]:
        return True, "equal"
    d = max((abs(x - y) for x, y in zip(a[1], b[1])), default=float("nan"))
    return False, f"{a[0]!r} vs {b[0]!r}, log-probabilities differ by up to {d:.3g}"


text = "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, " * 40
base = tokens(text)
assert len(base) >= 300, f"{len(base)} tokens"

# an identical prompt: restored whole, logits included
P = base[:300]
P[0] = 7  # unlike the other prompt
first = ask(url_a, P)
second = ask(url_a, P)
cold = ask(url_b, P)
check(first[2]["prompt_tokens_details"]["cached_tokens"] == 0, f"the first request is cold: {first[2]}")
n = second[2]["prompt_tokens"]
check(second[2]["prompt_tokens_details"]["cached_tokens"] >= 0.9 * n, f"the second restores ≥ 90 % of {n}: {second[2]}")
ok, why = same(second, first)
check(ok, f"the cached answer equals the first one: {why}")
ok, why = same(first, cold)
check(ok, f"the first answer equals the cache-off server's: {why}")

# a shared prefix of 200 tokens, then two different questions
S = base[:200]
S[0] = 11
Q1, Q2 = tokens(" Question one: what did Moses say?"), tokens(" Who went up the mountain on the third day?")
shared = next(i for i, (x, y) in enumerate(zip(S + Q1, S + Q2)) if x != y)
assert 192 <= shared < 256, f"the prompts share {shared} tokens where 192 to 255 were meant"
ask(url_a, S + Q1)
warm = ask(url_a, S + Q2)
cold = ask(url_b, S + Q2)
check(warm[2]["prompt_tokens_details"]["cached_tokens"] == 192, f"the diverging prompt restores 192 tokens: {warm[2]}")
check(cold[2]["prompt_tokens_details"]["cached_tokens"] == 0, f"the cache-off server evaluates it whole: {cold[2]}")
ok, why = same(warm, cold)
check(ok, f"the diverging prompt's answer equals the cache-off server's: {why}")

hits = metric(url_a, "turbospark_prefix_cache_hits_total")
entries = metric(url_a, "turbospark_prefix_cache_entries")
size = metric(url_a, "turbospark_prefix_cache_bytes")
check(hits == 2, f"two cache hits ({hits})")
check(entries >= 4, f"the snapshots are kept ({entries} entries)")
check(0 < size <= 64 << 20, f"the cache holds {size / 1048576:.2f} MiB of host memory, within --cache-ram 64")
hits_b = metric(url_b, "turbospark_prefix_cache_hits_total")
check(math.isnan(hits_b) or hits_b == 0, f"no hits without the cache ({hits_b})")
sys.exit(1 if failed else 0)
PY

SV_PID=$PID_B
sv_stop
SV_PID=$PID_A
sv_stop
[ $fail -eq 0 ] && echo "serve cache on CUDA: ok"
exit $fail
