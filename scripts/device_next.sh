#!/usr/bin/env bash
# The device run that validated branch cuda-next in session 4 (BENCHMARKS.md, run 5): the parity suites with
# and without the integer-MMA GEMV, the decode bench, and the GEMV bench with the MMA path.
# On the GPU machine, after scripts/device_bundle.sh here and carrying .device.tar.xz:
#   bash scripts/device_next.sh        (writes logs under $OUT)
set -x
tar xJf .device.tar.xz && export LD_LIBRARY_PATH=$PWD/.device/lib
B=.device/turbospark
out=${OUT:-/tmp}/next; mkdir -p "$out"
( timeout 120 .device/test_cuda_matmul --quick ) > "$out/twin.txt" 2>&1; echo "twin rc=$?"; tail -2 "$out/twin.txt"
( TURBOSPARK_CUDA_MMA=1 timeout 120 .device/test_cuda_matmul --quick ) > "$out/twin_mma.txt" 2>&1; echo "twin mma rc=$?"; tail -2 "$out/twin_mma.txt"
( timeout 120 .device/test_cuda_forward /tmp ) > "$out/fwd.txt" 2>&1; echo "fwd rc=$?"; grep -E "FAIL|passed" "$out/fwd.txt" | head
( TURBOSPARK_CUDA_MMA=1 timeout 120 .device/test_cuda_forward /tmp ) > "$out/fwd_mma.txt" 2>&1; echo "fwd mma rc=$?"; grep -E "FAIL|passed" "$out/fwd_mma.txt" | head
$B synth --released --sparse --type q4_k_m -o /tmp/rel.gguf > /dev/null 2>&1 &
sy=$!
( TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 150 bash tests/cuda/golden_cuda.sh ) > "$out/golden.txt" 2>&1; echo "golden rc=$?"; tail -2 "$out/golden.txt"
wait $sy
date; for mma in 0 1; do
  TURBOSPARK_CUDA_MMA=$mma timeout 150 $B bench -m /tmp/rel.gguf --backend cuda --random-weights -p 0 -n 32 -b 1,64 --ctx 1 -r 2 2>/dev/null | grep -E "tg32|total"
done
TURBOSPARK_CUDA_MMA=1 timeout 120 .device/bench_cuda_matmul 15 2>&1 | grep -E "^q4_K|copy"
# Decode far into the sparse-attention regime (the context is filled by prefill before timing).
for ctx in 4096 32768; do
  timeout 240 $B bench -m /tmp/rel.gguf --backend cuda --random-weights -p 0 -n 16 -b 1 --ctx $ctx -r 1 2>/dev/null | grep -E "tg16|ctx"
done
