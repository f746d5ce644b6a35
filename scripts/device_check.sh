#!/usr/bin/env bash
# One device run: the CUDA parity suite under the precision gate, then the released-shape figures.
# On the GPU machine, after scripts/device_bundle.sh here and carrying .device.tar.xz:
#   bash scripts/device_check.sh gate     twin tests, forward parity, golden fixtures; writes
#                                         /tmp/rel.gguf (synth --released --sparse --type q4_k_m)
#   bash scripts/device_check.sh sass     the SASS of the kernels SASS_FUNS names (cuobjdump, not on the development machine)
#   bash scripts/device_check.sh where    the batch-1 table, then Nsight Compute's sections and SASS source counters of
#                                         one fused routed down, one dense Q4_K and one routed gate/up launch (or
#                                         of the kernels WHERE_KERNELS names: ncu -k filters, ";"-separated, each after WHERE_SKIP=10 of its launches)
#   bash scripts/device_check.sh table [B]  the warm per-kernel table of one decode step at batch B (64)
#   bash scripts/device_check.sh timeline [B]  where decode steps at batch B (1) spend their time inside the CUDA
#                                         graph: every kernel's GPU start and end (a CUPTI injection library,
#                                         tools/timeline/ts_kernel_trace.c; nsys cannot write reports here), then
#                                         tools/timeline_table.py (TL_SEQ=n: also the first n kernels of a step;
#                                         TL_PREFILL=P: also prompts of P tokens, the kernels outside graphs as one
#                                         step: bench's warm-up and timed prompts and a token's eager decode steps)
#   bash scripts/device_check.sh prefill [P]  prefill figures (pp512, ppP; P = 8192) and the per-kernel
#                                         table of a 4,096-token prompt
#   bash scripts/device_check.sh cache    serve --backend cuda with the prefix cache
#                                         (tests/cuda/serve_cache_cuda.sh on the demo model)
#   bash scripts/device_check.sh realwidth  the gate at the released widths (tests/cuda/realwidth.sh on
#                                         a fixture made here by transformers)
#   bash scripts/device_check.sh merge    the gate for landing a CUDA change in one call: all's tests (no timings)
#                                         side by side with realwidth
#   bash scripts/device_check.sh kl       the UD IQ2_XXS mix's KL at the released widths
#                                         (tests/cuda/realwidth_kl.sh on that fixture)
#   bash scripts/device_check.sh ud       decode of UD mixes at the released shapes on the GPU held to
#                                         an 80 GB card's memory (79.1 GiB) and a 48 GB card's (44.5)
#   bash scripts/device_check.sh rwpair   this bundle against RW_BASE's (.device-main) on the real-width q4_k_m
#                                         file: whole prompt, micro-batches 1 and 4, positions that differ at all
#   bash scripts/device_check.sh server   serve --backend cuda at the released shapes, 64 streaming clients
#                                         (scripts/server_load.sh against bench -b 64; the demo tokenizer)
#   bash scripts/device_check.sh ctx      batch-1 decode at depths 1,024, 32,768, 131,072 and 262,144
#                                         (each filled by a prefill in micro-batches of 2,048; CTX_DEPTHS
#                                         other depths, CTX_DECODE ';'-separated variants)
#   bash scripts/device_check.sh batch    decode b1/8/16/32/64 with the grouped expert products at the
#                                         thresholds, always (TURBOSPARK_CUDA_MOE_GROUPED=1), and with the
#                                         expert products of > 8 x rows off the tensor cores (TURBOSPARK_TC_XROW=0),
#                                         then the warm per-kernel table of a 64-row step the first two ways
#   bash scripts/device_check.sh wa       the tensor-core GEMV with the weights as the MMAs' A operand
#                                         (TURBOSPARK_TC_WA=1): twin and forward under the gate, decode b1/8
#                                         and the GEMV microbenchmark with it off and on
#   bash scripts/device_check.sh chain    the persistent product chain (src/cuda/persist.h): its twin test
#                                         against ts_cuda_matmul, then one launch against a graph of launches
#                                         at the model's shapes (test_cuda_chain --bench), the weights as B or
#                                         as A (TURBOSPARK_PERSIST_WA), where a block's time goes (stamps)
#   bash scripts/device_check.sh speed    decode b1/8/16/64 and prefill at the default micro-batch, then
#                                         prefill of 8,192 tokens at micro-batches of 512 to 4,096
#   bash scripts/device_check.sh ab       prefill with the hyper-connections' split products off and on
#                                         (TURBOSPARK_CUDA_HC_SPLIT)
#   bash scripts/device_check.sh gdn      the GDN chunk kernels' times at 4,096 rows and prefill figures on
#                                         the released shapes cut to 4 layers (a quick loop)
#   bash scripts/device_check.sh qsa      the QSA attention kernels' times at 4,096 rows, fp32 SIMT and
#                                         tensor cores (TURBOSPARK_CUDA_QSA_TC=0/1), on the same 4 layers
#   bash scripts/device_check.sh gemm     why the prefill GEMMs are slow: Nsight Compute's throughput, stall,
#                                         occupancy and memory sections of the tensor-core GEMM's launches
#                                         in a 4,096-token prompt (the split, Q5_K, routed gate|up and down)
#   bash scripts/device_check.sh gemm quick  the GEMM's twin tests, golden fixtures, prefill figures and
#                                         launch table, then test_cuda_forward
#   bash scripts/device_check.sh gemvmb   where's sections of one Q4_K 2560 -> 10240 launch of bench_cuda_matmul,
#                                         then the microbenchmark
#   bash scripts/device_check.sh land     before landing a prefill or attention change: the GEMM's and the
#                                         forward's twin tests, golden fixtures, attention times, prefill and
#                                         decode against TURBOSPARK_CUDA_GEMM_XR=0 / HC_SPLIT=0, the
#                                         hyper-connection up launch's sections, decode at 32K
#   bash scripts/device_check.sh wg       the warpgroup-MMA products: their twin cases and times,
#                                         test_cuda_forward and the golden fixtures, prefill with
#                                         TURBOSPARK_CUDA_GEMM_WG=1 / unset / 0, the sections of one launch
#                                         (WG_RW=1: the real-width gate instead of the last three)
#   bash scripts/device_check.sh wgncu    Nsight Compute's time, instructions and registers of the GEMM
#                                         launches of test_cuda_gemm --wg, a line per (kernel, grid), then
#                                         the warpgroup kernel's six largest stall reasons
#   bash scripts/device_check.sh bench    decode b1/8/64 with the tensor-core GEMV and without,
#                                         the GEMV microbenchmark, and (bench ncu) an Nsight Compute
#                                         per-kernel table of one batch-1 decode step (eager, each
#                                         kernel alone with cold caches: tools/ncu_table.py)
#   bash scripts/device_check.sh sync     what one dependent step costs with no work in it: a graph of launches
#                                         with and without PDL, a persistent kernel's grid barrier and flag
#                                         waits, PDL's release delay (tests/cuda/bench_cuda_sync.cu)
#   bash scripts/device_check.sh all      the twin tests, forward parity (tensor-core GEMV on and off), golden
#                                         fixtures and the chain's twins side by side on the one GPU, then decode
#                                         b1-64 for each variant of ALL_DECODE and (ALL_NCU=B) the warm per-kernel
#                                         table of a step at batch B and (ALL_TIMELINE=B) the in-graph timeline
#                                         of steps at batch B (as `timeline`); all logs in $OUT/all.tgz
# Logs go under $OUT/check (the device tool brings them back).
# TS_DEVICE_DIR=.device-x runs the build that scripts/device_bundle.sh packed under that name.
set -u
D=${TS_DEVICE_DIR:-.device}
[ -x $D/turbospark ] || tar xJf $D.tar.xz
export LD_LIBRARY_PATH=$PWD/$D/lib
B=$D/turbospark
out=${OUT:-/tmp}/check$([ $D = .device ] || echo "-${D#.device-}")
mkdir -p "$out"
rel=/tmp/rel.gguf
# REL_LAYERS=n: the released shapes cut to n layers (0: all 48). A card of less than 100 GB (an H100, where the
# q4_k_m file does not fit) takes 24 unless REL_LAYERS is set. Figures of a cut model are comparisons within
# one call, never the released model's.
if [ -z "${REL_LAYERS:-}" ]; then
  mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
  if [ -n "$mib" ] && [ "$mib" -lt 100000 ]; then
    REL_LAYERS=24
    echo "note: $mib MiB on this card, too little for the released q4_k_m file: its shapes cut to 24 layers"
  fi
