#!/usr/bin/env bash
# Builds the CUDA twin tests and the benchmark with plain nvcc + cc command lines, without CMake's
# package checks (pkg-config, cJSON, cmocka): for a GPU machine that has the CUDA toolkit but not
# the project's Debian packages. Same sources and flags as the CMake targets; no OpenMP (the CPU
# twin then runs on one thread, which only makes the test slower).
#
#   tests/cuda/build_standalone.sh [OUTDIR]      (default build-cuda-standalone; run from the root)
#
# Produces OUTDIR/test_cuda_matmul, OUTDIR/bench_cuda_matmul, OUTDIR/test_cuda_decode, OUTDIR/test_cuda_gemm,
# OUTDIR/test_cuda_gemm_decode and OUTDIR/test_cuda_gemm_host.
set -euo pipefail
out=${1:-build-cuda-standalone}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cc=${CC:-cc}
cuda_inc=$(dirname "$(dirname "$nvcc")")/include
arch=${TS_CUDA_ARCH:--gencode=arch=compute_90a,code=sm_90a}
mkdir -p "$out/obj"

cflags=(-std=c11 -O2 -D_GNU_SOURCE -D_FILE_OFFSET_BITS=64 -Isrc -Iinclude -I"$cuda_inc")
core=(src/quant/*.c src/common/half.c src/common/error.c src/cpu/ops.c src/cpu/dot.c src/model/memplan.c)
pids=()
for f in "${core[@]}" tests/cuda/test_cuda_matmul.c tests/cuda/bench_cuda_matmul.c tests/cuda/test_cuda_gemm.c; do
  "$cc" "${cflags[@]}" -c "$f" -o "$out/obj/$(basename "$f" .c).o" &
  pids+=($!)
done
"$nvcc" -std=c++17 -O3 $arch -Isrc -Iinclude -c src/cuda/matmul.cu -o "$out/obj/matmul_cu.o" &
pids+=($!)
"$nvcc" -std=c++17 -O3 $arch -Isrc -Iinclude -c src/cuda/matmul_split.cu -o "$out/obj/matmul_split_cu.o" &
pids+=($!)
"$nvcc" -std=c++17 -O3 $arch -Isrc -Iinclude -c src/cuda/gemm.cu -o "$out/obj/gemm_cu.o" &
pids+=($!)
"$nvcc" -std=c++17 -O2 $arch -Isrc -Iinclude -c tests/cuda/test_cuda_decode.cu -o "$out/obj/test_cuda_decode_cu.o" &
pids+=($!)
"$nvcc" -std=c++17 -O2 $arch -Isrc -Iinclude -c tests/cuda/test_cuda_gemm_decode.cu -o "$out/obj/test_cuda_gemm_decode_cu.o" &
pids+=($!)
"$nvcc" -std=c++17 -O2 $arch -Isrc -Iinclude -c tests/cuda/test_cuda_gemm_host.cu -o "$out/obj/test_cuda_gemm_host_cu.o" &
pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done

lib=()
for f in "${core[@]}"; do lib+=("$out/obj/$(basename "$f" .c).o"); done
mm=("$out/obj/matmul_cu.o" "$out/obj/matmul_split_cu.o" "$out/obj/gemm_cu.o") # ts_cuda_matmul hands T >= 16 to the GEMM
"$nvcc" $arch -o "$out/test_cuda_matmul" "$out/obj/test_cuda_matmul.o" "${mm[@]}" "${lib[@]}" -lpthread -lm
"$nvcc" $arch -o "$out/bench_cuda_matmul" "$out/obj/bench_cuda_matmul.o" "${mm[@]}" "${lib[@]}" -lpthread -lm
"$nvcc" $arch -o "$out/test_cuda_gemm" "$out/obj/test_cuda_gemm.o" "${mm[@]}" "${lib[@]}" -lpthread -lm
"$nvcc" $arch -o "$out/test_cuda_decode" "$out/obj/test_cuda_decode_cu.o" "${lib[@]}" -lm
"$nvcc" $arch -o "$out/test_cuda_gemm_decode" "$out/obj/test_cuda_gemm_decode_cu.o" "${lib[@]}" -lm
"$nvcc" $arch -o "$out/test_cuda_gemm_host" "$out/obj/test_cuda_gemm_host_cu.o" "${lib[@]}" -lpthread -lm
echo "built $out/test_cuda_matmul $out/bench_cuda_matmul $out/test_cuda_decode $out/test_cuda_gemm" \
  "$out/test_cuda_gemm_decode $out/test_cuda_gemm_host"
