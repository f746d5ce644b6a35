#!/usr/bin/env bash
# The C, CUDA and header files are formatted with the tree's .clang-format (Debian's clang-format 14;
# `make format` applies it). Fails naming the files that differ.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v clang-format >/dev/null || { echo "FAIL: clang-format is missing (scripts/install-deps.sh test installs it)"; exit 1; }
git -C "$root" rev-parse --git-dir >/dev/null 2>&1 || { echo "skipped: $root is not a git checkout"; exit 77; }
cd "$root"
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh')
[ ${#files[@]} -gt 0 ] || { echo "FAIL: no source files found"; exit 1; }
if ! out=$(clang-format --style=file --dry-run --Werror "${files[@]}" 2>&1); then
  echo "$out" | grep -E ': (error|warning): ' | cut -d: -f1 | sort -u | sed 's/^/not formatted: /' | head -40
  echo "FAIL: run 'make format' (clang-format $(clang-format --version | grep -o '[0-9][0-9.]*' | head -1))"
  exit 1
fi
echo "${#files[@]} files formatted"