fi
rel_layers=
[ -n "${REL_LAYERS:-}" ] && [ "$REL_LAYERS" != 0 ] && rel=/tmp/rel$REL_LAYERS.gguf rel_layers="--layers $REL_LAYERS"
# timeline B DIR: decode at batch B with every kernel's GPU start and end recorded (CUPTI, through the
# injection library the bundle carries; the trace is written when bench exits, so a timeout loses it), then
# the in-graph table of its steps (tools/timeline_table.py)
timeline() {
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  [ -f $D/libts_kernel_trace.so ] || { echo "timeline: this bundle has no libts_kernel_trace.so"; return 0; }
  traced() { # traced CSV bench-args...: bench with the trace on; 0 when the trace has kernel records
    local csv=$1; shift
    CUDA_INJECTION64_PATH=$PWD/$D/libts_kernel_trace.so TS_TRACE_OUT="$csv" timeout 300 \
      $B bench -m $rel --backend cuda --random-weights "$@" > "$csv.txt" 2>&1
    local rc=$?
    grep -E "tg|pp|ts_kernel_trace|bandwidth" "$csv.txt"
    [ $rc -eq 0 ] && [ "$(wc -l < "$csv" 2>/dev/null || echo 0)" -gt 1 ] ||
      { echo "timeline: bench exited $rc, no trace"; tail -3 "$csv.txt"; return 1; }
  }
  echo "== timeline b$1"
  if traced "$2/trace_b$1.csv" -p 0 -n 16 -b $1 --ctx 1 -r 1; then
    # with the bytes of an Nsight Compute table of the same batch (all's ALL_NCU) and bench's copy bandwidth
    local bytes=() bw
    bw=$(grep -o "bandwidth [0-9.]* GB/s" "$2/trace_b$1.csv.txt" | awk '{print $2}' | tail -1)
    [ -f "$2/ncu_b$1.csv" ] && bytes=(--bytes "$2/ncu_b$1.csv" ${bw:+--copy $bw})
    python3 tools/timeline_table.py "$2/trace_b$1.csv" --top 30 --sequence ${TL_SEQ:-0} "${bytes[@]}" |
      tee "$2/timeline_b$1.md"
    gzip -f "$2/trace_b$1.csv"
  fi
  [ -n "${TL_PREFILL:-}" ] || return 0
  echo "== timeline pp$TL_PREFILL"
  if traced "$2/trace_pp.csv" -p $TL_PREFILL -n 1 -b 1 --ctx 1 -r 1; then
    python3 tools/timeline_table.py "$2/trace_pp.csv" --eager --top 30 | tee "$2/timeline_pp$TL_PREFILL.md"
    gzip -f "$2/trace_pp.csv"
  fi
}
case "${1:-gate}" in
gate)
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  (timeout 300 $D/test_cuda_matmul --quick) > "$out/twin.txt" 2>&1
  echo "twin rc=$?"; grep -E "FAIL|experts|tc " "$out/twin.txt" | head -12; tail -16 "$out/twin.txt"
  for tc in ${GATE_TC:-1 0}; do
    (TURBOSPARK_CUDA_GEMV_TC=$tc timeout 300 $D/test_cuda_forward /tmp) > "$out/fwd$tc.txt" 2>&1
    echo "fwd TURBOSPARK_CUDA_GEMV_TC=$tc rc=$?"; grep -E "FAIL|passed|x rounded|logits:|micro|together" "$out/fwd$tc.txt" | head -40
  done
  (TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 200 bash tests/cuda/golden_cuda.sh) > "$out/golden.txt" 2>&1
  echo "golden rc=$?"; grep -E "CUDA vs|FAIL|Error|assert" "$out/golden.txt" | head -8
  if [ -x $D/test_cuda_gemm ]; then
    (timeout 150 $D/test_cuda_gemm --quick) > "$out/gemm.txt" 2>&1
    echo "gemm rc=$?"; grep -E "FAIL" "$out/gemm.txt" | head -8; tail -2 "$out/gemm.txt"
  fi
  wait
  ls -la $rel
  ;;
