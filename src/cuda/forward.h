/* The qwen4exp forward on one CUDA GPU (C interface of src/cuda/forward.cu), the twin of
 * src/cpu/forward.c: the same layer loop over the blocks of src/cuda/layers.h.
 *
 *   ts_cuda_ctx   the model's weights on the GPU (uploaded once, in their file encoding) plus one
 *                 runner: a stream, the workspaces for micro-batches of up to max_rows rows, the
 *                 micro-batch tables and the captured decode graphs. One forward at a time (a
 *                 mutex serialises callers).
 *   ts_cuda_seq   one sequence's state on the GPU (K/V and indexer caches, GDN conv and recurrent
 *                 state, PLE histories), sized once for its context.
 *
 * ts_cuda_forward runs any mix of sequences and token counts: rows are packed into micro-batches
 * of up to max_rows rows (a sequence's tokens stay in order and may span micro-batches). A
 * micro-batch of one token for each of N sequences (batched decode) is captured once as a CUDA
 * graph per N and replayed; positions, ids and state pointers live in device tables the graph
 * reads, updated before each replay. TURBOSPARK_CUDA_GRAPH=0 runs every step eagerly. */
#ifndef TS_CUDA_FORWARD_H
#define TS_CUDA_FORWARD_H

#include "model/qwen4exp.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ts_cuda_params and ts_ple_placement: include/turbospark.h */
typedef ts_cuda_params ts_cuda_options;

/* The memory plan, computed before anything is allocated. */
typedef struct ts_cuda_plan {
    size_t weights;     /* device bytes of the trunk weights (matrices in file encoding, vectors fp32) */
    size_t table;       /* bytes of the PLE table */
    bool table_on_host; /* chosen placement of the table */
    size_t seq_state;   /* device bytes of one sequence's state at plan_ctx */
    size_t work;        /* device bytes of the runner's workspaces */
    size_t snapshots;   /* device bytes reserved for snapshots (ts_cuda_params.snapshot_bytes) */
    size_t free_bytes, total_bytes; /* the GPU's memory when planned */
} ts_cuda_plan;

typedef struct ts_cuda_ctx ts_cuda_ctx;
typedef struct ts_cuda_seq ts_cuda_seq;

/* Plans, then uploads the trunk weights (MTP blocks are not used) and creates the runner.
 * Refuses with the numbers when the plan does not fit the GPU. */
int ts_cuda_ctx_new(const ts_model *m, const ts_cuda_options *o, ts_cuda_ctx **out, char *err, size_t errlen);
void ts_cuda_ctx_free(ts_cuda_ctx *c);
const ts_cuda_plan *ts_cuda_ctx_plan(const ts_cuda_ctx *c);
const char *ts_cuda_ctx_device_name(const ts_cuda_ctx *c);
int64_t ts_cuda_ctx_max_rows(const ts_cuda_ctx *c); /* rows of one micro-batch (ts_cuda_params.max_rows) */

int ts_cuda_seq_new(ts_cuda_ctx *c, int64_t n_ctx, ts_cuda_seq **out, char *err, size_t errlen);
void ts_cuda_seq_free(ts_cuda_seq *q);
int ts_cuda_seq_reset(ts_cuda_seq *q, char *err, size_t errlen); /* back to an empty sequence */
int64_t ts_cuda_seq_pos(const ts_cuda_seq *q);
int64_t ts_cuda_seq_n_ctx(const ts_cuda_seq *q);
size_t ts_cuda_seq_bytes(const ts_cuda_seq *q);
/* Copies of a sequence's state: the regions its position uses (caches up to the position, the
 * recurrent, convolution and n-gram states whole). dst := src within one context (src's tokens fit
 * dst); snapshot bytes for the sequence at its position, written to host or device memory (any
 * pointer: ts_cuda_snap_alloc's, malloc's), and loaded back into a sequence (bytes and pos checked against this model's layout). Each waits for its copies. */
int ts_cuda_seq_copy(ts_cuda_seq *dst, const ts_cuda_seq *src, char *err, size_t errlen);
size_t ts_cuda_seq_snapshot_bytes(const ts_cuda_seq *q);
int ts_cuda_seq_snapshot_save(const ts_cuda_seq *q, void *data, char *err, size_t errlen);
int ts_cuda_seq_snapshot_load(ts_cuda_seq *q, const void *data, size_t bytes, int64_t pos, char *err,
                              size_t errlen);

/* Memory for snapshots (ts_backend_ops.snap_*): a range of the context's reservation of
 * ts_cuda_params.snapshot_bytes (TS_SNAPSHOT_DEVICE; NULL when no free range is that large), or
 * pinned host memory (TS_SNAPSHOT_HOST; NULL when refused); what the reservation holds now (bytes
 * of its ranges, rounded up to 256, and how many); a copy between any two memories, waited for. */
