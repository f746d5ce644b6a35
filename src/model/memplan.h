/* The CUDA backend's memory plan as host arithmetic: the bytes of the weights on the GPU, of the
 * PLE table (on the GPU or in pinned host memory), of one sequence's state at a context (MODEL.md §6),
 * of the workspaces of micro-batches of max_rows rows, and whether they fit a GPU's free memory.
 *
 * src/cuda/forward.cu allocates exactly these sizes by calling these functions (and its blocks lay
 * out their scratch with the layouts below), so a plan can be computed, printed (`turbospark plan`)
 * and tested on any machine; ts_cuda_ctx_new also checks that its uploader laid the weights out in
 * the bytes ts_memplan_weights counts, and refuses to go on if not. Every device allocation of the
 * plan is rounded up to TS_MEMPLAN_ALIGN bytes. Each formula is written once, here; the per-token
 * sizes come from the layout arithmetic of src/model/qwen4exp.h. */
#ifndef TS_MODEL_MEMPLAN_H
#define TS_MODEL_MEMPLAN_H

#include "model/qwen4exp.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TS_MEMPLAN_ALIGN 256                   /* every device sub-allocation */
#define TS_MEMPLAN_MARGIN ((size_t)1 << 30)    /* kept free on the GPU: driver, graphs, fragmentation */
#define TS_MEMPLAN_MAX_LOGIT_ROWS 256          /* rows of logits computed per output launch */
#define TS_MEMPLAN_MATRIX_TAIL 16              /* spare bytes after every matrix's rows */
#define TS_MEMPLAN_MAX_SEQ_CTX (INT32_MAX / 2) /* the most tokens a CUDA sequence holds */
/* QSA attention (src/cuda/qsa.cu): query heads per thread block, positions a split covers at least,
 * thread blocks the split count aims at, floats of block scores per selection pass (64 MiB). */
#define TS_MEMPLAN_QSA_MAX_GH 16
#define TS_MEMPLAN_QSA_MIN_SPLIT 64
#define TS_MEMPLAN_QSA_ATT_TARGET 256
#define TS_MEMPLAN_QSA_SCORE_BUDGET ((int64_t)1 << 24)
/* The block selection over many thread blocks a row (src/cuda/qsa.cu): scores a thread block takes, the
 * fewest blocks of a row (max_ctx / B) for which it is used, rows a selection sub-pass takes at most. */
#define TS_MEMPLAN_QSA_SEL_SLICE 2048
#define TS_MEMPLAN_QSA_SEL_MIN 8192
#define TS_MEMPLAN_QSA_SEL_ROWS 64
/* The grouped expert GEMM's plan kernel (src/cuda/gemm.cu): shared memory for its counters. */
#define TS_MEMPLAN_EXPERT_PLAN_SMEM (96 * 1024)

static inline size_t ts_memplan_align(size_t n) {
    return (n + TS_MEMPLAN_ALIGN - 1) / TS_MEMPLAN_ALIGN * TS_MEMPLAN_ALIGN;
}

/* ---- weights ---------------------------------------------------------------------------------
 * Matrices stay in their file encoding (TS_MEMPLAN_MATRIX_TAIL spare bytes after the rows), vectors
 * and convolution kernels become fp32. Matrices that one product computes together (a
 * hyper-connection's down and inject rows; a GDN layer's z, β and α; a QSA layer's projections of its
 * input) are placed back to back as one allocation when ts_memplan_joinable says they can be. */
size_t ts_memplan_matrix_bytes(const ts_gguf_tensor *t); /* 0 for NULL */
size_t ts_memplan_vector_bytes(const ts_gguf_tensor *t); /* 0 for NULL */
/* All n present, of one type and row length, 2-D, and rows a multiple of 16 bytes (the CUDA backend
 * also needs a type its products read, which it checks itself). */
bool ts_memplan_joinable(const ts_gguf_tensor *const *t, int n);
size_t ts_memplan_joined_bytes(const ts_gguf_tensor *const *t, int n);
/* A QSA layer's q, k, v, idx_q and idx_k as the CUDA upload places them: one allocation when joinable, else
 * the four but v joined (or each alone) and v alone; 0 for a layer without them. */