all)
  # Correctness first, the tests side by side (each its own folder), then the timings one at a time. Every
  # log goes into one archive, $OUT/all.tgz (the device tool brings back 8 files). ALL_ENV: variables for
  # every test and timing ("TURBOSPARK_TC_WA=1"); ALL_DECODE: the decode variants, ';'-separated ("" is the
  # default); ALL_B: the batch sizes (1,8,16,64); ALL_PROFILE: the batch of bench's step-by-block table (1);
  # ALL_TESTS=0 / ALL_BENCH=0: timings / tests only; ALL_NCU=B:
  # the warm per-kernel table of a step at batch B.
  t0=$(date +%s); st() { echo "[$(($(date +%s) - t0)) s] $*"; }
  out=/tmp/all-logs; mkdir -p $out
  pack() { tar czf "${OUT:-/tmp}/all.tgz" -C "$out" . 2>/dev/null; }
  export ${ALL_ENV:-TS_ALL_ENV=}
  echo "env: ${ALL_ENV:-none}"
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  if [ "${ALL_TESTS:-1}" = 1 ]; then
  (timeout 300 $D/test_cuda_matmul --quick > "$out/twin.txt" 2>&1; echo "rc=$?" >> "$out/twin.txt") &
  for tc in ${FWD_TCS:-1 0}; do
    mkdir -p /tmp/f$tc
    (TURBOSPARK_CUDA_GEMV_TC=$tc timeout 400 $D/test_cuda_forward /tmp/f$tc > "$out/fwd$tc.txt" 2>&1
      echo "rc=$?" >> "$out/fwd$tc.txt") &
  done
  (TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 300 bash tests/cuda/golden_cuda.sh > "$out/golden.txt" 2>&1
    echo "rc=$?" >> "$out/golden.txt") &
  (timeout 300 $D/test_cuda_gemm --quick > "$out/gemm.txt" 2>&1; echo "rc=$?" >> "$out/gemm.txt") &
  (timeout 100 $D/test_cuda_qsa --bench; echo "rc=$?") > "$out/qsa.txt" 2>&1 &
  for wa in ${CHAIN_WAS-0 1}; do
    (TURBOSPARK_PERSIST_WA=$wa timeout 200 $D/test_cuda_chain > "$out/chain$wa.txt" 2>&1; echo "rc=$?" >> "$out/chain$wa.txt") &
  done
  wait
  st "tests done"; pack
  echo "== twin"; grep -E "FAIL" "$out/twin.txt" | head -8; tail -2 "$out/twin.txt"
  for tc in ${FWD_TCS:-1 0}; do echo "== fwd GEMV_TC=$tc"; grep -a -E "FAIL|passed|logits:|together|one launch|smallest grid|^rc=" "$out/fwd$tc.txt" | head -40; done
  echo "== golden"; grep -E "CUDA vs|FAIL|Error|assert|^rc=" "$out/golden.txt" | head -10
  echo "== gemm"; grep -E "FAIL" "$out/gemm.txt" | head -8; tail -2 "$out/gemm.txt"
  echo "== qsa top-k"; grep -E "FAIL|passed|bench|^rc=" "$out/qsa.txt" | head -12
  for wa in ${CHAIN_WAS-0 1}; do echo "== chain WA=$wa"; grep -E "FAIL|largest|passed|^rc=" "$out/chain$wa.txt" | head -4; done
  fi
  wait
  ls -la $rel
  [ "${ALL_BENCH:-1}" = 1 ] || exit 0
  IFS=';' read -r -a variants <<< "${ALL_DECODE:-}"
  [ ${#variants[@]} -gt 0 ] || variants=("")
  i=0
  for v in "${variants[@]}"; do
    echo "== decode ${v:-default}"
    env $v timeout 150 $B bench -m $rel --backend cuda --random-weights -p 0 -n 32 -b ${ALL_B:-1,8,16,64} --ctx 1 -r 2 \
      --profile-batch ${ALL_PROFILE:-1} \
      2> "$out/bench$i.err" | tee "$out/bench$i.txt" | grep -E "tg"
    grep -A10 "^| block" "$out/bench$i.txt" | grep -E "^\| (hc|gdn|qsa|moe|output|total)"
    st "decode ${v:-default}"; i=$((i + 1)); pack
  done
  if [ -n "${ALL_NCU:-}" ]; then
    timeout 300 ncu --clock-control none --cache-control none --profile-from-start off --csv --log-file "$out/ncu_b$ALL_NCU.csv" \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b $ALL_NCU --profile-batch $ALL_NCU --ctx 1 -r 1 > /dev/null 2>&1
    echo "ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu_b$ALL_NCU.csv" | tee "$out/ncu_b$ALL_NCU.md" | head -45
    st "ncu"; pack
  fi
  if [ -n "${ALL_TIMELINE:-}" ]; then
    timeline "$ALL_TIMELINE" "$out"; st "timeline"; pack
  fi
  ;;
timeline)
  timeline "${2:-1}" "$out"
  ;;
bench)
  for tc in 1 0; do
    echo "TURBOSPARK_CUDA_GEMV_TC=$tc"
    TURBOSPARK_CUDA_GEMV_TC=$tc timeout 200 $B bench -m $rel --backend cuda --random-weights -p 0 -n 32 \
      -b $([ $tc = 1 ] && echo 1,8,64 || echo 1) --ctx 1 -r 2 2> "$out/bench$tc.err" | tee "$out/bench$tc.txt" | grep -E "tg|block|total|GDN|MoE|QSA|hyper"
  done
  (timeout 120 $D/bench_cuda_matmul 20) > "$out/gemv.txt" 2>&1; grep -E "^q4_K|copy|Q4_K" "$out/gemv.txt" | head
  if [ "${2:-}" = ncu ]; then
    timeout 300 ncu --clock-control none --profile-from-start off --csv --log-file "$out/ncu.csv" \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b 1 --ctx 1 -r 1 > /dev/null 2>&1
    echo "ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu.csv" | tee "$out/ncu_table.md" | head -40
  fi
  ;;
cache)
  # The server's prefix cache on the GPU: cached and cold answers equal (python3 and the demo model).
  (TS_BIN=$B TS_TMP=/tmp/sc timeout 170 bash tests/cuda/serve_cache_cuda.sh) > "$out/serve_cache.txt" 2>&1
  echo "serve cache rc=$?"; tail -14 "$out/serve_cache.txt"
  ;;
merge)
  # The whole gate for landing a CUDA change in one call (~500 s): all's tests (twin, forward with the
  # tensor-core GEMV, golden fixtures, the GEMM's twins; FWD_TCS=1, no chain, no timings, the released shapes
  # cut to 2 layers so that its model file is made at once) side by side with realwidth, whose CPU references
  # keep most of the cores (the tests' CPU twins take 6 threads: their sums do not depend on the count)
  OMP_NUM_THREADS=6 REL_LAYERS=2 ALL_BENCH=0 FWD_TCS=1 CHAIN_WAS= bash "$0" all > "$out/merge_all.txt" 2>&1 &
  tests=$!
  bash "$0" realwidth
  wait $tests
  echo "== tests"; grep -v "^note:" "$out/merge_all.txt" | tail -60
  ;;
