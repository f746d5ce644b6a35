#!/usr/bin/env bash
# The CUDA backend sizes its allocations with the memory plan (src/model/memplan.h), which
# test_memplan checks on the host; on the GPU, ts_cuda_ctx_new refuses when its upload lays out other
# bytes than the plan counts, and test_cuda_forward compares the backend's figures with the plan's.
# This check runs without a GPU (and without nvcc): the CUDA sources call the plan's functions where
# they allocate or lay out memory, and the size arithmetic they used to carry has not come back.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root/src/cuda"
fail=0
need() { # need FILE FUNCTION...: each function is called in FILE
  local f=$1; shift
  for fn in "$@"; do
    grep -q "\b$fn(" "$f" || { echo "FAIL: src/cuda/$f no longer calls $fn"; fail=1; }
  done
}
need forward.cu ts_memplan_make ts_memplan_place ts_memplan_work_layout
need seq.cu ts_memplan_seq_bytes ts_memplan_qsa_kv_bytes ts_memplan_idx_raw_bytes ts_memplan_idx_blk_bytes \
  ts_memplan_gdn_conv_bytes ts_memplan_gdn_state_bytes ts_memplan_ple_conv_bytes ts_memplan_ple_ctx_bytes
need upload.cu ts_memplan_matrix_bytes ts_memplan_vector_bytes ts_memplan_joinable ts_memplan_joined_bytes
need qsa.cu ts_memplan_qsa_layout ts_memplan_qsa_total ts_memplan_qsa_can_be_sparse ts_memplan_qsa_head_groups \
  ts_memplan_qsa_kv_record
need qsa_select.cuh ts_memplan_qsa_sel_row_words
need gdn.cu ts_memplan_gdn_alpha_bytes ts_memplan_gdn_zba_bytes ts_memplan_gdn_chunk_bytes
need moe.cu ts_memplan_moe_shared_floats ts_memplan_moe_expert_layout
need gemm.cu ts_memplan_expert_plan_ranges ts_memplan_expert_plan_max_tiles ts_memplan_expert_plan_bytes_for \
  ts_memplan_expert_plan_bytes
# a second copy of a formula: the old local helpers, or a take() that aligns by itself
for pat in 'size_t work_bytes(' 'size_t seq_bytes(' 'kMargin' 'kAlign' 'make_layout(' '_scratch_bytes(' \
  'used += align' 'kScoreBudget' 'kAttTarget'; do
  hits=$(grep -n -F -- "$pat" ./*.cu ./*.h ./*.cuh 2>/dev/null)
  [ -z "$hits" ] || { echo "FAIL: size arithmetic outside src/model/memplan.c ('$pat'):"; echo "$hits"; fail=1; }
done
# the kernels' constants that size scratch are the plan's
grep -q "kMaxGH = TS_MEMPLAN_QSA_MAX_GH" qsa.cu && grep -q "kMinSplitLen = TS_MEMPLAN_QSA_MIN_SPLIT" qsa.cu &&
  grep -q "kSelSlice = TS_MEMPLAN_QSA_SEL_SLICE" qsa_select.cuh &&
  grep -q "kPlanSmem = TS_MEMPLAN_EXPERT_PLAN_SMEM" gemm.cu &&
  grep -q "kMaxLogitRows = TS_MEMPLAN_MAX_LOGIT_ROWS" forward.cu ||
  { echo "FAIL: a kernel constant that sizes scratch is no longer the memory plan's"; fail=1; }
[ $fail -eq 0 ] && echo "memplan_cuda: ok"
exit $fail
