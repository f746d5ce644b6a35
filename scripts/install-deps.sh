#!/usr/bin/env bash
# Installs the Debian packages turbospark needs, if any is missing:
#   scripts/install-deps.sh runtime   to build turbospark and run it (make demo, make install)
#   scripts/install-deps.sh test      the runtime set, and what the test suite and the developer
#                                     tools need (make test, make fuzz)
#   scripts/install-deps.sh SET --list   prints the set's Debian packages, one a line (Node.js and npm,
#                                     needed by the tests when no node is installed, are not listed)
# Idempotent: does nothing when everything is present. Needs root (or sudo) to install.
set -euo pipefail

runtime=(
  cmake             # build system (>= 3.25)
  make gcc          # compiler and driver (gcc's libgomp gives OpenMP for the CPU forward)
  libc6-dev         # C library headers (gcc only recommends them)
  pkg-config        # finds cJSON, PCRE2, utf8proc and libmicrohttpd (and cmocka for the tests)
  libcjson-dev      # JSON parser for config.json and safetensors headers (turbospark convert), server bodies
  libpcre2-dev      # tokenizer: pre-tokenizer regexes (Unicode classes, lookahead), PCRE2 UTF + UCP
  libutf8proc-dev   # tokenizer: NFC normalization, as Hugging Face tokenizer.json applies it
  libmicrohttpd-dev # turbospark serve: HTTP/1.1 server (thread per connection, chunked SSE responses)
)
test=(
  libcmocka-dev     # unit-test framework (without it CMake builds no tests)
  curl              # server tests: raw HTTP requests (malformed-request suite)
  libomp-dev        # OpenMP runtime headers for clang builds (make fuzz)
  clang             # libFuzzer target and sanitizer builds (make fuzz)
  clang-format      # the tree's formatting, checked by tests/cli/format.sh (`make format` applies it)
  python3           # fixture and broken-file generators, oracle
  python3-numpy     # oracle and .npy checks in tests
)

usage() {
  echo "usage: scripts/install-deps.sh runtime|test [--list]" >&2
  exit 2
}
case "${1:-}" in
  runtime) packages=("${runtime[@]}") ;;
  test) packages=("${runtime[@]}" "${test[@]}") ;;
  *) usage ;;
esac
case "${2:-}" in
  --list) printf '%s\n' "${packages[@]}"; exit 0 ;;
  '') ;;
  *) usage ;;
esac

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js and npm run the server tests with the official OpenAI client (tests/server, pinned in its
# package-lock.json and installed by `npm ci` from ctest). Any node >= 18 with npm will do: Debian's
# packages are installed only when no `node` is on the PATH (a NodeSource node already bundles npm,
# and Debian's npm package would conflict with it).
if [ "$1" = test ]; then
  if ! command -v node >/dev/null 2>&1; then
    missing+=(nodejs npm)
  elif ! command -v npm >/dev/null 2>&1; then
    missing+=(npm)
  fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "turbospark: installing missing packages: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  SUDO="sudo"
else
  echo "turbospark: these Debian packages are missing and this user cannot install them:" >&2
  echo "  apt-get install -y ${missing[*]}" >&2
  echo "Run that as root, then run make again." >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
