#!/usr/bin/env bash
# The server's prefix cache on the CUDA backend, both tiers (label cuda: needs a GPU; exits 77,
# "skipped", without one). Two `serve --backend cuda` on the demo model (converted as the server
# tests do), 2 slots each, prompts evaluated in chunks of 64 tokens:
#   A  the cache on, a snapshot every 64 prompt tokens (chunks end there, as they do in B), snapshots
#      kept in 3 MiB of GPU memory (--cache-gpu 3), spilled to pinned host memory past that;
#   B  the cache off (--no-cache-prompt): the cold reference.
# The demo model's snapshots take 0.45 MiB at 64 tokens to 1.02 MiB at 315 (fp32 K/V and indexer
# keys of 2 attention layers up to the position, 4 GDN states whole), so A's GPU tier holds the
# last two or three of them and every request spills older ones. Checks, greedy (temperature 0)
# with log-probabilities:
#   - a prompt P of 300 tokens sent twice to A: the second has cached_tokens ≥ 90 % of its prompt,
#     restored whole from the GPU tier (its snapshot and the reply's are the newest, 2 MiB), into
#     the other slot, with the same text and log-probabilities as the first, which equals B's;
#   - a prompt sharing 200 tokens with one A answered before, then diverging, sent after another
#     prompt of 300 tokens has filled the GPU tier: A restores the snapshot at 192 (the last multiple
#     of 64 inside the shared part) from pinned host memory and answers as B does;
#   - P once more: restored whole from pinned host memory, the same answer;
#   - the metrics: hits by tier (1 from the GPU, 2 from host memory), spills, bytes and entries by
#     tier (GPU bytes within --cache-gpu, host bytes within --cache-ram and equal to
#     turbospark_prefix_cache_bytes, the tiers' entries adding up), and both servers end with status
#     0 on SIGTERM.
# Equal answers mean that a snapshot holds the whole state (GDN, QSA K/V and indexer keys, PLE) and a
# restore puts it back, from either tier.
set -uo pipefail
"$TS_BIN" devices 2>/dev/null | grep -q "^  0: " || { echo "skipped: no CUDA device"; exit 77; }
source "$(dirname "$0")/../server/lib.sh"

common=(--backend cuda -np 2 -c 1024 -ub 64 --quiet)
sv_start "${common[@]}" --cache-every 64 --cache-ram 64 --cache-gpu 3
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


def metric(url, name, tier=None):
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        label = re.escape('{tier="%s"}' % tier) if tier else ""
        m = re.search(r"^%s%s (\S+)$" % (name, label), r.read().decode(), re.M)
    return float(m.group(1)) if m else float("nan")


def tier_hits(url):
    return {t: metric(url, "turbospark_prefix_cache_tier_hits_total", t) for t in ("gpu", "host")}


def same(a, b):
    """Text and log-probabilities equal; the largest log-probability difference otherwise."""
    if a[0] == b[0] and a[1] == b[1]:
        return True, "equal"
    d = max((abs(x - y) for x, y in zip(a[1], b[1])), default=float("nan"))
    return False, f"{a[0]!r} vs {b[0]!r}, log-probabilities differ by up to {d:.3g}"


text = "And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, " * 40
base = tokens(text)
assert len(base) >= 300, f"{len(base)} tokens"

# an identical prompt: restored whole, logits included, from the GPU tier
P = base[:300]
P[0] = 7  # unlike the other prompts
first = ask(url_a, P)
h0 = tier_hits(url_a)
second = ask(url_a, P)
h1 = tier_hits(url_a)
cold = ask(url_b, P)
check(first[2]["prompt_tokens_details"]["cached_tokens"] == 0, f"the first request is cold: {first[2]}")
n = second[2]["prompt_tokens"]
check(second[2]["prompt_tokens_details"]["cached_tokens"] >= 0.9 * n, f"the second restores ≥ 90 % of {n}: {second[2]}")
check(h1["gpu"] - h0["gpu"] == 1 and h1["host"] == h0["host"], f"the second is restored from GPU memory: hits {h0} then {h1}")
ok, why = same(second, first)
check(ok, f"the answer restored from GPU memory equals the first one: {why}")
ok, why = same(first, cold)
check(ok, f"the first answer equals the cache-off server's: {why}")
check(metric(url_a, "turbospark_prefix_cache_spills_total") >= 1, "the first prompt's snapshots spilled past 3 MiB")

# a shared prefix of 200 tokens, then two different questions, another long prompt in between
S = base[:200]
S[0] = 11
Q1, Q2 = tokens(" Question one: what did Moses say?"), tokens(" Who went up the mountain on the third day?")
shared = next(i for i, (x, y) in enumerate(zip(S + Q1, S + Q2)) if x != y)
assert 192 <= shared < 256, f"the prompts share {shared} tokens where 192 to 255 were meant"
ask(url_a, S + Q1)
P3 = base[:300]
P3[0] = 13
spills = metric(url_a, "turbospark_prefix_cache_spills_total")
ask(url_a, P3)  # 4.7 MiB of snapshots: the GPU tier's older ones, S + Q1's included, move to host memory
check(metric(url_a, "turbospark_prefix_cache_spills_total") >= spills + 4, "another long prompt spills the older snapshots")
h2 = tier_hits(url_a)
warm = ask(url_a, S + Q2)
h3 = tier_hits(url_a)
cold = ask(url_b, S + Q2)
check(warm[2]["prompt_tokens_details"]["cached_tokens"] == 192, f"the diverging prompt restores 192 tokens: {warm[2]}")
check(h3["host"] - h2["host"] == 1 and h3["gpu"] == h2["gpu"], f"from pinned host memory: hits {h2} then {h3}")
check(cold[2]["prompt_tokens_details"]["cached_tokens"] == 0, f"the cache-off server evaluates it whole: {cold[2]}")
ok, why = same(warm, cold)
check(ok, f"the diverging prompt's answer (restored from host memory) equals the cache-off server's: {why}")

# P again: its snapshot was spilled meanwhile; restored whole from pinned host memory
h4 = tier_hits(url_a)
third = ask(url_a, P)
h5 = tier_hits(url_a)
check(third[2]["prompt_tokens_details"]["cached_tokens"] >= 0.9 * n, f"P restored again: {third[2]}")
check(h5["host"] - h4["host"] == 1, f"P restored from pinned host memory: hits {h4} then {h5}")
ok, why = same(third, first)
check(ok, f"the answer restored from host memory equals the first one: {why}")

hits = metric(url_a, "turbospark_prefix_cache_hits_total")
entries = metric(url_a, "turbospark_prefix_cache_entries")
size = metric(url_a, "turbospark_prefix_cache_bytes")
gpu_b, host_b = (metric(url_a, "turbospark_prefix_cache_tier_bytes", t) for t in ("gpu", "host"))
gpu_n, host_n = (metric(url_a, "turbospark_prefix_cache_tier_entries", t) for t in ("gpu", "host"))
check(hits == 3 and h5 == {"gpu": 1, "host": 2}, f"three cache hits ({hits}), by tier {h5}")
check(entries >= 12, f"the snapshots are kept ({entries} entries)")
check(gpu_n >= 2 and host_n >= 8 and gpu_n + host_n == entries, f"entries by tier: gpu {gpu_n}, host {host_n}, {entries} in all")
check(1 << 20 <= gpu_b <= 3 << 20, f"the GPU tier holds {gpu_b / 1048576:.2f} MiB, within --cache-gpu 3")
check(size == host_b and 4 << 20 < size <= 64 << 20, f"the host tier holds {size / 1048576:.2f} MiB ({host_b}), within --cache-ram 64")
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