size_t ts_memplan_qsa_in_bytes(const ts_layer_weights *L);
/* The trunk weights the GPU holds (MTP blocks are not uploaded) and the PLE table, in the order
 * src/cuda/forward.cu uploads them. */
void ts_memplan_weights(const ts_model *m, size_t *trunk, size_t *table);

/* ---- one sequence's state: each region one allocation, in this order a layer -------------------
 * QSA layers: K, V (n positions × nkv records of ts_memplan_qsa_kv_record bytes), raw indexer keys
 * (n × di), pooled block keys (ts_qsa_block_rows(n) × di); GDN layers: convolution history, recurrent
 * state; then, on the PLE layer, its convolution history and n-gram context (TS_MAX_NGRAM ids). With n a
 * position instead of a context, the first four are the bytes a snapshot at that position copies. All
 * fp32 but the K/V records: a (position, kv head)'s hd values as fp16 at a power-of-two scale (the
 * precision policy's 16-bit caches, src/cuda/qsa.cu), then the float inverse of that scale, the
 * record padded to a multiple of 16 bytes (528 at hd 256). */
size_t ts_memplan_qsa_kv_record(const ts_hparams *hp);
size_t ts_memplan_qsa_kv_bytes(const ts_hparams *hp, int64_t n);
size_t ts_memplan_idx_raw_bytes(const ts_hparams *hp, int64_t n);
size_t ts_memplan_idx_blk_bytes(const ts_hparams *hp, int64_t n);
size_t ts_memplan_gdn_conv_bytes(const ts_hparams *hp);
size_t ts_memplan_gdn_state_bytes(const ts_hparams *hp);
size_t ts_memplan_ple_conv_bytes(const ts_hparams *hp);
size_t ts_memplan_ple_ctx_bytes(void);

typedef struct ts_memplan_seq {
    size_t qsa_kv;  /* K and V caches of every QSA layer */
    size_t qsa_idx; /* raw and pooled indexer keys of every QSA layer */
    size_t gdn;     /* convolution histories and recurrent states of every GDN layer */
    size_t ple;     /* the PLE layer's convolution history and n-gram context */
    size_t total;   /* their sum: what one sequence of n_ctx tokens allocates */
} ts_memplan_seq;
size_t ts_memplan_seq_bytes(const ts_hparams *hp, int64_t n_ctx, ts_memplan_seq *parts /* or NULL */);

/* ---- workspaces: one allocation shared by the sequences, regions in this order ------------------
 * (src/cuda/layers.h, ts_cuda_work, says what each holds), then the blocks' shared scratch. */
enum {
    TS_WORK_R,
    TS_WORK_XN,
    TS_WORK_MIX,
    TS_WORK_LR,
    TS_WORK_X,
    TS_WORK_Y,
    TS_WORK_INJ,
    TS_WORK_QKV,
    TS_WORK_U,
    TS_WORK_Z,
    TS_WORK_O,
    TS_WORK_BA,
    TS_WORK_QG,
    TS_WORK_KV,
    TS_WORK_IQ,
    TS_WORK_IK,
    TS_WORK_ATT,
    TS_WORK_ROUTER,
    TS_WORK_TOPK_ID,
    TS_WORK_TOPK_W,
    TS_WORK_GU,
    TS_WORK_EO,
    TS_WORK_SG,
    TS_WORK_ROUTE_COUNT, /* N counters of the fused router, ⌈H / 8⌉ of the MoE combine in its down launch,
                            then the one-launch hyper-connection read's barrier (2) */
    TS_WORK_HC_SS,
    TS_WORK_EMB,
    TS_WORK_PV,
    TS_WORK_RSEL, /* the logit rows gathered from R */
    TS_WORK_XSEL, /* their final mixer output */
    TS_WORK_LOGITS,
    TS_WORK_TCX, /* x records of the tensor-core prefill products (src/cuda/gemm_tc.h) */
    TS_WORK_REGIONS
};
typedef struct ts_memplan_work {
    int64_t elems[TS_WORK_REGIONS]; /* 4-byte elements of each region */
    size_t off[TS_WORK_REGIONS];    /* byte offset of each region */
    size_t scratch_off;             /* the blocks' scratch, after the regions */
    size_t scratch;                 /* its bytes: the largest of the GDN, QSA, PLE and MoE scratch */
    size_t total;
} ts_memplan_work;
/* Bytes of the tensor-core prefill products' x records (src/cuda/gemm_tc.cu) for rows rows of ne0 inputs
 * of this type: a record per (row, group) of 576 bytes per 256 inputs (Q4_K, Q5_K), 544 (Q6_K) or 288
 * per 128 (Q8_0, Q5_0, whose last group may be partial: whole blocks of 32); 0 for other types or
 * widths that are not a whole number of groups (blocks). The TCX
 * region holds N rows of the widest input at the largest rate, 72 4-byte words per 128 inputs. */
