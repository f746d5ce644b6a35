// The CUDA forward's context and sequences, shared by src/cuda/forward.cu (the context, the micro-batches,
// the layer loop) and src/cuda/seq.cu (sequences, their copies and snapshots). Private to the backend:
// the interface is src/cuda/forward.h.
#ifndef TS_CUDA_FORWARD_CTX_CUH
#define TS_CUDA_FORWARD_CTX_CUH

extern "C" {
#include "common/range_alloc.h"
}
#include "cuda/forward.h"
#include "cuda/layers.h"

#include <cuda_runtime.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

struct ts_cuda_seq {
    ts_cuda_ctx *c;
    int64_t n_ctx, pos;
    void *mem; // one device allocation
    size_t bytes;
    void **ptr; // [L · TS_CUDA_STATE_KINDS] host copy of the state pointers
};

struct ts_cuda_ctx {
    const ts_model *m;
    ts_cuda_options o;
    ts_cuda_plan plan;
    char device_name[256];
    ts_cuda_model cm;
    void *weights = nullptr;    // device arena of the weights (and the table when on the GPU)
    void *table_host = nullptr; // pinned host table
    void *consts = nullptr;     // device hash constants and per-head table descriptors
    void *ballast = nullptr;    // the device memory beyond o.gpu_mem, held unused (ts_cuda_params)
    cudaStream_t stream = nullptr;
    pthread_mutex_t mu;
    // workspaces
    ts_cuda_work w;
    void *work_mem = nullptr;
    int64_t scratch_ctx = 0;                                   // the context the scratch is sized for
    float *Rsel = nullptr, *xsel = nullptr, *logits = nullptr; // logit rows: N × W, N × H, kMaxLogitRows × V
    // micro-batch tables: device and pinned host mirrors of the same layout
    ts_cuda_batch b;
    int32_t *tab_dev = nullptr, *tab_host = nullptr; // ids, pos, row_seq, seq_row0, lrows
    void **state_dev = nullptr, **state_host = nullptr;
    float *logits_host = nullptr; // pinned kMaxLogitRows × V
    // graphs of decode steps, by row count
    cudaGraphExec_t *graphs = nullptr; // [max_rows + 1]
    bool *warm = nullptr;              // [max_rows + 1] an eager step of this size ran
    // ts_cuda_forward's host tables, allocated with the context (no allocation a call):
    int *l_seq = nullptr;     // [max_rows] the batch entry of each logit row of a micro-batch
    int64_t *l_tok = nullptr; // [max_rows] its token within the entry
    int64_t *done = nullptr;  // [max_rows] tokens of each entry already run
    bool use_graphs = true;
    ts_cuda_trace_fn trace = nullptr;
    void *trace_ctx = nullptr;
    double *prof = nullptr; // profile accumulation (ms per kind) when set
    cudaEvent_t prof_ev[2];
    // TURBOSPARK_CUDA_STEP_TIME=1: the GPU time of the decode graphs' replays (events around each launch),
    // printed when the context is freed, so that a step's host time is the wall time less this
    cudaEvent_t step_ev[2] = {nullptr, nullptr};
    double step_ms = 0;
    int64_t step_n = 0;
    // snapshots kept on the device: one reservation of o.snapshot_bytes, cut into ranges (under mu)
    void *snap_mem = nullptr;
    ts_range_alloc *snap_ranges = nullptr;
};

namespace ts_cu {
// (Re)allocates the context's workspaces for micro-batches of c->o.max_rows rows at context ctx (the
// memory plan's layout) and drops the decode graphs captured with the old ones; under c->mu once the
// context exists. 0, or -1 with the reason in err.
int alloc_work(ts_cuda_ctx *c, int64_t ctx, char *err, size_t errlen);
} // namespace ts_cu

#endif
