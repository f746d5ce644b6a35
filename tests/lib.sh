# Shared helpers for the shell tests in tests/cli (sourced, not run).
# Env (set by tests/CMakeLists.txt): TS_BIN, TS_FIXTURES, TS_TMP.

# PY: a python3 with numpy (Debian's python3-numpy lives in /usr/bin/python3; a pyenv one may lack it).
ts_find_python() {
    PY=""
    for p in python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null 2>&1 && "$p" -c "import numpy" 2>/dev/null; then PY=$p; return 0; fi
    done
    echo "FAIL: no python3 with numpy (install python3-numpy)" >&2
    exit 1
}

# The usual start of a test script: PY (ts_find_python), repo (the checkout), $TS_TMP created and
# made the current folder, and fail MESSAGE (prints it, exits 1).
ts_cli_setup() {
    ts_find_python
    repo=$(cd "$(dirname "${BASH_SOURCE[1]}")/../.." && pwd)
    mkdir -p "$TS_TMP"
    cd "$TS_TMP"
}
fail() { echo "FAIL: $*"; exit 1; }

# The start of the real-width GPU tests (tests/cuda/realwidth*.sh): PY, fx (the realwidth_4l fixture,
# $TS_REALWIDTH), $TS_TMP created, t = $TS_TMP/NAME (their files' prefix) and step CMD... (runs a command
# of ours quietly; on failure prints its errors and stops). Exits 77, "skipped", without the fixture or
# a CUDA device.
ts_realwidth_setup() {
    ts_find_python
    fx=${TS_REALWIDTH:-/tmp/rw/realwidth_4l}
    [ -f "$fx/config.json" ] && [ -f "$fx/logits.npy" ] || { echo "skipped: no real-width fixture at $fx"; exit 77; }
    "$TS_BIN" devices 2>/dev/null | grep -q "^  0: " || { echo "skipped: no CUDA device"; exit 77; }
    mkdir -p "$TS_TMP"
    t=$TS_TMP/$1
}
step() { "$@" >/dev/null 2>"$t.err" || { cat "$t.err"; echo "FAIL: $*"; exit 1; }; }