size_t ts_memplan_tc_x_bytes(uint32_t type, int64_t ne0, int64_t rows);

/* For micro-batches of up to max_rows rows of sequences of up to ctx tokens. */
void ts_memplan_work_layout(const ts_hparams *hp, int64_t max_rows, int64_t ctx, ts_memplan_work *out);
size_t ts_memplan_work_bytes(const ts_hparams *hp, int64_t max_rows, int64_t ctx);

/* Each block's scratch for micro-batches of max_rows rows at context ctx. */
size_t ts_memplan_gdn_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx);
size_t ts_memplan_qsa_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx);
size_t ts_memplan_ple_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx);
size_t ts_memplan_moe_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx);

/* GDN scratch: the α logits of `rows` rows, then the log-decays in place (16-byte multiple); or, at
 * one row, the joined z|β|α row (nv·dv + 2·nv floats). */
size_t ts_memplan_gdn_alpha_bytes(const ts_hparams *hp, int64_t rows);
size_t ts_memplan_gdn_zba_bytes(const ts_hparams *hp);
/* The chunked form's per-chunk matrices (src/cuda/gdn.cu), after the α logits at offset
 * ts_memplan_align(ts_memplan_gdn_alpha_bytes): for each of `rows` rows and value head, its rows of the
 * chunk's (I + A)⁻¹ and of P, 2·TS_MEMPLAN_GDN_CHUNK floats; 0 below one chunk of rows. */
enum { TS_MEMPLAN_GDN_CHUNK = 64 };
size_t ts_memplan_gdn_chunk_bytes(const ts_hparams *hp, int64_t rows);

/* QSA scratch of N rows at context max_ctx (dense: TURBOSPARK_QSA_FORCE_DENSE), regions in this
 * order, each 256-aligned (src/cuda/qsa.cu says how they are used). */
typedef struct ts_memplan_qsa {
    size_t vbuf;       /* N × nkv·hd values when they cannot follow the keys in w->kv aligned */
    size_t sel;        /* N × Kb int32 selected blocks */
    size_t scores;     /* rows_pass × ⌊max_ctx / B⌋ floats */
    size_t sel_work;   /* sel_rows × ts_memplan_qsa_sel_row_words uint32 (many-block selection; else 0) */
    size_t part_o;     /* N × nh × nsplit × hd floats (nsplit > 1) */
    size_t part_ml;    /* N × nh × nsplit × 2 floats (nsplit > 1) */
    int64_t rows_pass; /* rows a selection pass scores */
    int64_t sel_rows;  /* rows a many-block selection sub-pass takes (0: one thread block a row) */
    int nsplit;        /* splits of each row's allowed positions */
} ts_memplan_qsa;
void ts_memplan_qsa_layout(const ts_hparams *hp, int64_t N, int64_t max_ctx, bool dense, ts_memplan_qsa *out);
size_t ts_memplan_qsa_total(const ts_memplan_qsa *q);
/* The many-block selection's work area of one row of nbm blocks, in uint32: four digit histograms of 256
 * counts, then two counts (above the threshold, equal to it) for each of ⌈nbm / SEL_SLICE⌉ thread blocks. */
int64_t ts_memplan_qsa_sel_row_words(int64_t nbm);
/* At one row, after that row's regions (aligned): the joined projections' outputs, q (nh·2·hd floats), k
 * and v (nkv·hd each), idx_q (ni·di), idx_k (di) back to back; ts_memplan_qsa_scratch leaves room for them. */
size_t ts_memplan_qsa_in_out_bytes(const ts_hparams *hp);
/* Query heads per attention thread block (≤ TS_MEMPLAN_QSA_MAX_GH), and how many such groups one
 * K/V head's G query heads make. */
