#!/usr/bin/env bash
# Builds turbospark and the CUDA tests on a development machine (nvcc is installed there, no GPU
# needed) into .device/, with the shared libraries a bare GPU machine lacks (cJSON, PCRE2,
# utf8proc, libmicrohttpd and theirs), packed as .device.tar.xz (~22 MB, small enough to travel
# with the working tree). On the GPU machine:
#   tar xJf .device.tar.xz && LD_LIBRARY_PATH=.device/lib .device/turbospark ...
#
#   scripts/device_bundle.sh            (from the repository root; arch 90a unless TS_CUDA_ARCH=...)
# TS_DEVICE_DIR=.device-x names the folder and the archive ($TS_DEVICE_DIR.tar.xz), so that two builds
# (a branch beside main) can travel in one device call.
set -euo pipefail
arch=${TS_CUDA_ARCH:-90a}
dev=${TS_DEVICE_DIR:-.device}
cmake -S . -B build-dev -DCMAKE_BUILD_TYPE=Release -DTS_CUDA_ARCHITECTURES="$arch" >/dev/null
cmake --build build-dev -j"$(nproc)" --target turbospark test_cuda_forward test_cuda_matmul test_cuda_gemm test_cuda_chain test_cuda_qsa bench_cuda_matmul bench_cuda_sync
# the kernel timeline's CUPTI library (device_check.sh timeline), where this toolkit builds it
trace=
if cmake --build build-dev --target help | grep ts_kernel_trace > /dev/null; then # (all of make's output: pipefail)
  cmake --build build-dev --target ts_kernel_trace
  trace=build-dev/tests/libts_kernel_trace.so
fi
rm -rf "$dev"
mkdir -p "$dev/lib"
cp build-dev/turbospark build-dev/tests/test_cuda_forward build-dev/tests/test_cuda_matmul build-dev/tests/test_cuda_gemm build-dev/tests/test_cuda_chain build-dev/tests/test_cuda_qsa \
   build-dev/tests/bench_cuda_matmul build-dev/tests/bench_cuda_sync $trace "$dev/"
strip "$dev/turbospark" "$dev"/test_cuda_* "$dev/bench_cuda_matmul" "$dev/bench_cuda_sync"
for lib in $(ldd "$dev/turbospark" "$dev/test_cuda_forward" | awk '/=>/ {print $3}' | sort -u); do
  case $(basename "$lib") in
    libc.so*|libm.so*|ld-linux*|libpthread*|libdl.so*|librt.so*|libcuda.so*|libstdc++*|libgcc_s*) ;;
    *) cp -L "$lib" "$dev/lib/" ;;
  esac
done
# the trace library's libcupti beside it (its run path is $ORIGIN), not in lib/, where Nsight Compute's own
# injection, started with LD_LIBRARY_PATH=lib, could pick it up
[ -z "$trace" ] || cp -L "$(ldd "$trace" | awk '/libcupti/ {print $3}')" "$dev/"
# one xz stream with a dictionary over all the binaries (each carries the same CUDA library): ~22 MB, where -9's
# 64 MiB window gave ~25, and a device call carries the working tree (~41 MB) and the bundle within 64 MiB
tar cf - "$dev" | xz -T1 --lzma2=preset=9,dict=256MiB > "$dev.tar.xz"
du -sh "$dev" "$dev.tar.xz"
