/* The CUDA backend's memory plan as host arithmetic (model/memplan.h). src/cuda/forward.cu and its
 * blocks call these functions for every size they allocate or lay out. */
#include "model/memplan.h"

#include "common/error.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <limits.h>
#include <string.h>

static double gib(size_t b) {
    return b / 1073741824.0;
}

/* ---- weights --------------------------------------------------------------------------------- */

static int64_t rows_of(const ts_gguf_tensor *t) {
    return t->ne[1] * t->ne[2] * t->ne[3];
}

size_t ts_memplan_matrix_bytes(const ts_gguf_tensor *t) {
    if (!t) return 0;
    return ts_memplan_align(ts_row_size(t->type, t->ne[0]) * (size_t)rows_of(t) + TS_MEMPLAN_MATRIX_TAIL);
}

size_t ts_memplan_vector_bytes(const ts_gguf_tensor *t) {
    return t ? ts_memplan_align((size_t)t->nelements * sizeof(float)) : 0;
}

bool ts_memplan_joinable(const ts_gguf_tensor *const *t, int n) {
    for (int i = 0; i < n; i++)
        if (!t[i] || t[i]->type != t[0]->type || t[i]->ne[0] != t[0]->ne[0] || t[i]->ne[2] != 1 ||
            t[i]->ne[3] != 1)
            return false;
    return n > 0 && ts_row_size(t[0]->type, t[0]->ne[0]) % 16 == 0;
}

size_t ts_memplan_joined_bytes(const ts_gguf_tensor *const *t, int n) {
    int64_t rows = 0;
    for (int i = 0; i < n; i++) rows += t[i]->ne[1];
    return ts_memplan_align(ts_row_size(t[0]->type, t[0]->ne[0]) * (size_t)rows + TS_MEMPLAN_MATRIX_TAIL);
}

/* Matrices one product computes together: joined when they can be, else one by one. */
static size_t group_bytes(const ts_gguf_tensor *const *t, int n) {
    if (ts_memplan_joinable(t, n)) return ts_memplan_joined_bytes(t, n);
    size_t b = 0;
    for (int i = 0; i < n; i++) b += ts_memplan_matrix_bytes(t[i]);
    return b;
}

static size_t hc_bytes(const ts_hc_weights *h) {
    const ts_gguf_tensor *di[2] = {h->down, h->inject};
    return ts_memplan_vector_bytes(h->norm) + group_bytes(di, 2) + ts_memplan_matrix_bytes(h->up);
}

size_t ts_memplan_qsa_in_bytes(const ts_layer_weights *L) {
    const ts_gguf_tensor *in5[5] = {L->attn_q, L->attn_k, L->attn_v, L->idx_q, L->idx_k};
    const ts_gguf_tensor *in4[4] = {L->attn_q, L->attn_k, L->idx_q, L->idx_k};
    if (ts_memplan_joinable(in5, 5)) return ts_memplan_joined_bytes(in5, 5);
    return group_bytes(in4, 4) + ts_memplan_matrix_bytes(L->attn_v);
}

static size_t layer_bytes(const ts_layer_weights *L) {
    size_t b = hc_bytes(&L->hc_attn) + hc_bytes(&L->hc_ffn);
    b += ts_memplan_matrix_bytes(L->attn_qkv) + ts_memplan_matrix_bytes(L->ssm_out);
    const ts_gguf_tensor *zba[3] = {L->attn_gate, L->ssm_beta, L->ssm_alpha};
    b += group_bytes(zba, 3) + ts_memplan_qsa_in_bytes(L);
    const ts_gguf_tensor *vec[] = {
        L->ssm_a,          L->ssm_dt,        L->ssm_conv1d, L->ssm_norm,           L->attn_q_norm,
        L->attn_k_norm,    L->idx_q_norm,    L->idx_k_norm, L->ffn_gate_inp_shexp, L->ple_norm_key,
        L->ple_norm_query, L->ple_norm_conv, L->ple_conv1d};
    const ts_gguf_tensor *mat[] = {L->attn_output,      L->ffn_gate_inp,  L->ffn_gate_exps,  L->ffn_up_exps,
                                   L->ffn_gate_up_exps, L->ffn_down_exps, L->ffn_gate_shexp, L->ffn_up_shexp,
                                   L->ffn_down_shexp,   L->ple_key,       L->ple_value};
    for (size_t i = 0; i < sizeof vec / sizeof *vec; i++) b += ts_memplan_vector_bytes(vec[i]);
    for (size_t i = 0; i < sizeof mat / sizeof *mat; i++) b += ts_memplan_matrix_bytes(mat[i]);
    return b;
}

