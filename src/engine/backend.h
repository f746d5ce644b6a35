/* The seam between the engine (src/engine/session.c) and a backend (src/cpu, src/cuda).
 *
 * A backend sees three things:
 *   a context   made once per model and backend, on first use (the CUDA one uploads the weights and
 *               owns the workspaces its sequences share); kept in ts_model.backend_ctx[kind];
 *   a sequence  one sequence's state (caches, recurrent states, n-gram context), sized at creation;
 *   a micro-batch  rows of one or more sequences, packed in order by the engine into tables that the
 *               hosting session allocated when it was created (ts_micro_batch).
 * The engine checks every batch before it calls forward (one model and backend, distinct sessions,
 * ids inside the vocabulary, room in every sequence), packs it into micro-batches of at most
 * max_rows rows and checks the logits afterwards; a backend's forward only runs. Sequences are
 * void pointers here: each backend knows its own type. */
#ifndef TS_ENGINE_BACKEND_H
#define TS_ENGINE_BACKEND_H

#include "model/qwen4exp.h"
#include "turbospark.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One forward call's rows: entry i runs ids[i][0..n[i]) on seq[i] at its next positions. The tables
 * hold `cap` entries (a micro-batch of R rows has at most R entries: every entry has a row). */
typedef struct ts_micro_batch {
    int n_seq;           /* entries in use */
    int cap;             /* entries the tables hold */
    void **seq;          /* [cap] the backend's sequences, distinct */
    const int32_t **ids; /* [cap] */
    int64_t *n;          /* [cap] tokens of each entry, ≥ 1; Σ n ≤ the host's max_rows */
    float **logits;      /* [cap] V logits of the entry's last token, or NULL for none */
    bool all_logits;     /* only with n_seq = 1: logits[0] gets n[0] × V logits, a row per token */
} ts_micro_batch;

/* The memory plan of a context (ts_cuda_params of the public header: the CPU backend plans each
 * sequence at its creation and ignores it). */
typedef ts_cuda_params ts_backend_plan;

typedef struct ts_backend_ops {
    const char *name; /* "CPU", "CUDA": for messages */
    int (*ctx_new)(const ts_model *m, const ts_backend_plan *p, void **ctx, char *err, size_t errlen);
    void (*ctx_free)(void *ctx);
    /* A sequence of n_ctx tokens; a micro-batch it hosts holds at most max_rows(ctx, seq) rows,
     * ubatch on the CPU (its workspaces), the context's max_rows on CUDA. */
    int (*seq_new)(void *ctx, int64_t n_ctx, int64_t ubatch, void **seq, char *err, size_t errlen);
    void (*seq_free)(void *seq);
    int (*seq_reset)(void *seq, char *err, size_t errlen); /* back to an empty sequence */
    int64_t (*seq_pos)(const void *seq);                   /* tokens consumed so far */
    size_t (*seq_bytes)(const void *seq);                  /* state + workspaces the sequence owns */
    int64_t (*max_rows)(const void *ctx, const void *seq);
    /* dst := src (dst's context holds src's tokens, the engine checked it). NULL: not implemented. */
    int (*seq_copy)(void *dst, const void *src, char *err, size_t errlen);
    /* A snapshot's bytes: snapshot_bytes for the sequence at its position, written by
     * snapshot_save; snapshot_load(seq, data, bytes, pos) makes seq hold them (pos ≤ its n_ctx, the
     * engine checked it; a size that does not fit the model is refused). NULL: not implemented. */
    size_t (*snapshot_bytes)(const void *seq);
    int (*snapshot_save)(const void *seq, void *data, char *err, size_t errlen);
    int (*snapshot_load)(void *seq, const void *data, size_t bytes, int64_t pos, char *err, size_t errlen);
    /* Memory for a snapshot's bytes besides malloc, where data above may also be (NULL: the backend
     * keeps snapshots in malloc'd host memory only). snap_alloc: a block of the context's reserved
     * device memory (TS_SNAPSHOT_DEVICE; NULL when no free block is that large) or of pinned host
     * memory (TS_SNAPSHOT_HOST; NULL when refused); snap_free gives either back; snap_fits says
     * whether a device block of that many bytes is free now; snap_copy copies bytes between any of
     * these memories and ordinary host memory, and waits for the copy. Safe from any thread. */
    void *(*snap_alloc)(void *ctx, ts_snapshot_place where, size_t bytes);
    void (*snap_free)(void *ctx, ts_snapshot_place where, void *p);
    bool (*snap_fits)(const void *ctx, size_t bytes);
    int (*snap_copy)(void *ctx, void *dst, const void *src, size_t bytes, char *err, size_t errlen);
    /* Runs the micro-batch (hosted by `host`, one of the context's sequences, whose workspaces the
     * CPU backend uses) and advances its sequences. Writes the logits the tables ask for. */
    int (*forward)(void *ctx, void *host, const ts_micro_batch *mb, char *err, size_t errlen);
    void (*info)(const void *ctx, ts_backend_info *out); /* out is zeroed, backend set */
    double (*bandwidth)(void *ctx); /* measured read bandwidth of the memory the weights are in, bytes/s */
    /* Benchmarks: the time of each block kind (names[k], ms[k], k < the returned count ≤
     * TS_PROFILE_MAX_KINDS) over one decode step of the n_seq sequences seqs (token ids[i] each, checked
     * by the engine; each advances by one), or −1 with err. NULL: not available. */
    int (*profile_step)(void *ctx, void *const *seqs, const int32_t *ids, int n_seq, const char **names,
                        double *ms, char *err, size_t errlen);
    bool needs_plan; /* the context needs a memory plan: ts_model_cuda_init or a first session makes it */
} ts_backend_ops;

extern const ts_backend_ops ts_cpu_backend;  /* src/cpu/backend.c */
extern const ts_backend_ops ts_cuda_backend; /* src/cuda/backend.c, in builds with the CUDA backend */

/* The backend of that kind in this build, or NULL (CUDA in a build without nvcc; an unknown kind). */
const ts_backend_ops *ts_backend_ops_of(ts_backend kind);

/* The backend's sequence of a session and its model (src/engine/session.c): for snapshots
 * (src/engine/snapshot.c) and backend-specific tools (ts_session_cuda_seq). */
void *ts_session_backend_seq(const ts_session *s);
const ts_model *ts_session_model(const ts_session *s);

#endif