realwidth | kl)
  # The realwidth_4l fixture made by transformers on this GPU (fp32), then tests/cuda/realwidth.sh
  # (the gate at the released widths) or tests/cuda/realwidth_kl.sh with this bundle's binary.
  [ -f /tmp/rw/realwidth_4l/logits.npy ] ||
    (timeout 400 python3 tools/fixtures/make_golden.py --out /tmp/rw --only realwidth_4l --device cuda) > "$out/rw_make.txt" 2>&1
  echo "fixture rc=$?"; tail -3 "$out/rw_make.txt"
  t=$([ $1 = kl ] && echo realwidth_kl || echo realwidth)
  (TS_BIN=$B TS_TMP=/tmp/rwt TS_REALWIDTH=/tmp/rw/realwidth_4l timeout 500 bash tests/cuda/$t.sh) > "$out/$t.txt" 2>&1
  echo "$t rc=$?"; cat "$out/$t.txt" | tail -14
  ;;
rwpair)
  # Two builds on the real-width fixture's q4_k_m file: this bundle's and RW_BASE's (.device-main: a bundle of
  # main), the whole prompt and micro-batches 1 and 4, each of this build's runs against the base's (positions
  # that differ at all, the largest difference): a change that claims the same sums shows 0 everywhere. Then
  # micro-batches 1 and 4 of this build with each switch of RW_ENVS (';'-separated) against the base, to find
  # the one that moves a sum.
  [ -f /tmp/rw/realwidth_4l/logits.npy ] ||
    (timeout 400 python3 tools/fixtures/make_golden.py --out /tmp/rw --only realwidth_4l --device cuda) > "$out/rw_make.txt" 2>&1
  echo "fixture rc=$?"
  base=${RW_BASE:-.device-main} # a bundle's name in the working directory, as TS_DEVICE_DIR
  [ -x $base/turbospark ] || tar xJf $base.tar.xz
  fx=/tmp/rw/realwidth_4l
  for d in $D $base; do
    LD_LIBRARY_PATH=$PWD/$d/lib $d/turbospark convert $fx -o /tmp/rwp.${d#.}.gguf --type q4_k_m > /dev/null 2>&1 || echo "convert failed: $d"
  done
  # rw_logits DIR UB OUT [VAR=VALUE ...]: the file's logits by build DIR in micro-batches of UB (0: the whole prompt)
  rw_logits() {
    local d=$1 ub=$2 o=$3; shift 3
    rm -f $o
    env "$@" LD_LIBRARY_PATH=$PWD/$d/lib timeout 200 $d/turbospark logits -m /tmp/rwp.${d#.}.gguf \
      --tokens-npy $fx/tokens.npy -o $o $([ $ub = 0 ] || echo --ubatch $ub) --backend cuda > /dev/null 2>> "$out/rwpair.err" ||
      { echo "logits failed: $d ub $ub $*"; rm -f $o; }
  }
  rw_diff() { # A B WHAT: positions whose logits differ in any bit (NaN and Inf included), the largest difference
    [ -f "$1" ] && [ -f "$2" ] || { echo "$3: not compared (a run above failed)"; return; }
    python3 - "$@" <<'PY'
import sys, numpy as np
a, b = np.load(sys.argv[1], mmap_mode="r"), np.load(sys.argv[2], mmap_mode="r")
assert a.shape == b.shape and a.dtype == b.dtype, f"{sys.argv[3]}: {a.shape} {a.dtype} against {b.shape} {b.dtype}"
bits = lambda v: np.ascontiguousarray(v).view(np.uint8).reshape(v.shape[0], -1)
scale, worst, rows, nonfinite = 0.0, 0.0, [], 0
for i in range(0, b.shape[0], 256):
    x, y = np.asarray(a[i:i + 256]), np.asarray(b[i:i + 256])
    scale = max(scale, float(np.nanmax(np.abs(np.where(np.isfinite(y), y, 0)))))
    rows += (i + np.nonzero((bits(x) != bits(y)).any(-1))[0]).tolist()
    nonfinite += int((~np.isfinite(x)).sum())
    d = np.abs(x.astype(np.float64) - y)
    worst = max(worst, float(np.nanmax(np.where(np.isfinite(d), d, 0))))
print(f"{sys.argv[3]}: {len(rows)} of {b.shape[0]} positions differ from the base in some bit, largest finite difference "
      f"{worst / scale if scale else 0:.2e} of max|logit|, {nonfinite} values not finite; first {rows[:8]}")
PY
  }
  for ub in 0 1 4; do
    rw_logits $base $ub /tmp/rwp.base.ub$ub.npy
    rw_logits $D $ub /tmp/rwp.this.npy
    rw_diff /tmp/rwp.this.npy /tmp/rwp.base.ub$ub.npy "$([ $ub = 0 ] && echo whole prompt || echo micro-batch $ub), this build"
  done
  IFS=';' read -r -a envs <<< "${RW_ENVS:-}"
  for e in "${envs[@]+"${envs[@]}"}"; do
    [ -n "$e" ] || continue
    for ub in 1 4; do
      rw_logits $D $ub /tmp/rwp.this.npy $e
      rw_diff /tmp/rwp.this.npy /tmp/rwp.base.ub$ub.npy "micro-batch $ub, this build with $e"
    done
  done
  rm -f /tmp/rwp.*.npy
  ;;
server)
  $B convert models/demo -o /tmp/demo.gguf --type bf16 --quiet > /dev/null 2>&1
  [ -f /tmp/rel-tok.gguf ] || $B synth --released --sparse --type q4_k_m --tokenizer-from /tmp/demo.gguf \
    -o /tmp/rel-tok.gguf > /dev/null 2>&1
  (TS_BIN=$B timeout 540 bash scripts/server_load.sh /tmp/rel-tok.gguf --backend cuda --random-weights \
    --clients 64 --max-tokens 128 --min-ratio 0.85 --out "$out/server_load") > "$out/server.txt" 2>&1
  echo "server load rc=$?"; tail -8 "$out/server.txt"
  ;;
sync)
  timeout 120 $D/bench_cuda_sync ${SYNC_STEPS:-256} 2>&1 | tee "$out/sync.txt"
  ;;