void ts_memplan_weights(const ts_model *m, size_t *trunk, size_t *table) {
    const ts_hparams *hp = &m->hp;
    size_t b = ts_memplan_matrix_bytes(m->token_embd);
    if (m->output != m->token_embd) b += ts_memplan_matrix_bytes(m->output);
    b += hc_bytes(&m->output_hc);
    for (uint32_t l = 0; l < hp->n_layer; l++) b += layer_bytes(&m->layers[l]);
    *trunk = b;
    size_t t = 0;
    if (hp->ple_layer >= 0) {
        if (m->ple_table)
            t = ts_memplan_matrix_bytes(m->ple_table);
        else
            for (uint32_t h = 0; m->ple_head_tables && h < hp->ple_nh; h++)
                t += ts_memplan_matrix_bytes(m->ple_head_tables[h]);
    }
    *table = t;
}

/* ---- one sequence's state -------------------------------------------------------------------- */

size_t ts_memplan_qsa_kv_record(const ts_hparams *hp) {
    return (size_t)((2 * hp->head_dim + 15) / 16 * 16 + 16);
}
size_t ts_memplan_qsa_kv_bytes(const ts_hparams *hp, int64_t n) {
    return (size_t)(n * hp->n_head_kv) * ts_memplan_qsa_kv_record(hp);
}
size_t ts_memplan_idx_raw_bytes(const ts_hparams *hp, int64_t n) {
    return (size_t)(n * hp->idx_head_dim) * sizeof(float);
}
size_t ts_memplan_idx_blk_bytes(const ts_hparams *hp, int64_t n) {
    return (size_t)(ts_qsa_block_rows(hp, n) * hp->idx_head_dim) * sizeof(float);
}
size_t ts_memplan_gdn_conv_bytes(const ts_hparams *hp) {
    return (size_t)ts_gdn_conv_floats(hp) * sizeof(float);
}
size_t ts_memplan_gdn_state_bytes(const ts_hparams *hp) {
    return (size_t)ts_gdn_state_floats(hp) * sizeof(float);
}
size_t ts_memplan_ple_conv_bytes(const ts_hparams *hp) {
    return (size_t)ts_ple_conv_floats(hp) * sizeof(float);
}
size_t ts_memplan_ple_ctx_bytes(void) {
    return TS_MAX_NGRAM * sizeof(int32_t);
}

size_t ts_memplan_seq_bytes(const ts_hparams *hp, int64_t n_ctx, ts_memplan_seq *parts) {
    ts_memplan_seq s = {0};
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        if (hp->kind[l] == TS_LAYER_QSA) {
            s.qsa_kv += 2 * ts_memplan_align(ts_memplan_qsa_kv_bytes(hp, n_ctx));
            s.qsa_idx += ts_memplan_align(ts_memplan_idx_raw_bytes(hp, n_ctx)) +
                         ts_memplan_align(ts_memplan_idx_blk_bytes(hp, n_ctx));
        } else {
            s.gdn += ts_memplan_align(ts_memplan_gdn_conv_bytes(hp)) +
                     ts_memplan_align(ts_memplan_gdn_state_bytes(hp));
        }
    }
    if (hp->ple_layer >= 0)
        s.ple =
            ts_memplan_align(ts_memplan_ple_conv_bytes(hp)) + ts_memplan_align(ts_memplan_ple_ctx_bytes());
    s.total = s.qsa_kv + s.qsa_idx + s.gdn + s.ple;
    if (parts) *parts = s;
    return s.total;
}

