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

[ "$fail" -eq 0 ] && echo "ok: $n broken files refused cleanly; sample.gguf accepted"
exit "$fail"