ctx)
  # CTX_DEPTHS: the depths (1024,32768,131072,262144); CTX_DECODE: ';'-separated variants ("" the default)
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  IFS=';' read -r -a variants <<< "${CTX_DECODE:-}"
  [ ${#variants[@]} -gt 0 ] || variants=("")
  i=0
  for v in "${variants[@]}"; do
    echo "== ctx ${v:-default}"
    env $v timeout 560 $B bench -m $rel --backend cuda --random-weights -p 0 -n 32 -b 1 \
      -d ${CTX_DEPTHS:-1024,32768,131072,262144} -ub 2048 -r 1 2> "$out/ctx$i.err" | tee "$out/ctx$i.txt" | grep -E "tg"
    i=$((i + 1))
  done
  ;;
ab)
  # Prefill with the hyper-connections' split products off and on (the fp32 GEMM against the tensor cores)
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  for sp in 0 1; do
    echo "TURBOSPARK_CUDA_HC_SPLIT=$sp"
    TURBOSPARK_CUDA_HC_SPLIT=$sp timeout 150 $B bench -m $rel --backend cuda --random-weights -p 512,8192 -n 1 -b 1 \
      --ctx 1 -r 1 2> "$out/ab$sp.err" | grep -E "pp"
  done
  ;;
gdn)
  # A quick loop for the GDN prefill kernels: the released shapes cut to 4 layers (3 GDN, 1 QSA), the
  # two chunk kernels' times at 4,096 rows under Nsight Compute, then prefill figures of that model
  g4=/tmp/rel4.gguf
  [ -f $g4 ] || $B synth --released --sparse --type q4_k_m --layers 4 -o $g4 > /dev/null 2>&1
  timeout 120 ncu --clock-control none --cache-control none -k regex:gdn_chunk --csv --log-file "$out/ncu_gdn.csv" \
    --metrics gpu__time_duration.sum $B bench -m $g4 --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 \
    > /dev/null 2>&1
  echo "ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu_gdn.csv" | tee "$out/ncu_gdn.md"
  timeout 120 $B bench -m $g4 --backend cuda --random-weights -p 4096,8192 -n 1 -b 1 --ctx 1 -r 2 2> "$out/gdn.err" |
    grep -E "pp"
  ;;
qsa)
  # The QSA attention of a 4,096-token prompt on the released shapes cut to 4 layers (1 QSA layer):
  # the prefill launches take ~10-20 ms, the decode ones ~11 µs
  g4=/tmp/rel4.gguf
  [ -f $g4 ] || $B synth --released --sparse --type q4_k_m --layers 4 -o $g4 > /dev/null 2>&1
  for tc in 0 1; do
    TURBOSPARK_CUDA_QSA_TC=$tc timeout 100 ncu --clock-control none --cache-control none -k regex:qsa_attn --csv \
      --log-file "$out/ncu_qsa$tc.csv" --metrics gpu__time_duration.sum \
      $B bench -m $g4 --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > /dev/null 2>&1
    echo "TURBOSPARK_CUDA_QSA_TC=$tc ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu_qsa$tc.csv" | tee "$out/ncu_qsa$tc.md"
  done
  ;;
gemm)
  # The tensor-core GEMM in a 4,096-token prompt: the launch table with each launch's grid, then the
  # sections of four launches of the first layer (launch counts: 0 the hyper-connection split product,
  # 1 the GDN qkv in Q5_K, 9 the routed gate|up, 11 the routed down in Q8_0; the last with the source
  # counters). "gemm quick": the GEMM's twin tests, the golden fixtures, prefill figures and the launch
  # table, then test_cuda_forward for the time that is left (a loop for GEMM changes).
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  if [ "${2:-}" = quick ]; then
    (timeout 150 $D/test_cuda_gemm --quick) > "$out/gemm.txt" 2>&1
    echo "gemm rc=$?"; grep -E "FAIL" "$out/gemm.txt" | head -8; tail -2 "$out/gemm.txt"
    (TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 150 bash tests/cuda/golden_cuda.sh) > "$out/golden.txt" 2>&1
    echo "golden rc=$?"; grep -E "CUDA vs|FAIL|Error|assert" "$out/golden.txt" | head -8
    wait
    timeout 120 $B bench -m $rel --backend cuda --random-weights -p 512,8192 -n 16 -b 1 --ctx 1 -r 1 2>/dev/null | grep -E "pp|tg"
  fi
  wait
  timeout 200 ncu --clock-control none --cache-control none --csv --log-file "$out/ncu_gemm_launches.csv" -k regex:gemm_tc \
    --metrics gpu__time_duration.sum,launch__grid_size,dram__bytes_read.sum,lts__t_bytes.sum \
    $B bench -m $rel --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > /dev/null 2>&1
  echo "ncu launches rc=$?"
  python3 tools/ncu_launches.py "$out/ncu_gemm_launches.csv" | tee "$out/ncu_gemm_launches.md"
  if [ "${2:-}" = quick ]; then
    (TURBOSPARK_CUDA_GEMV_TC=1 timeout ${FWD_S:-200} $D/test_cuda_forward /tmp) > "$out/fwd.txt" 2>&1
    echo "fwd rc=$?"; grep -a -E "FAIL|logits:|micro-batch 1" "$out/fwd.txt" | head -24
    exit 0
  fi
  for skip in 0 1 9 11; do
    timeout 100 ncu --clock-control none --cache-control none -k regex:gemm_tc_kernel --launch-skip $skip --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis \
      $([ $skip = 11 ] && echo --section SourceCounters --section InstructionStats) \
      $B bench -m $rel --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > "$out/sec_gemm$skip.txt" 2>&1
    echo "sections of launch $skip rc=$?"; grep -E "gemm_tc_kernel|Duration|Compute \(SM\) Throughput|Memory Throughput|Achieved Occupancy|Registers|Stall|Issue Slots" "$out/sec_gemm$skip.txt" | head -14
  done
  ;;
gemvmb)
  # where's sections of one Q4_K 2560 -> 10240 launch of bench_cuda_matmul (no model needed; its weights in L2
  # after the first replay pass), with the source counters, then the microbenchmark.
  timeout 200 ncu --clock-control none --cache-control none -k regex:gemv_tc_kernel --launch-skip 40 \
    --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SourceCounters \
    $D/bench_cuda_matmul 3 q4_K > "$out/mb_ncu.txt" 2>&1
  echo "== ncu rc=$?"
  grep -E "gemv_tc_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Block Limit|Waves|Issue Slots|Eligible|Bank" "$out/mb_ncu.txt" | head -20
  grep -E "^ +Stall|smsp__pcsamp|Warp Cycles Per" "$out/mb_ncu.txt" | head -10
  echo "== bench_cuda_matmul (with the phase stamps of one more launch a shape)"
  BENCH_STAMPS=1 timeout 100 $D/bench_cuda_matmul 10 ${GEMVMB_TYPES:-q4_K q5_K q6_K q8_0 q5_0} 2>&1 | grep -E "^q|copy|stamps"
  ;;