/* ---- block scratch ----------------------------------------------------------------------------- */

size_t ts_memplan_gdn_alpha_bytes(const ts_hparams *hp, int64_t rows) {
    return ((size_t)rows * hp->ssm_nv * sizeof(float) + 15) / 16 * 16;
}

size_t ts_memplan_gdn_zba_bytes(const ts_hparams *hp) {
    return ((size_t)hp->ssm_nv * (hp->ssm_dv + 2) * sizeof(float) + 15) / 16 * 16;
}

size_t ts_memplan_gdn_chunk_bytes(const ts_hparams *hp, int64_t rows) {
    if (rows < TS_MEMPLAN_GDN_CHUNK) return 0;
    return (size_t)rows * hp->ssm_nv * 2 * TS_MEMPLAN_GDN_CHUNK * sizeof(float);
}

size_t ts_memplan_gdn_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx) {
    (void)ctx;
    const size_t a = ts_memplan_gdn_alpha_bytes(hp, max_rows), z = ts_memplan_gdn_zba_bytes(hp);
    const size_t c = ts_memplan_gdn_chunk_bytes(hp, max_rows);
    const size_t w = c ? ts_memplan_align(a) + c : a; /* the α logits, then the chunks' matrices */
    return w > z ? w : z;
}

void ts_memplan_qsa_head_groups(int64_t G, int *ngroups, int *gh_max) {
    const int64_t ng = (G + TS_MEMPLAN_QSA_MAX_GH - 1) / TS_MEMPLAN_QSA_MAX_GH;
    *ngroups = (int)ng;
    *gh_max = (int)((G + ng - 1) / ng);
}

/* Splits of each row's allowed list: enough for TS_MEMPLAN_QSA_ATT_TARGET thread blocks, none
 * shorter than TS_MEMPLAN_QSA_MIN_SPLIT positions. */
static int split_count(int64_t N, int64_t nkv, int ngroups, int64_t max_n) {
    const int64_t by_len = (max_n + TS_MEMPLAN_QSA_MIN_SPLIT - 1) / TS_MEMPLAN_QSA_MIN_SPLIT;
    const int64_t blocks = N * nkv * ngroups;
    int64_t by_occ = (TS_MEMPLAN_QSA_ATT_TARGET + blocks - 1) / blocks;
    if (by_occ < 1) by_occ = 1;
    int64_t s = by_len < by_occ ? by_len : by_occ;
    return (int)(s < 1 ? 1 : s);
}

/* The longest allowed list of any row. */
static int64_t max_allowed(const ts_hparams *hp, int64_t max_ctx, bool dense) {
    if (dense) return max_ctx;
    const int64_t cap = ((int64_t)hp->idx_top_blocks + 1) * hp->compress;
    return max_ctx < cap ? max_ctx : cap;
}

bool ts_memplan_qsa_can_be_sparse(const ts_hparams *hp, int64_t max_ctx, bool dense) {
    return !dense && hp->compress > 0 && max_ctx / hp->compress > (int64_t)hp->idx_top_blocks;
}

