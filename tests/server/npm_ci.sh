#!/usr/bin/env bash
# Installs the pinned OpenAI client (tests/server/package-lock.json) into DIR/node_modules with
# `npm ci`, unless DIR already holds the install of this exact lock file. ctest runs it once, as
# the fixture of the server tests, into the build tree (the source tree stays clean).
set -euo pipefail
src="$(cd "$(dirname "$0")" && pwd)"
dir="${1:?usage: npm_ci.sh DIR}"
mkdir -p "$dir"
if cmp -s "$src/package-lock.json" "$dir/package-lock.json" && [ -f "$dir/node_modules/openai/package.json" ]; then
  echo "npm_ci: the pinned openai client is already installed in $dir"
  exit 0
fi
for tool in node npm; do
  command -v $tool >/dev/null || { echo "FAIL: '$tool' is missing (scripts/install-deps.sh test installs nodejs and npm)"; exit 1; }
done
cp "$src/package.json" "$src/package-lock.json" "$dir/"
cd "$dir"
timeout 300 npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
echo "npm_ci: installed openai $(node -p "require('./node_modules/openai/package.json').version") into $dir"