land)
  # Before landing a prefill or attention change: test_cuda_gemm, the golden fixtures, test_cuda_forward (FWD_S seconds, 200; the CPU twin
  # rounds q, k, v as the 16-bit K/V caches do), the attention kernels' times at 4,096 rows (`qsa`),
  # prefill and decode with everything on, without the x-resident form and without the tensor-core
  # hyper-connection products, the sections of one hyper-connection up launch, batch-1 decode at 32K.
  # The real-width gate is `realwidth` (its own call).
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  (timeout 150 $D/test_cuda_gemm --quick) > "$out/gemm.txt" 2>&1
  echo "gemm rc=$?"; grep -E "FAIL" "$out/gemm.txt" | head -8; tail -2 "$out/gemm.txt"
  (TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 150 bash tests/cuda/golden_cuda.sh) > "$out/golden.txt" 2>&1
  echo "golden rc=$?"; grep -E "CUDA vs|FAIL|Error|assert" "$out/golden.txt" | head -8
  (TURBOSPARK_CUDA_GEMV_TC=1 timeout ${FWD_S:-200} $D/test_cuda_forward /tmp) > "$out/fwd.txt" 2>&1
  echo "fwd rc=$?"; grep -a -E "FAIL|logits:|micro-batch 1" "$out/fwd.txt" | head -24
  bash "$0" qsa
  wait
  for env in TURBOSPARK_CUDA_GEMM_XR=1 TURBOSPARK_CUDA_GEMM_XR=0 TURBOSPARK_CUDA_HC_SPLIT=0; do
    echo "== $env"
    env $env timeout 120 $B bench -m $rel --backend cuda --random-weights -p 512,8192 -n 16 -b 1 --ctx 1 -r 1 2>/dev/null | grep -E "pp|tg"
  done
  timeout 120 $B bench -m $rel --backend cuda --random-weights -p 0 -n 16 -b 64 --ctx 1 -r 1 2>/dev/null | grep -E "tg"
  timeout 120 $B bench -m $rel --backend cuda --random-weights -p 0 -n 16 -b 1 -d 32768 -r 1 2>/dev/null | grep -E "tg"
  timeout 100 ncu --clock-control none --cache-control none -k regex:gemm_tc --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    $B bench -m $rel --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > "$out/sec_hcup.txt" 2>&1
  echo "sections of the hyper-connection up rc=$?"; grep -E "gemm_tc_kernel|Duration|Throughput|Occupancy|Registers|Stall|Issue Slots|Warp Cycles" "$out/sec_hcup.txt" | head -24
  ;;
wg)
  # The warpgroup-MMA products: test_cuda_gemm --wg (cases, times against gemm_tc_kernel), the golden
  # fixtures and test_cuda_forward (FWD_S seconds, 200) as built (the dense products on them), prefill with
  # TURBOSPARK_CUDA_GEMM_WG=1 (the grouped ones too), as built and =0 (neither), then Nsight Compute's
  # sections of one Q5_K launch (GDN qkv) in a 4,096-token prompt; WG_RW=1: the twin cases, prefill, then
  # the real-width gate as built (no golden, forward, ncu)
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  (timeout 120 $D/test_cuda_gemm --wg) > "$out/wg.txt" 2>&1
  echo "wg rc=$?"; tail -12 "$out/wg.txt"
  if [ "${WG_RW:-0}" = 0 ]; then
    (TS_BIN=$B TS_FIXTURES=tests/fixtures TS_TMP=/tmp/g timeout 150 bash tests/cuda/golden_cuda.sh) > "$out/golden.txt" 2>&1
    echo "golden rc=$?"; grep -E "CUDA vs|FAIL|Error|assert" "$out/golden.txt" | head -8
    (TURBOSPARK_CUDA_GEMV_TC=1 timeout ${FWD_S:-200} $D/test_cuda_forward /tmp) > "$out/fwd.txt" 2>&1
    echo "fwd rc=$?"; grep -a -E "FAIL|logits:|micro-batch 1" "$out/fwd.txt" | head -24
  fi
  wait
  for wg in 1 "" 0; do
    echo "== TURBOSPARK_CUDA_GEMM_WG=${wg:-(unset)}"
    TURBOSPARK_CUDA_GEMM_WG=$wg timeout 120 $B bench -m $rel --backend cuda --random-weights -p 512,8192 -n 16 -b 1 --ctx 1 -r 1 2>/dev/null | grep -E "pp|tg"
  done
  if [ "${WG_RW:-0}" = 1 ]; then
    bash $0 realwidth
    exit
  fi
  TURBOSPARK_CUDA_GEMM_WG=1 timeout 100 ncu --clock-control none --cache-control none -k regex:gemm_wg_kernel --launch-skip 0 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats \
    $B bench -m $rel --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > "$out/sec_wg.txt" 2>&1
  echo "sections rc=$?"; grep -E "gemm_wg_kernel|Duration|Throughput|Occupancy|Registers|Stall|Issue Slots|Warp Cycles" "$out/sec_wg.txt" | head -24
  ;;
wgncu)
  # Nsight Compute's time, instructions and registers of every GEMM launch of test_cuda_gemm --wg (warpgroup
  # MMAs, the tensor-core GEMM, their x conversions), the median a (kernel, grid)
  timeout 240 ncu --csv --metrics gpu__time_duration.sum,smsp__inst_executed.sum,launch__registers_per_thread \
    -k regex:"gemm_wg_kernel|gemm_tc_kernel|x_prep" $D/test_cuda_gemm --wg 2>/dev/null > "$out/wgncu.csv"
  echo "ncu rc=$?"
  python3 tools/ncu_medians.py "$out/wgncu.csv"
  # then where the warpgroup kernel's warps wait: the stall reasons an issued instruction, the largest six
  timeout 240 ncu --csv --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    -k regex:gemm_wg_kernel $D/test_cuda_gemm --wg 2>/dev/null > "$out/wgstall.csv"
  echo "ncu stalls rc=$?"
  python3 tools/ncu_medians.py "$out/wgstall.csv" 6
  ;;
