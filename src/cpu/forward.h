/* The CPU forward of qwen4exp: per-sequence state (docs/MODEL.md §6) and the layer-by-layer
 * pass (MODEL.md §5).
 *
 * A sequence's state is sized once, at creation, for n_ctx tokens; the forward allocates nothing.
 * Prefill runs in chunks of up to `ubatch` tokens (each chunk is one call); decode is a chunk of 1.
 * Chunking is exact: every op that couples tokens (GDN conv and recurrence, PLE context and conv,
 * QSA caches) carries its state across calls. */
#ifndef TS_CPU_FORWARD_H
#define TS_CPU_FORWARD_H

#include "model/qwen4exp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct ts_seq_state {
    int64_t n_ctx;   /* capacity in tokens */
    int64_t pos;     /* tokens consumed so far = position of the next token */
    int64_t n_layer; /* trunk layers (length of the per-layer arrays) */
    /* per trunk layer l (NULL where layer l's kind does not use it) */
    float **k;       /* QSA: [n_ctx, nkv, hd] post-norm post-rope keys */
    float **v;       /* QSA: [n_ctx, nkv, hd] values */
    float **idx_raw; /* QSA: [n_ctx, di] raw indexer keys (no norm, no rope) */
    float **idx_blk; /* QSA: [n_ctx / B, di] pooled block keys (normed, roped at 4b), once complete */
    float **conv;    /* GDN: [Kc − 1, conv_dim] last raw qkv rows, oldest first */
    float **S;       /* GDN: [nv, dk, dv] fp32 recurrent state */
    float *ple_conv; /* PLE: [(Kp − 1)·n, W] last normalised gated rows, oldest first */
    int32_t ple_ctx[TS_MAX_NGRAM]; /* PLE: last n − 1 ids, most recent last (starts all EOS) */
    size_t bytes;                  /* total state bytes */
} ts_seq_state;

int ts_seq_state_init(ts_seq_state *st, const ts_model *m, int64_t n_ctx, char *err, size_t errlen);
void ts_seq_state_reset(ts_seq_state *st, const ts_model *m); /* back to an empty sequence */
void ts_seq_state_free(ts_seq_state *st);
/* dst := src (dst->n_ctx ≥ src->pos; states of one model): the recurrent parts whole, the
 * position-indexed caches up to src->pos. */
void ts_seq_state_copy(ts_seq_state *dst, const ts_seq_state *src, const ts_model *m);
/* The floats of st that hold a sequence of `pos` tokens, region by region in a fixed order: fn gets
 * each region's address and length. For packing a state (snapshots). ple_ctx and pos are apart. */
typedef void (*ts_seq_region_fn)(void *ctx, float *p, size_t n);
void ts_seq_state_regions(ts_seq_state *st, const ts_model *m, int64_t pos, ts_seq_region_fn fn, void *ctx);

typedef struct ts_cpu_work ts_cpu_work; /* workspaces for chunks of up to ubatch tokens */

ts_cpu_work *ts_cpu_work_new(const ts_model *m, int64_t ubatch, int64_t n_ctx, char *err, size_t errlen);
void ts_cpu_work_free(ts_cpu_work *w);
size_t ts_cpu_work_bytes(const ts_cpu_work *w);

/* Runs ids[0..T) (T ≤ ubatch) at positions st->pos … st->pos+T−1 and advances st. Writes logits
 * for every token (all_logits: T × V) or for the last one only (V), or none if logits is NULL.
 * Refuses, with a sentence, token ids ≥ V and a chunk that would pass n_ctx. */
int ts_cpu_forward(ts_cpu_work *w, ts_seq_state *st, const int32_t *ids, int64_t T, float *logits,
                   bool all_logits, char *err, size_t errlen);

/* One forward over several sequences together (continuous batching): sequence s runs ids[s][0..T[s])
 * at positions st[s]->pos … and advances; its rows follow those of sequence s − 1, Σ T[s] ≤ ubatch.
 * Every matrix product runs once over all the rows (each weight is read once per call); what
 * carries a sequence's state (GDN, QSA, PLE n-gram context and conv) runs per sequence on its rows.
 * logits[s] (V floats) gets the logits of sequence s's last token, unless logits or logits[s] is
 * NULL. The states must be distinct. Refuses, with a sentence and before anything changes, what
 * ts_cpu_forward refuses for any sequence and more than ubatch tokens in all. A sequence's numbers
 * are those of ts_cpu_forward on its tokens alone, up to the rounding of the matrix products (whose
 * kernels tile by token count; with TS_DOT=scalar they are bit-identical). n_seq = 1 is exactly
 * ts_cpu_forward. */
int ts_cpu_forward_batch(ts_cpu_work *w, ts_seq_state *const *st, const int32_t *const *ids, const int64_t *T,
                         int n_seq, float *const *logits, char *err, size_t errlen);

/* Tests: after the embedding (layer −1) and after each block (block 0: attention/GDN incl. PLE,
 * 1: MoE) of every forward call, fn gets the wide residual R (T × W; a batch's rows, all of them).
 * Process-wide; NULL turns it off. The CUDA twin is ts_cuda_set_trace. */
typedef void (*ts_cpu_trace_fn)(void *ctx, int layer, int block, const float *R, int64_t T);
void ts_cpu_set_trace(ts_cpu_trace_fn fn, void *ctx);

/* Diagnostics: the discrete choices of the forward, for every row it runs (docs/DECISIONS.md,
 * "Recording the forward's discrete choices"):
 *   TS_CPU_CHOICE_ROUTER   the MoE router of layer `layer`: ids = the k experts chosen, best first;
 *                          margin = the router logit of the k-th minus that of the (k+1)-th best expert
 *                          (0 when k = E);
 *   TS_CPU_CHOICE_INDEXER  the indexer of QSA layer `layer`, at a query with a choice (more complete
 *                          blocks than the budget, not forced dense): ids = the Kb blocks kept, in
 *                          ascending order; margin = the score of the Kb-th best block minus that of the
 *                          (Kb+1)-th (0 for a tie, which the lower block index wins).
 * seq is the row's sequence in its micro-batch, pos its position. fn runs on the forward's thread.
 * Process-wide, like ts_cpu_set_trace; NULL turns it off. Without a hook, TURBOSPARK_CPU_CHOICES=FILE
 * (read once; FILE is created anew at the process's first choice) gets every choice as a record of
 * 32-bit words in the machine's byte order: kind, layer, seq, pos (int32), margin (float32), n (int32),
 * then the n ids (int32); tools/oracle/choices.py reads and compares such files. */
enum { TS_CPU_CHOICE_ROUTER = 0, TS_CPU_CHOICE_INDEXER = 1 };
typedef void (*ts_cpu_choice_fn)(void *ctx, int kind, int layer, int seq, int64_t pos, float margin,
                                 int64_t n, const int64_t *ids);
void ts_cpu_set_choice_hook(ts_cpu_choice_fn fn, void *ctx);

#endif