void ts_memplan_qsa_head_groups(int64_t G, int *ngroups, int *gh_max);
/* Whether any row at context max_ctx can be sparse (more complete blocks than the budget). */
bool ts_memplan_qsa_can_be_sparse(const ts_hparams *hp, int64_t max_ctx, bool dense);

/* MoE scratch pieces (src/cuda/moe.cu): n rounded up to a multiple of 4; floats of the shared
 * expert's gate/up region for N rows; the expert gate/up item stride G and the up offset uoff. */
static inline int64_t ts_memplan_round_up4(int64_t n) {
    return (n + 3) & ~(int64_t)3;
}
int64_t ts_memplan_moe_shared_floats(int64_t N, int64_t Fs);
void ts_memplan_moe_expert_layout(int64_t F, bool one_launch, int64_t *G, int64_t *uoff);
/* The grouped expert GEMM's plan (src/cuda/gemm.cu): expert ranges its kernel counts at once (0:
 * E too large for the grouped path), the most tiles n items make with tiles of tt, and the scratch
 * bytes for n items in E experts (0 when unsupported). */
int ts_memplan_expert_plan_ranges(int64_t E);
int64_t ts_memplan_expert_plan_max_tiles(int64_t n, int64_t E, int tt);
size_t ts_memplan_expert_plan_bytes_for(int64_t n, int64_t max_tiles);
size_t ts_memplan_expert_plan_bytes(int64_t n_items, int64_t n_experts);

/* ---- the plan -------------------------------------------------------------------------------- */
typedef struct ts_memplan {
    int64_t ctx;        /* tokens a sequence holds */
    int seqs;           /* sequences planned for */
    int64_t max_rows;   /* rows of a micro-batch */
    size_t weights;     /* device bytes of the trunk weights */
    size_t table;       /* bytes of the PLE table, wherever it lives */
    size_t seq_state;   /* one sequence's state at ctx */
    size_t work;        /* the workspaces at (max_rows, ctx) */
    size_t margin;      /* TS_MEMPLAN_MARGIN */
    size_t snapshots;   /* GPU memory reserved for snapshots (ts_cuda_params.snapshot_bytes); 0 from make */
    bool table_on_host; /* set by ts_memplan_place */
    size_t device;      /* set by ts_memplan_place: what the GPU must hold */
} ts_memplan;

/* The sizes of m's plan for seqs sequences of ctx tokens and micro-batches of max_rows rows. */
void ts_memplan_make(const ts_model *m, int64_t ctx, int seqs, int64_t max_rows, ts_memplan *p);
/* The device bytes with the table on the GPU or not. */
size_t ts_memplan_device_bytes(const ts_memplan *p, bool table_on_host);
/* Places the table (TS_PLE_AUTO: on the GPU when everything fits free_bytes with it, else host
 * memory) and checks the device bytes against free_bytes: 0, or −1 with the sentence that names the
 * numbers (device: the GPU's name; total_bytes: its memory). When only the snapshot reservation
 * does not fit, the sentence says how much the rest of the plan leaves for it. */
int ts_memplan_place(ts_memplan *p, ts_ple_placement ple, size_t free_bytes, size_t total_bytes,
                     const char *device, char *err, size_t errlen);
/* How many sequences of p->ctx tokens fit in free_bytes besides the weights, the table (unless on the
 * host), the workspaces, the snapshot reservation and the margin (p->seqs is not read); 0 when not
 * even one. */
int64_t ts_memplan_seqs_fit(const ts_memplan *p, bool table_on_host, size_t free_bytes);

/* ---- a model without a file ------------------------------------------------------------------
 * Every tensor a file of hp's layout holds, with the type type_of gives it and no data, bound as
 * ts_model_bind would bind them (tied_output: no output.weight): enough for ts_memplan_make. hp is
 * moved into the model (its arrays belong to it afterwards; *hp is cleared). Free with
 * ts_memplan_model_free, never ts_model_free. */
typedef uint32_t (*ts_memplan_type_fn)(void *ctx, const ts_tensor_spec *spec);
int ts_memplan_model_new(ts_hparams *hp, ts_layout layout, bool tied_output, ts_memplan_type_fn type_of,
                         void *ctx, ts_model **out, char *err, size_t errlen);
void ts_memplan_model_free(ts_model *m);

#ifdef __cplusplus
}
#endif

#endif