batch)
  # Many streams: is one GEMV an item (each item re-reads its expert) or the grouped products (an expert's
  # rows read once a tile of its items) faster at 8-64 rows; then where a 64-row step goes, both ways
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  for g in "" 1 x0; do # x0: the expert products of more than 8 x rows off the tensor cores (TURBOSPARK_TC_XROW=0)
    echo "== TURBOSPARK_CUDA_MOE_GROUPED=${g#x0}$([ "$g" = x0 ] && echo ' TURBOSPARK_TC_XROW=0')"
    env $([ "$g" = x0 ] && echo TURBOSPARK_TC_XROW=0) TURBOSPARK_CUDA_MOE_GROUPED=${g#x0} timeout 200 $B bench -m $rel \
      --backend cuda --random-weights -p 0 -n 32 -b 1,8,16,32,64 --ctx 1 -r 2 2> "$out/batch$g.err" |
      tee "$out/batch$g.txt" | grep -E "tg|experts"
  done
  for g in "" 1; do
    TURBOSPARK_CUDA_MOE_GROUPED=$g timeout 150 ncu --clock-control none --cache-control none --profile-from-start off --csv \
      --log-file "$out/ncu_b64g$g.csv" --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b 64 --profile-batch 64 --ctx 1 -r 1 > /dev/null 2>&1
    echo "ncu b64 grouped=$g rc=$?"; python3 tools/ncu_table.py "$out/ncu_b64g$g.csv" | tee "$out/ncu_b64g$g.md" | head -24
  done
  ;;
chain)
  # One persistent kernel for a chain of decode products (issue 21): exact against ts_cuda_matmul, and what
  # the launches between products cost
  for wa in 0 1; do
    (TURBOSPARK_PERSIST_WA=$wa timeout 120 $D/test_cuda_chain) > "$out/chain$wa.txt" 2>&1
    echo "chain twin WA=$wa rc=$?"; grep -E "FAIL|differ|refused|launch|passed|largest" "$out/chain$wa.txt" | head -14
  done
  for wa in 0 1; do
    echo "== TURBOSPARK_PERSIST_WA=$wa"
    TURBOSPARK_PERSIST_WA=$wa timeout 150 $D/test_cuda_chain --bench 2>&1 | tee "$out/chain_bench$wa.txt"
  done
  ;;
speed)
  # Decode at batch 1 to 64, then prefill at the default micro-batch (4,096 on CUDA) and at 512 to 4,096
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  timeout 200 $B bench -m $rel --backend cuda --random-weights -p 512,8192 -n 32 -b 1,8,16,64 --ctx 1 -r 2 \
    2> "$out/speed.err" | tee "$out/speed.txt" | grep -E "pp|tg"
  timeout 250 $B bench -m $rel --backend cuda --random-weights -p 8192 -ub 512,1024,2048,4096 -n 1 -b 1 --ctx 1 \
    -r 1 2> "$out/ub.err" | tee "$out/ub.txt" | grep -E "pp"
  ;;
ud)
  # UD mixes at the released shapes on the GPU held to a smaller card's memory (bench --gpu-mem): an
  # 80 GB card reports 79.1 GiB, a 48 GB one 44.5; q4_k_m must be refused at 79.1.
  for spec in ud_iq2_xxs:79.1:1,8,64 ud_q2_k_xl:79.1:1,8 ud_iq1_m:44.5:1,4 q4_k_m:79.1:1; do
    IFS=: read -r mix mem bs <<<"$spec"
    f=/tmp/rel_$mix.gguf
    [ $mix = q4_k_m ] && f=$rel
    [ -f $f ] || $B synth --released --sparse --type $mix -o $f > /dev/null 2>&1
    echo "== $mix, --gpu-mem $mem --ple host, -b $bs"
    timeout 200 $B bench -m $f --backend cuda --random-weights --gpu-mem $mem --ple host -p 0 -n 32 -b $bs --ctx 1 -r 2 \
      2> "$out/ud_$mix.err" | tee "$out/ud_$mix.txt" | grep -E "tg|GPU|memory|block"
    echo "rc=${PIPESTATUS[0]}"; grep -E "^bench:|turbospark bench" "$out/ud_$mix.err" | head -3
  done
  ;;
sweep)
  # The tensor-core GEMV's knobs at one token: dense products on it (TURBOSPARK_CUDA_GEMV_TC=2),
  # warps a block and blocks an SM; the GEMV microbenchmark and batch-1 decode for each.
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  for cfg in "1 4 4" "2 4 4" "2 8 4" "2 4 8" "2 8 8"; do
    set -- $cfg
    echo "== GEMV_TC=$1 TC_WARPS=$2 TC_PER_SM=$3"
    export TURBOSPARK_CUDA_GEMV_TC=$1 TURBOSPARK_TC_WARPS=$2 TURBOSPARK_TC_PER_SM=$3
    (timeout 100 $D/bench_cuda_matmul 10 q4_K q5_K) 2>&1 | grep -E "^(q4_K|q5_K)|copy" | head -8
    timeout 100 $B bench -m $rel --backend cuda --random-weights -p 0 -n 32 -b 1 --ctx 1 -r 2 2>/dev/null | grep -E "tg"
  done
  unset TURBOSPARK_CUDA_GEMV_TC TURBOSPARK_TC_WARPS TURBOSPARK_TC_PER_SM
  ;;
wa)
  # The tensor-core GEMV with the weights as the MMAs' A operand (TURBOSPARK_TC_WA=1): its twin and the
  # forward's under the gate, then decode b1/8 and the GEMV microbenchmark both ways
  [ -f $rel ] || { $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1 & }
  (TURBOSPARK_TC_WA=1 timeout 200 $D/test_cuda_matmul --quick) > "$out/twin_wa.txt" 2>&1
  echo "twin WA=1 rc=$?"; grep -E "FAIL" "$out/twin_wa.txt" | head -8; tail -2 "$out/twin_wa.txt"
  (TURBOSPARK_TC_WA=1 TURBOSPARK_CUDA_GEMV_TC=1 timeout ${FWD_S:-200} $D/test_cuda_forward /tmp) > "$out/fwd_wa.txt" 2>&1
  echo "fwd WA=1 rc=$?"; grep -a -E "FAIL|logits:|passed" "$out/fwd_wa.txt" | head -20
  wait
  for wa in 0 1; do
    echo "== TURBOSPARK_TC_WA=$wa"
    TURBOSPARK_TC_WA=$wa timeout 150 $B bench -m $rel --backend cuda --random-weights -p 0 -n 32 -b 1,8 --ctx 1 -r 2 \
      2> "$out/bench_wa$wa.err" | grep -E "tg"
    (TURBOSPARK_TC_WA=$wa timeout 100 $D/bench_cuda_matmul 20) > "$out/gemv_wa$wa.txt" 2>&1
    grep -E "^(q4_K|q5_K|q6_K|q8_0|q5_0)" "$out/gemv_wa$wa.txt" | head -14
  done
  ;;