void ts_memplan_qsa_layout(const ts_hparams *hp, int64_t N, int64_t max_ctx, bool dense, ts_memplan_qsa *o) {
    memset(o, 0, sizeof *o);
    const int64_t nh = hp->n_head, nkv = hp->n_head_kv, hd = hp->head_dim, kvw = nkv * hd;
    if (kvw % 4 != 0) o->vbuf = ts_memplan_align((size_t)(N * kvw) * sizeof(float));
    if (ts_memplan_qsa_can_be_sparse(hp, max_ctx, dense)) {
        const int64_t nbm = max_ctx / hp->compress;
        int64_t rp = TS_MEMPLAN_QSA_SCORE_BUDGET / nbm;
        if (rp < 1) rp = 1;
        if (rp > N) rp = N;
        if (rp > 65535) rp = 65535; /* grid.y */
        o->rows_pass = rp;
        o->sel = ts_memplan_align((size_t)(N * hp->idx_top_blocks) * sizeof(int32_t));
        o->scores = ts_memplan_align((size_t)(rp * nbm) * sizeof(float));
        if (nbm >= TS_MEMPLAN_QSA_SEL_MIN) {
            o->sel_rows = rp < TS_MEMPLAN_QSA_SEL_ROWS ? rp : TS_MEMPLAN_QSA_SEL_ROWS;
            o->sel_work = ts_memplan_align((size_t)(o->sel_rows * ts_memplan_qsa_sel_row_words(nbm)) *
                                           sizeof(uint32_t));
        }
    }
    int ngroups, gh_max;
    ts_memplan_qsa_head_groups(nh / (nkv > 0 ? nkv : 1), &ngroups, &gh_max);
    o->nsplit = split_count(N, nkv, ngroups, max_allowed(hp, max_ctx, dense));
    if (o->nsplit > 1) {
        o->part_o = ts_memplan_align((size_t)(N * nh * o->nsplit * hd) * sizeof(float));
        o->part_ml = ts_memplan_align((size_t)(N * nh * o->nsplit * 2) * sizeof(float));
    }
}

size_t ts_memplan_qsa_total(const ts_memplan_qsa *q) {
    return q->vbuf + q->sel + q->scores + q->sel_work + q->part_o + q->part_ml;
}

int64_t ts_memplan_qsa_sel_row_words(int64_t nbm) {
    return 4 * 256 + 2 * ((nbm + TS_MEMPLAN_QSA_SEL_SLICE - 1) / TS_MEMPLAN_QSA_SEL_SLICE);
}

size_t ts_memplan_qsa_scratch(const ts_hparams *hp, int64_t max_rows, int64_t max_ctx) {
    if (max_rows < 1) max_rows = 1;
    if (max_ctx < 1) max_ctx = 1;
    /* every region grows with N except the partials (N · nsplit(N)), which exist only while N·nkv is
     * below the target: take the largest over N, and the dense worst case (FORCE_DENSE can be set at
     * run time) */
    size_t best = 0;
    const int64_t nmax = max_rows < TS_MEMPLAN_QSA_ATT_TARGET ? max_rows : TS_MEMPLAN_QSA_ATT_TARGET;
    for (int64_t N = 1; N <= nmax; N++) {
        ts_memplan_qsa a, c;
        ts_memplan_qsa_layout(hp, N, max_ctx, true, &a);
        ts_memplan_qsa_layout(hp, N, max_ctx, false, &c);
        const size_t pa = a.part_o + a.part_ml, pc = c.part_o + c.part_ml;
        best = best > pa ? best : pa, best = best > pc ? best : pc;
    }
    ts_memplan_qsa full;
    ts_memplan_qsa_layout(hp, max_rows, max_ctx, false, &full);
    const size_t all = full.vbuf + full.sel + full.scores + full.sel_work + best;
    /* at one row the joined projections' outputs follow that row's layout (dense or not) */
    ts_memplan_qsa d1, s1;
    ts_memplan_qsa_layout(hp, 1, max_ctx, true, &d1);
    ts_memplan_qsa_layout(hp, 1, max_ctx, false, &s1);
    const size_t t1 = ts_memplan_qsa_total(&d1) > ts_memplan_qsa_total(&s1) ? ts_memplan_qsa_total(&d1)
                                                                            : ts_memplan_qsa_total(&s1);
    const size_t one = ts_memplan_align(t1) + ts_memplan_qsa_in_out_bytes(hp);
    return all > one ? all : one;
}

size_t ts_memplan_qsa_in_out_bytes(const ts_hparams *hp) {
    const int64_t rows = (int64_t)hp->n_head * 2 * hp->head_dim + 2 * ts_qsa_kv_width(hp) +
                         (int64_t)hp->idx_n_head * hp->idx_head_dim + hp->idx_head_dim;
    return ts_memplan_align((size_t)rows * sizeof(float));
}

size_t ts_memplan_ple_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx) {
    (void)hp, (void)max_rows, (void)ctx;
    return 0; /* w->emb, w->mix, w->xn and w->pv suffice; history rows are read from the states */
}

