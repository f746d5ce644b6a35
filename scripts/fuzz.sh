#!/usr/bin/env bash
# Fuzzes the GGUF reader with libFuzzer (ASan + UBSan) for SECONDS (default 60):
#   scripts/fuzz.sh [SECONDS]          (make fuzz FUZZ_SECONDS=N)
# Configures build-fuzz/ with clang and TS_FUZZ=ON, builds tests/fuzz/fuzz_gguf, and runs it over a
# scratch copy of the seed corpus (tests/fuzz/corpus/ is left as committed). Crashing inputs are
# written to fuzz-out/ (git-ignored); add each to tests/fixtures/broken/ with a MANIFEST.tsv line
# once the reader refuses it. Prints the executions reached and the coverage at the end.
# FUZZ_TARGET=api fuzzes the server's request parser (tests/fuzz/fuzz_api.c) over
# tests/fuzz/corpus_api instead.
# Env: FUZZ_JOBS (default 1: one process; N > 1 runs N workers), FUZZ_BUILD (default build-fuzz),
#      FUZZ_KEEP=1 keeps the scratch corpus (its path is printed).
set -euo pipefail
secs=${1:-60}
case "$secs" in '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS]" >&2; exit 2 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD:-$root/build-fuzz}
jobs=${FUZZ_JOBS:-1}
cc=${CC:-clang}
case "$cc" in *clang*) ;; *) cc=clang ;; esac
command -v "$cc" >/dev/null || { echo "fuzz: $cc not found (apt-get install clang)" >&2; exit 1; }

CC=$cc cmake -S "$root" -B "$build" -DTS_FUZZ=ON -DTS_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
target=${FUZZ_TARGET:-gguf}
case "$target" in gguf) seeds=corpus ;; api) seeds=corpus_api ;; *) echo "fuzz: FUZZ_TARGET is gguf or api" >&2; exit 2 ;; esac
cmake --build "$build" --target "fuzz_$target" -j "$(nproc 2>/dev/null || echo 2)"
bin="$build/tests/fuzz/fuzz_$target"

work=$(mktemp -d "${TMPDIR:-/tmp}/ts-fuzz.XXXXXX")
[ "${FUZZ_KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$root/fuzz-out"
cp "$root"/tests/fuzz/$seeds/* "$work/corpus/"
dict=()
[ "$target" = gguf ] && [ -f "$root/tests/fuzz/gguf.dict" ] && dict=(-dict="$root/tests/fuzz/gguf.dict")

echo "fuzz: $bin for ${secs}s, $jobs job(s), corpus $work/corpus, crashes to fuzz-out/"
log="$work/fuzz.log"
args=(-max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$root/fuzz-out/" -timeout=10
      -rss_limit_mb=2048 "${dict[@]}")
status=0
if [ "$jobs" -gt 1 ]; then
    (cd "$work" && "$bin" "${args[@]}" -jobs="$jobs" -workers="$jobs" "$work/corpus" >"$log" 2>&1) || status=$?
    cat "$work"/fuzz-*.log >>"$log" 2>/dev/null || true
else
    set +e
    "$bin" "${args[@]}" "$work/corpus" 2>&1 | tee "$log" | grep --line-buffered -E "INITED|DONE|ERROR|SUMMARY|Test unit|pulse"
    status=${PIPESTATUS[0]}
    set -e
fi

# Figures: total executions (summed over workers) and the last coverage line.
execs=$(grep -h "stat::number_of_executed_units" "$log" | awk '{s += $2} END {print s + 0}')
last=$(grep -hE "^#[0-9]+" "$log" | tail -1 || true)
cov=$(printf '%s\n' "$last" | grep -oE "cov: [0-9]+ ft: [0-9]+" || true)
took=$(grep -hoE "Done [0-9]+ runs in [0-9]+ second" "$log" | awk '{if ($5 > t) t = $5} END {print t + 0}')
echo "fuzz: ${execs} executions in ${took}s of ${secs}s asked (${cov:-cov unknown}); corpus now $(ls "$work/corpus" | wc -l) inputs"
if [ "$status" -ne 0 ]; then
    echo "fuzz: the fuzzer stopped with status $status; the input is in fuzz-out/:" >&2
    grep -hE "ERROR|SUMMARY|invariant|Test unit written" "$log" >&2 || true
fi
exit "$status"