sass)
  # The SASS of the kernels whose names match SASS_FUNS (a regex, default: the router, the hyper-connection
  # read's two kernels and the decode GEMV), from the bundle's turbospark, with each one's registers; the
  # development machine has no cuobjdump. One file, $out/sass.txt.xz.
  funs=${SASS_FUNS:-router_fused_kernel|hc_up_mix_kernel|matmul_split_hc_write_kernel|gemv_tc_kernel}
  cuobjdump -sass $B 2> "$out/sass.err" | awk -v re="$funs" '/Function : /{keep = ($0 ~ re)} keep' | xz -9 > "$out/sass.txt.xz"
  cuobjdump -res-usage $B 2>/dev/null | grep -A1 -E "$funs" | grep -oE "REG:[0-9]+|Function [^ ]+" | paste - - | head -40
  ls -la "$out/sass.txt.xz"; head -c 300 "$out/sass.err"
  ;;
where)
  # Where a batch-1 step goes: the warm per-kernel table, then the sections and the SASS-level source counters
  # (where the issued instructions and the stalls sit) of one fused routed down launch (Q5_0 = type 6, Q8_0 = 8),
  # one dense Q4_K launch and one routed gate/up launch, each the 11th of its kind; the source pages go back
  # compressed.
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  [ "${WHERE_TABLE:-1}" = 0 ] || bash "$0" table 1
  i=0 # (ncu's demangled names read "gemv_tc_kernel<(int)12, ts_cu::<unnamed>::dense_chunks<(int)16>, ...")
  IFS=';' read -r -a kernels <<< "${WHERE_KERNELS:-regex:gemv_tc_kernel<.int.(6|8), .*expert_chunks<.int.16, .bool.1, .bool.1>;regex:gemv_tc_kernel<.int.12, .*dense_chunks;regex:gemv_tc_kernel<.int.12, .*expert_chunks<.int.16, .bool.0}"
  for k in "${kernels[@]}"; do
    timeout 150 ncu --clock-control none --cache-control none --kernel-name-base demangled -k "$k" --launch-skip ${WHERE_SKIP:-10} \
      --launch-count 1 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
      --section LaunchStats --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section SourceCounters \
      --section InstructionStats -o "$out/where$i" -f \
      $B bench -m $rel --backend cuda --random-weights -p 0 -n 2 -b 1 --ctx 1 -r 1 > "$out/where$i.log" 2>&1
    echo "== $k rc=$?"
    ncu -i "$out/where$i.ncu-rep" --print-details all > "$out/where$i.txt" 2>&1
    grep -E "_kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Issue Slots|Eligible|Executed Instructions  " \
      "$out/where$i.txt" | head -12
    grep -E "^ +Stall|Warp Cycles Per" "$out/where$i.txt" | head -10
    ncu -i "$out/where$i.ncu-rep" --page source --csv --print-source sass 2> "$out/where${i}_src.err" | xz -9 > "$out/where${i}_sass.csv.xz"
    ls -la "$out/where${i}_sass.csv.xz"; head -c 300 "$out/where${i}_src.err"; rm -f "$out/where${i}_src.err" "$out/where$i.log"
    rm -f "$out/where$i.ncu-rep"
    i=$((i + 1))
  done
  ;;
table)
  # The warm per-kernel table of one decode step at batch ${2:-64} (where a many-streams step goes).
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  timeout 400 ncu --clock-control none --cache-control none --profile-from-start off --csv --log-file "$out/ncu_b${2:-64}.csv" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b ${2:-64} --profile-batch ${2:-64} --ctx 1 -r 1 > /dev/null 2>&1
  echo "ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu_b${2:-64}.csv" | tee "$out/ncu_b${2:-64}.md" | head -40
  ;;
prefill)
  # Prefill figures, then where one 4,096-token prompt's GPU time goes (one micro-batch: the CUDA
  # default), kernel by kernel (ncu with warm caches; the sum includes bench's warm-up prompt and one
  # decode step; nsys cannot write reports on this machine).
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  timeout 300 $B bench -m $rel --backend cuda --random-weights -p 512,${2:-8192} -n 1 -b 1 --ctx 1 -r 1 2> "$out/pp.err" |
    tee "$out/pp.txt" | grep -E "pp|tg"
  timeout 300 ncu --clock-control none --cache-control none --csv --log-file "$out/ncu_pp4096.csv" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $B bench -m $rel --backend cuda --random-weights -p 4096 -n 1 -b 1 --ctx 1 -r 1 > /dev/null 2>&1
  echo "ncu rc=$?"; python3 tools/ncu_table.py "$out/ncu_pp4096.csv" | tee "$out/ncu_pp4096.md" | head -30
  ;;
diag)
  # Why the decode kernels are slow: a per-kernel table with warm caches (as in a real step), and
  # Nsight Compute's stall and occupancy sections for the main kernels of a batch-1 step.
  [ -f $rel ] || $B synth --released --sparse --type q4_k_m $rel_layers -o $rel > /dev/null 2>&1
  ls -d /opt/nvidia/nsight-systems*/*/bin /usr/local/cuda*/nsight-systems* /usr/local/cuda/bin/nsys 2>/dev/null; command -v nsys
  timeout 300 ncu --clock-control none --cache-control none --profile-from-start off --csv --log-file "$out/ncu_warm.csv" \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b 1 --ctx 1 -r 1 > /dev/null 2>&1
  echo "ncu warm rc=$?"; python3 tools/ncu_table.py "$out/ncu_warm.csv" | tee "$out/ncu_warm.md" | head -40
  for k in gemv_tc_kernel matmul_blocks_kernel hc_write_norm_kernel hc_up_mix_kernel router_kernel matmul_split_kernel; do
    timeout 120 ncu --clock-control none --cache-control none --profile-from-start off -k regex:$k --launch-skip 6 --launch-count 1 \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy --section LaunchStats \
      --section MemoryWorkloadAnalysis --section SourceCounters \
      $B bench -m $rel --backend cuda --random-weights -p 0 -n 1 -b 1 --ctx 1 -r 1 > "$out/sec_$k.txt" 2>&1
    echo "sections $k rc=$?"
  done
  ;;
esac