int64_t ts_memplan_moe_shared_floats(int64_t N, int64_t Fs) {
    return ts_memplan_round_up4(N * Fs) + N * Fs;
}

void ts_memplan_moe_expert_layout(int64_t F, bool one_launch, int64_t *G, int64_t *uoff) {
    *uoff = one_launch ? F : ts_memplan_round_up4(F);
    *G = one_launch ? ts_memplan_round_up4(2 * F) : 2 * ts_memplan_round_up4(F);
}

int ts_memplan_expert_plan_ranges(int64_t E) {
    const int64_t E1 = E + 1;
    if (E < 1 || E1 > INT_MAX / 64) return 0;
    const int64_t r = (TS_MEMPLAN_EXPERT_PLAN_SMEM / 4 - 3 * E1 - 1) / E1;
    return r < 1 ? 0 : (r > 32 ? 32 : (int)r);
}

int64_t ts_memplan_expert_plan_max_tiles(int64_t n, int64_t E, int tt) {
    const int64_t groups = n < E + 1 ? n : E + 1;
    return (n + groups * (tt - 1)) / tt;
}

size_t ts_memplan_expert_plan_bytes_for(int64_t n, int64_t max_tiles) {
    return ts_memplan_align((size_t)n * sizeof(int32_t)) + ts_memplan_align((size_t)max_tiles * 16) + 256;
}

size_t ts_memplan_expert_plan_bytes(int64_t n_items, int64_t n_experts) {
    if (n_items < 0 || ts_memplan_expert_plan_ranges(n_experts) == 0) return 0;
    int64_t mt = 0;
    for (int tt = 8; tt <= 64; tt *= 2) {
        const int64_t m = ts_memplan_expert_plan_max_tiles(n_items, n_experts, tt);
        if (m > mt) mt = m;
    }
    return ts_memplan_expert_plan_bytes_for(n_items, mt);
}

size_t ts_memplan_moe_scratch(const ts_hparams *hp, int64_t max_rows, int64_t ctx) {
    (void)ctx;
    if (!hp || max_rows <= 0) return 0;
    const int64_t Fs = hp->n_ff_shexp, k = hp->n_expert_used;
    size_t routed = 0;
    for (uint32_t l = 0; hp->n_ff_exp && l < hp->n_layer; l++) {
        const int64_t F = hp->n_ff_exp[l];
        if (F % 4 == 0) continue; /* rows in w->gu */
        const size_t b = (size_t)(max_rows * k * 2 * ts_memplan_round_up4(F)) * sizeof(float);
        if (b > routed) routed = b;
    }
    /* + the expert plan of the grouped path, placed after the two regions above */
    const size_t plan = ts_memplan_expert_plan_bytes(max_rows * k, (int64_t)hp->n_expert);
    return ts_memplan_align((size_t)ts_memplan_moe_shared_floats(max_rows, Fs) * sizeof(float)) +
           ts_memplan_align(routed) + plan;
}

/* ---- workspaces ------------------------------------------------------------------------------- */

size_t ts_memplan_tc_x_bytes(uint32_t type, int64_t ne0, int64_t rows) {
    int64_t group, rec;
    switch (type) {
    case TS_TYPE_Q4_K:
    case TS_TYPE_Q5_K:
        group = 256, rec = 576; /* 512 bytes of fragments, 32 of sub-block sums, the scale, padding */
        break;
    case TS_TYPE_Q6_K:
        group = 256, rec = 544; /* 512 bytes of fragments, the scale, padding */
        break;
    case TS_TYPE_Q8_0:
    case TS_TYPE_Q5_0:
        group = 128, rec = 288;
        break;
    default:
        return 0;
    }
    /* Q8_0 and Q5_0 may end in a partial group (whole blocks of 32: the split products' records) */
    const int64_t unit = group == 128 ? 32 : group;
    if (ne0 <= 0 || ne0 % unit != 0 || rows <= 0) return 0;
    return (size_t)rows * (size_t)((ne0 + group - 1) / group) * (size_t)rec;
}