void *ts_cuda_snap_alloc(ts_cuda_ctx *c, ts_snapshot_place where, size_t bytes);
void ts_cuda_snap_free(ts_cuda_ctx *c, ts_snapshot_place where, void *p);
bool ts_cuda_snap_fits(ts_cuda_ctx *c, size_t bytes);
void ts_cuda_snap_usage(ts_cuda_ctx *c, size_t *used, size_t *count);
int ts_cuda_snap_copy(ts_cuda_ctx *c, void *dst, const void *src, size_t bytes, char *err, size_t errlen);

/* One batched step: sequence i consumes ids[i][0..n[i]) at its next positions. logits[i] (may be
 * NULL, and logits itself may be NULL) receives the last token's V logits, or n[i] × V when
 * all_logits. Checks everything before running: a refused call leaves every sequence as it was. */
int ts_cuda_forward(ts_cuda_ctx *c, ts_cuda_seq *const *q, const int32_t *const *ids, const int64_t *n,
                    int n_seq, float *const *logits, bool all_logits, char *err, size_t errlen);

/* Tests: after the embedding (layer −1) and after each block (block 0 attention/GDN incl. PLE,
 * 1 MoE) of every eager micro-batch, fn gets the wide residual R (N × W, host copy). Graphs are
 * not used while a trace function is set. */
typedef void (*ts_cuda_trace_fn)(void *ctx, int layer, int block, const float *R, int64_t N);
void ts_cuda_set_trace(ts_cuda_ctx *c, ts_cuda_trace_fn fn, void *ctx);

/* Tests: how many hyper-connection writes this context has left to the fused read that follows them
 * (src/cuda/hc.cu; TURBOSPARK_CUDA_HC_DEFER=0 stops it), counted as the forwards were enqueued. */
int64_t ts_cuda_hc_writes_deferred(const ts_cuda_ctx *c);

/* Tests: how many expert products this context has run as planned GEMVs (src/cuda/moe.cu: the items of an
 * expert as one chunk's tokens; TURBOSPARK_CUDA_MOE_PLANNED), counted as the forwards were enqueued. */
int64_t ts_cuda_moe_planned_products(const ts_cuda_ctx *c);
/* Tests: how many MoE blocks of this context computed the SwiGLU in their down launch (src/cuda/moe.cu, one
 * token; TURBOSPARK_CUDA_SWIGLU_STAGED=0 stops it). */
int64_t ts_cuda_moe_swiglu_staged(const ts_cuda_ctx *c);
/* Tests: how many QSA blocks of this context ran their input projections as one product (src/cuda/qsa.cu, one
 * row; TURBOSPARK_CUDA_QSA_JOIN=0 stops it). */
int64_t ts_cuda_qsa_joined(const ts_cuda_ctx *c);
/* Tests: how many hyper-connection reads of this context ran as one launch (src/cuda/hc.cu, one token with
 * the write before it; TURBOSPARK_CUDA_HC_ONE=0 stops it), counted as the forwards were enqueued. */
int64_t ts_cuda_hc_one_reads(const ts_cuda_ctx *c);
/* How such a read is launched, for the process (src/cuda/hc.cu): -1 not yet known, 2 one cooperative launch
 * with PDL, 1 one cooperative launch, 0 two launches (the runtime took neither, or a decode graph refused
 * them: the forward then captures again one mode lower). */
int ts_cuda_hc_one_mode(void);

/* Benchmarks: GPU time of each block kind over one eager decode step of the given sequences (one
 * token each, ids as given; the sequences advance by one). times_ms[kind] for kinds
 * {embed, hc, ple, gdn, qsa, moe, output}; returns 0 or −1 with err. */
enum {
    TS_PROF_EMBED,
    TS_PROF_HC,
    TS_PROF_PLE,
    TS_PROF_GDN,
    TS_PROF_QSA,
    TS_PROF_MOE,
    TS_PROF_OUTPUT,
    TS_PROF_KINDS
};
extern const char *const ts_cuda_prof_names[TS_PROF_KINDS];
int ts_cuda_profile_step(ts_cuda_ctx *c, ts_cuda_seq *const *q, const int32_t *ids, int n_seq,
                         double *times_ms, char *err, size_t errlen);

/* The ts_cuda_seq of a CUDA session, NULL on the CPU backend (src/cuda/backend.c; benchmarks). */
ts_cuda_seq *ts_session_cuda_seq(ts_session *s);

/* Device memory read bandwidth (bytes/s), measured by a streaming-read kernel over a buffer much
 * larger than L2. */
double ts_cuda_measure_bandwidth(ts_cuda_ctx *c);

#ifdef __cplusplus
}
#endif

#endif
