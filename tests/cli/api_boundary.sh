#!/usr/bin/env bash
# The server and the commands that run the model (run, chat, serve, bench, perplexity, logits,
# generate, tokenize) live on the public API alone: every #include of theirs that names a header of
# this repository is include/turbospark.h or a header of the file's own folder. One exception:
# cli/serve.c starts the server through its entry header, server/server.h (which holds to the same
# rule). The file tools (convert, quantize, inspect, synth, devices, plan) may use the internal modules.
set -uo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
files=(src/server/*.c src/server/*.h
       src/cli/run.c src/cli/serve.c src/cli/bench.c src/cli/perplexity.c src/cli/logits.c src/cli/tokenize.c
       src/cli/main.c src/cli/args.c src/cli/backend.c src/cli/npy.c src/cli/cli.h src/cli/args.h src/cli/npy.h)
fail=0 n=0
for f in "${files[@]}"; do
  [ -f "$f" ] || { echo "FAIL: $f is gone: update the list in $0"; fail=1; continue; }
  own=$(basename "$(dirname "$f")")
  # quoted and angled includes alike (the build puts src/ and include/ on the include path)
  while IFS= read -r line; do
    inc=$(sed -E 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]([^>"]+)[>"].*/\1/' <<<"$line")
    [ -e "src/$inc" ] || [ -e "include/$inc" ] || continue # a system header
    n=$((n + 1))
    case "$inc" in
      turbospark.h | "$own"/*) ;;
      server/server.h) [ "$f" = src/cli/serve.c ] || { echo "FAIL: $f includes $inc"; fail=1; } ;;
      *) echo "FAIL: $f includes the internal header $inc (use include/turbospark.h)"; fail=1 ;;
    esac
  done < <(grep -E '^[[:space:]]*#[[:space:]]*include' "$f")
done
[ $n -gt 20 ] || { echo "FAIL: only $n includes of this repository found: is the pattern still right?"; fail=1; }
[ $fail -eq 0 ] && echo "api_boundary: ok (${#files[@]} files, $n includes of this repository)"
exit $fail