void ts_memplan_work_layout(const ts_hparams *hp, int64_t N, int64_t ctx, ts_memplan_work *o) {
    memset(o, 0, sizeof *o);
    const int64_t H = hp->n_embd, C = hp->hc_count, W = C * H, r = hp->hc_rank;
    const int64_t cd = ts_gdn_conv_dim(hp);
    const int64_t vd = (int64_t)hp->ssm_nv * hp->ssm_dv, nh = hp->n_head, hd = hp->head_dim;
    const int64_t kvw = ts_qsa_kv_width(hp), E = hp->n_expert, k = hp->n_expert_used;
    int64_t F = hp->n_ff_shexp;
    for (uint32_t l = 0; hp->n_ff_exp && l < hp->n_layer; l++) F = F > hp->n_ff_exp[l] ? F : hp->n_ff_exp[l];
    const int64_t NE = (int64_t)hp->ple_nh * hp->ple_dh;
    const int64_t gu =
        N * k * 2 * F > N * 2 * (int64_t)hp->n_ff_shexp ? N * k * 2 * F : N * 2 * (int64_t)hp->n_ff_shexp;
    int64_t *e = o->elems;
    e[TS_WORK_R] = e[TS_WORK_XN] = e[TS_WORK_MIX] = N * W;
    e[TS_WORK_LR] = N * r;
    e[TS_WORK_X] = e[TS_WORK_Y] = N * H;
    e[TS_WORK_INJ] = N * C;
    e[TS_WORK_QKV] = e[TS_WORK_U] = N * cd;
    e[TS_WORK_Z] = e[TS_WORK_O] = N * vd;
    e[TS_WORK_BA] = 2 * N * hp->ssm_nv;
    e[TS_WORK_QG] = N * nh * 2 * hd;
    e[TS_WORK_KV] = 2 * N * kvw;
    e[TS_WORK_IQ] = N * (int64_t)hp->idx_n_head * hp->idx_head_dim;
    e[TS_WORK_IK] = N * hp->idx_head_dim;
    e[TS_WORK_ATT] = N * nh * hd;
    e[TS_WORK_ROUTER] = N * E;
    e[TS_WORK_TOPK_ID] = e[TS_WORK_TOPK_W] = N * k;
    e[TS_WORK_GU] = gu;
    e[TS_WORK_EO] = N * k * H;
    e[TS_WORK_SG] = N;
    e[TS_WORK_ROUTE_COUNT] = N + (H + 7) / 8 + 2;
    e[TS_WORK_HC_SS] = N * C * ((H + 255) / 256);
    e[TS_WORK_EMB] = N * NE;
    e[TS_WORK_PV] = N * H;
    e[TS_WORK_RSEL] = N * W;
    e[TS_WORK_XSEL] = N * H;
    e[TS_WORK_LOGITS] =
        (N < TS_MEMPLAN_MAX_LOGIT_ROWS ? N : TS_MEMPLAN_MAX_LOGIT_ROWS) * (int64_t)hp->n_vocab;
    /* x records of the tensor-core prefill products: N rows of the widest product input (the routed
     * down products: N·k rows of F, so k·F a token; the hyper-connection down products, split: two
     * records a row of W), at most 72 4-byte words per 128 inputs (src/cuda/gemm_tc.cu: 576 bytes per
     * 256 for the K-quants, 288 per 128 for Q8_0 and Q5_0, 544 per 256 for Q6_K); from 128 rows on,
     * the rows rounded up to the warpgroup products' tiles of 128 (src/cuda/gemm_wg.cu converts x in
     * whole tiles, at most 548 bytes a row per 256 inputs); a smaller workspace has no room for a tile,
     * and its products take gemm_tc.cu's */
    int64_t K = 2 * W > vd ? 2 * W : vd;
    K = K > k * F ? K : k * F;
    K = K > nh * hd ? K : nh * hd;
    K = K > (int64_t)hp->n_ff_shexp ? K : (int64_t)hp->n_ff_shexp;
    K = K > NE ? K : NE;
    e[TS_WORK_TCX] = (N < 128 ? N : (N + 127) / 128 * 128) * ((K + 127) / 128) * 72;
    size_t off = 0;
    for (int i = 0; i < TS_WORK_REGIONS; i++) {
        o->off[i] = off;
        off += ts_memplan_align((size_t)e[i] * 4);
    }
    size_t s = ts_memplan_gdn_scratch(hp, N, ctx);
    const size_t q = ts_memplan_qsa_scratch(hp, N, ctx), p = ts_memplan_ple_scratch(hp, N, ctx),
                 m = ts_memplan_moe_scratch(hp, N, ctx);
    s = s > q ? s : q, s = s > p ? s : p, s = s > m ? s : m;
    o->scratch_off = off;
    o->scratch = ts_memplan_align(s);
    o->total = off + o->scratch;
}

