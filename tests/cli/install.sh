#!/usr/bin/env bash
# Packaging: `cmake --install` (what `make install PREFIX=...` runs) into a prefix inside the build
# tree, then examples/simple.c compiled with `pkg-config --cflags --libs turbospark` against the
# installed header and libturbospark.so: it loads the demo model, tokenizes, evaluates, samples
# and prints text. Also: the soname, the exported symbols (exactly the header's functions) and
# `turbospark --version`.
set -uo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$(dirname "$TS_BIN")" && pwd)"
mkdir -p "$TS_TMP"; cd "$TS_TMP"
fail=0
bad() { echo "FAIL: $*"; fail=1; }
prefix="$TS_TMP/prefix"
rm -rf "$prefix"
cmake --install "$build" --prefix "$prefix" >install.log 2>&1 || { cat install.log; echo "FAIL: cmake --install"; exit 1; }
pc=$(find "$prefix" -name turbospark.pc | head -1)
[ -n "$pc" ] || { echo "FAIL: no turbospark.pc installed"; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
[ -f "$prefix/include/turbospark.h" ] || bad "turbospark.h not installed"
[ -x "$prefix/bin/turbospark" ] || bad "the turbospark command not installed"
flags=$(pkg-config --cflags --libs turbospark) || bad "pkg-config --cflags --libs turbospark failed"
# a sanitizer build (make test SANITIZE=1) installs an instrumented library: its runtime must come first
[[ "$(readelf -d "$prefix"/lib/libturbospark.so)" == *libasan* ]] && flags="-fsanitize=address,undefined $flags"
[[ "$flags" == *"-I$prefix/include"* && "$flags" == *-lturbospark* ]] || bad "pkg-config flags: $flags"
libdir=$(pkg-config --variable=libdir turbospark)
lib=$(readlink -f "$libdir/libturbospark.so")
[ -f "$lib" ] || bad "libturbospark.so not installed in $libdir"

# the soname carries the version; only the header's functions are exported
ver=$(pkg-config --modversion turbospark)
major=${ver%%.*}; minor=${ver#*.}; minor=${minor%%.*}
want_soname="libturbospark.so.$major"; [ "$major" = 0 ] && want_soname="libturbospark.so.0.$minor"
dyn=$(readelf -d "$lib")
[[ "$dyn" == *"[$want_soname]"* ]] || bad "soname is not $want_soname: $(grep SONAME <<<"$dyn")"
[ -e "$libdir/$want_soname" ] || bad "no $want_soname link in $libdir"
grep -oE '^[a-z][^(]*[ *]ts_[a-z0-9_]+\(' "$prefix/include/turbospark.h" | grep -oE 'ts_[a-z0-9_]+\($' | tr -d '(' | sort >header.txt
nm -D --defined-only "$lib" | awk '$2 == "T" {sub(/@.*/, "", $3); print $3}' | sort >exported.txt
[ -s header.txt ] && diff header.txt exported.txt >/dev/null || bad "exported symbols differ from the header's functions: $(diff header.txt exported.txt | head)"

# --version: the project version, a commit and the backends
"$TS_BIN" --version >version.txt || bad "--version failed"
grep -q "^turbospark $ver (commit [0-9a-f]\{7,\}\(-dirty\)\?)$" version.txt || bad "--version: $(cat version.txt)"
grep -q "^backends: cpu" version.txt || bad "--version has no backends: $(cat version.txt)"

# the example, built against the installed library only (no include path into the sources)
cc -std=c11 -Wall -Werror "$repo/examples/simple.c" $flags -o simple 2>cc.log || bad "the example does not build: $(cat cc.log)"
"$TS_BIN" convert "$repo/models/demo" -o demo.gguf --type bf16 --quiet || exit 1
LD_LIBRARY_PATH="$libdir" ./simple demo.gguf "And it came to pass" 24 >simple.out 2>simple.err || bad "the example failed: $(cat simple.err)"
out=$(cat simple.out)
[[ "$out" == "And it came to pass"* ]] && [ ${#out} -gt 40 ] || bad "the example printed: '$out'"
grep -q "generated" simple.err || bad "the example's summary: $(cat simple.err)"
# (ldd's output captured first: `ldd | grep -q` fails under pipefail when grep exits before ldd has written)
deps=$(LD_LIBRARY_PATH="$libdir" ldd ./simple)
[[ "$deps" == *"$libdir/libturbospark.so"* ]] || bad "the example is not linked to the installed library: $deps"
# the same prompt and seed through the library twice: the same text
LD_LIBRARY_PATH="$libdir" ./simple demo.gguf "And it came to pass" 24 2>/dev/null | cmp -s - simple.out || bad "the example is not reproducible"

[ $fail -eq 0 ] && echo "install: ok"
exit $fail
