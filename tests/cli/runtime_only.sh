#!/usr/bin/env bash
# `make demo` on a machine with the runtime packages only (scripts/install-deps.sh runtime): CMake
# must configure the library and the command with no test-only package. pkg-config is pointed at a
# folder holding only the .pc files of the runtime set's packages (and of the modules they require),
# so cmocka is absent there: the configure must succeed, say the tests are not built, and define
# the command and the library but no test. The Makefile's demo must install the runtime set and
# build the command alone; its test must install the test set.
# Skipped (exit 77) on a system without dpkg, where the packages cannot be listed.
set -euo pipefail
source "$(dirname "$0")/../lib.sh"
ts_cli_setup
command -v dpkg >/dev/null || { echo "SKIP: no dpkg: the runtime packages' files cannot be listed"; exit 77; }

pc="$TS_TMP/pkgconfig"
rm -rf "$pc" build
mkdir -p "$pc"
modules=()
for p in $(bash "$repo/scripts/install-deps.sh" runtime --list); do
  dpkg -s "$p" >/dev/null 2>&1 || fail "the runtime package $p is not installed (scripts/install-deps.sh runtime)"
  for f in $(dpkg -L "$p" | grep '/pkgconfig/[^/]*\.pc$' || true); do modules+=("$(basename "$f" .pc)"); done
done
[ ${#modules[@]} -gt 0 ] || fail "the runtime packages hold no pkg-config module"
# the modules they require come with them (apt installs a package's dependencies)
while [ ${#modules[@]} -gt 0 ]; do
  m=${modules[0]}
  modules=("${modules[@]:1}")
  [ -e "$pc/$m.pc" ] && continue
  ln -s "$(pkg-config --variable pcfiledir "$m")/$m.pc" "$pc/$m.pc"
  for r in $(pkg-config --print-requires --print-requires-private "$m" | awk '{print $1}'); do modules+=("$r"); done
done
[ ! -e "$pc/cmocka.pc" ] || fail "cmocka is a module of a runtime package"

env -u PKG_CONFIG_PATH -u CMAKE_PREFIX_PATH PKG_CONFIG_LIBDIR="$pc" \
  cmake -S "$repo" -B build -DTS_CUDA=OFF >configure.log 2>&1 || { cat configure.log; fail "configure without cmocka"; }
grep -q "turbospark: tests not built (cmocka not found" configure.log || { cat configure.log; fail "no message about the tests"; }
cmake --build build --target help >targets.txt
grep -qx '\.\.\. turbospark' targets.txt || fail "no turbospark target"
grep -qx '\.\.\. turbospark_shared' targets.txt || fail "no turbospark_shared target"
! grep -q 'test_' targets.txt || fail "test targets configured without cmocka: $(grep test_ targets.txt | head -3)"
echo "configure with the runtime modules only ($(ls "$pc" | sed 's/\.pc$//' | tr '\n' ' ')): ok, no tests"

demo=$(make -n -C "$repo" demo BUILD="$TS_TMP/unused")
[[ "$demo" == *"install-deps.sh runtime"* ]] || fail "make demo does not install the runtime set: $demo"
[[ "$demo" != *"install-deps.sh test"* ]] || fail "make demo installs the test set"
[[ "$demo" == *"--target turbospark"* ]] || fail "make demo does not build the command alone: $demo"
[[ "$(make -n -C "$repo" test BUILD="$TS_TMP/unused")" == *"install-deps.sh test"* ]] || fail "make test does not install the test set"
rm -rf build "$pc"
echo "runtime_only: ok"