size_t ts_memplan_work_bytes(const ts_hparams *hp, int64_t max_rows, int64_t ctx) {
    ts_memplan_work w;
    ts_memplan_work_layout(hp, max_rows, ctx, &w);
    return w.total;
}

/* ---- the plan --------------------------------------------------------------------------------- */

void ts_memplan_make(const ts_model *m, int64_t ctx, int seqs, int64_t max_rows, ts_memplan *p) {
    memset(p, 0, sizeof *p);
    p->ctx = ctx, p->seqs = seqs, p->max_rows = max_rows;
    ts_memplan_weights(m, &p->weights, &p->table);
    p->seq_state = ts_memplan_seq_bytes(&m->hp, ctx, NULL);
    p->work = ts_memplan_work_bytes(&m->hp, max_rows, ctx);
    p->margin = TS_MEMPLAN_MARGIN;
}

size_t ts_memplan_device_bytes(const ts_memplan *p, bool table_on_host) {
    return p->weights + p->seq_state * (size_t)p->seqs + p->work + p->snapshots + p->margin +
           (table_on_host ? 0 : p->table);
}

int ts_memplan_place(ts_memplan *p, ts_ple_placement ple, size_t free_bytes, size_t total_bytes,
                     const char *device, char *err, size_t errlen) {
    p->table_on_host =
        ple == TS_PLE_HOST || (ple == TS_PLE_AUTO && ts_memplan_device_bytes(p, false) > free_bytes);
    p->device = ts_memplan_device_bytes(p, p->table_on_host);
    if (p->device <= free_bytes) return 0;
    if (p->snapshots && p->device - p->snapshots <= free_bytes)
        return ts_errf(
            err, errlen,
            "the %.0f MiB of GPU memory asked for snapshots (serve's --cache-gpu) do not fit on %s: "
            "the rest of the plan (%.2f GiB: %d sequence(s) of %" PRId64
            " tokens, weights, workspaces, margin%s) leaves %.0f MiB of the %.2f GiB free",
            p->snapshots / 1048576.0, device, gib(p->device - p->snapshots), p->seqs, p->ctx,
            p->table_on_host ? "" : ", PLE table", (free_bytes - (p->device - p->snapshots)) / 1048576.0,
            gib(free_bytes));
    return ts_errf(
        err, errlen,
        "the model does not fit on %s: it needs %.2f GiB (weights %.2f, PLE table %.2f%s, state %.2f "
        "for %d sequence(s) of %" PRId64 " tokens, workspaces %.2f, snapshots %.2f, margin %.2f) and %.2f "
        "GiB are free of %.2f",
        device, gib(p->device), gib(p->weights), gib(p->table), p->table_on_host ? " in host memory" : "",
        gib(p->seq_state * (size_t)p->seqs), p->seqs, p->ctx, gib(p->work), gib(p->snapshots), gib(p->margin),
        gib(free_bytes), gib(total_bytes));
}

int64_t ts_memplan_seqs_fit(const ts_memplan *p, bool table_on_host, size_t free_bytes) {
    const size_t fixed = p->weights + p->work + p->snapshots + p->margin + (table_on_host ? 0 : p->table);
    if (fixed >= free_bytes || p->seq_state == 0) return 0;
    return (int64_t)((free_bytes - fixed) / p->seq_state);
}
