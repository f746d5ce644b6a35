/* HF qwen4_exp checkpoint → qwen4exp GGUF (see convert.h).
 *
 * Plan first, write second. The tensor table (ts_qwen4exp_visit_tensors) is walked once to build a
 * job per GGUF tensor: which checkpoint tensors feed it, checked for presence, dtype and exact
 * shape, and how its rows are made from theirs (MODEL.md §4.7). Every checkpoint tensor no job used
 * must be one we know to skip (vision, mtp.* without --mtp, the PLE hash buffers after they were
 * checked against the config); otherwise the conversion stops before anything is written. Then the
 * jobs run in declaration order, each row read from the mapping, transformed, encoded and
 * appended: memory is a few MiB a thread, whatever the checkpoint size.
 *
 * Transforms, checked against transformers 5.17 modeling_qwen4_exp.py:
 *   (1+w) on every Qwen4ExpTextRMSNorm (hc_norm, q/k norms, indexer q/k_layernorm, PLE norm_*,
 *   MTP norms), computed in fp32 as the reference does (`output * (1.0 + self.weight.float())`);
 *   not on linear_attn.norm (Qwen4ExpTextRMSNormGated multiplies by the plain weight);
 *   ssm_a = −exp(A_log) (the reference computes −A_log.float().exp(); we round exp in double);
 *   the GDN value-head reorder (file head j = nk·ρ + κ holds HF head G·κ + ρ) on every per-value-head
 *   quantity; conv kernels [C,1,K] → ggml [K, C] (same bytes); experts gate_up_proj split gate first;
 *   index_qk_proj split q rows first; shared_expert_gate [1,H] → [H]. */
#include "convert/convert.h"

#include "common/error.h"
#include "convert/hf_config.h"
#include "convert/safetensors.h"
#include "convert/stream.h"
#include "tokenizer/tokenizer.h"
#include "quant/quant.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum row_map {
    RM_IDENT,       /* source row r + row0 */
    RM_VHEAD,       /* rows: [0, fixed) as they are, then nv heads of `unit` rows reordered */
    RM_EXPERT_HALF, /* fused [E, 2F, H]: expert e's rows half·F … half·F + F − 1 */
    RM_PER_EXPERT,  /* one source per expert, `per` rows each */
    RM_SHARDS,      /* sources concatenated by rows (PLE table shards) */
} row_map;

typedef enum col_map {
    CM_IDENT,
    CM_VHEAD,  /* columns: [0, fixed) as they are, then nv heads of `unit` columns reordered */
    CM_CONCAT, /* row = src[0] row ‖ src[1] row (MTP eh_proj) */
} col_map;

typedef enum el_op { EL_NONE, EL_PLUS1, EL_NEGEXP } el_op;

typedef struct job {
    ts_tensor_spec spec;
    uint32_t type;
    row_map rm;
    col_map cm;
    el_op op;
    const ts_st_tensor **src; /* [n_src] (owned array) */
    uint32_t n_src;
    int64_t *start;      /* RM_SHARDS: [n_src + 1] first row of each source */
    int64_t row0;        /* RM_IDENT offset (indexer k rows) */
    int64_t fixed, unit; /* RM_VHEAD / CM_VHEAD */
    uint32_t nk, G;      /* value-head reorder: nk key heads, G value heads per key head */
    int64_t per;         /* RM_EXPERT_HALF: F; RM_PER_EXPERT: rows per source */
    int half;            /* RM_EXPERT_HALF: 0 gate, 1 up */
    int64_t src_ne0;     /* CM_CONCAT: columns of src[0] */
} job;

typedef struct conv {
    const ts_hf_config *cfg;
    const ts_hparams *hp;
    const ts_convert_opts *o;
    ts_st *st;
    bool *used;                                 /* [ts_st_count] */
    const ts_st_tensor *embed_src, *output_src; /* output_src NULL: no output.weight (tied) */
    job *jobs;
    size_t n_jobs, cap_jobs;
    char *err;
    size_t errlen;
} conv;

/* ---- rows ------------------------------------------------------------------------------------ */

/* HF index of the value head stored at file position j. */
static inline int64_t vhead(const job *j, int64_t f) {
    return (int64_t)j->G * (f % j->nk) + f / j->nk;
}

static inline int64_t vmap(const job *j, int64_t i) {
    if (i < j->fixed) return i;
    int64_t q = i - j->fixed;
    return j->fixed + vhead(j, q / j->unit) * j->unit + q % j->unit;
}

static uint64_t job_rows(const ts_tensor_spec *s) {
    uint64_t r = 1;
    for (uint32_t d = 1; d < s->n_dims; d++) r *= (uint64_t)s->ne[d];
    return r;
}

static int job_row(const void *ctx, int64_t r, float *out, float *scratch, char *err, size_t errlen) {
    const job *j = ctx;
    int64_t ne0 = j->spec.ne[0], sr = r;
    uint32_t s = 0;
    switch (j->rm) {
    case RM_IDENT:
        sr = r + j->row0;
        break;
    case RM_VHEAD:
        sr = vmap(j, r);
        break;
    case RM_EXPERT_HALF:
        sr = (r / j->per) * 2 * j->per + j->half * j->per + r % j->per;
        break;
    case RM_PER_EXPERT:
        s = (uint32_t)(r / j->per), sr = r % j->per;
        break;
    case RM_SHARDS: {
        uint32_t lo = 0, hi = j->n_src; /* start[lo] ≤ r < start[hi] */
        while (hi - lo > 1) {
            uint32_t mid = (lo + hi) / 2;
            if (j->start[mid] <= r)
                lo = mid;
            else
                hi = mid;
        }
        s = lo, sr = r - j->start[lo];
        break;
    }
    }
    const ts_st_tensor *t = j->src[s];
    switch (j->cm) {
    case CM_IDENT:
        ts_st_read_f32(t, sr * ne0, ne0, out);
        break;
    case CM_VHEAD:
        ts_st_read_f32(t, sr * ne0, ne0, scratch);
        for (int64_t c = 0; c < ne0; c++) out[c] = scratch[vmap(j, c)];
        break;
    case CM_CONCAT:
        ts_st_read_f32(t, sr * j->src_ne0, j->src_ne0, out);
        ts_st_read_f32(j->src[1], sr * (ne0 - j->src_ne0), ne0 - j->src_ne0, out + j->src_ne0);
        break;
    }
    if (j->op == EL_PLUS1)
        for (int64_t c = 0; c < ne0; c++) out[c] = 1.0f + out[c];
    else if (j->op == EL_NEGEXP)
        for (int64_t c = 0; c < ne0; c++) out[c] = (float)-exp((double)out[c]);
    (void)err, (void)errlen;
    return 0;
}

/* Drops the source pages of rows already written (plain row copies: the big tensors). */
static void job_rows_done(const void *ctx, int64_t r0, int64_t r1) {
    const job *j = ctx;
    int64_t ne0 = j->spec.ne[0];
    if (j->cm != CM_IDENT) return;
    if (j->rm == RM_IDENT) {
        ts_st_release(j->src[0], (r0 + j->row0) * ne0, (r1 - r0) * ne0);
    } else if (j->rm == RM_SHARDS) {
        for (uint32_t s = 0; s < j->n_src; s++) {
            int64_t a = r0 > j->start[s] ? r0 : j->start[s], b = r1 < j->start[s + 1] ? r1 : j->start[s + 1];
            if (a < b) ts_st_release(j->src[s], (a - j->start[s]) * ne0, (b - a) * ne0);
        }
    }
}

/* ---- planning ---------------------------------------------------------------------------------- */

static void fmt_shape(char *buf, size_t n, uint32_t nd, const int64_t *sh) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (uint32_t i = 0; i < nd && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%" PRId64, i ? ", " : "", sh[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static void mark_used(conv *c, const ts_st_tensor *t) {
    c->used[t - ts_st_at(c->st, 0)] = true;
}

/* The checkpoint tensor `name` of float dtype and exactly this shape (PyTorch order), marked used.
 * NULL with the error set when absent (unless optional) or wrong. */
static const ts_st_tensor *need_v(conv *c, bool optional, uint32_t nd, const int64_t *shape,
                                  const char *name) {
    const ts_st_tensor *t = ts_st_find(c->st, name);
    if (!t) {
        if (!optional)
            ts_errf(c->err, c->errlen, "the checkpoint has no tensor '%s' (needed for this config)", name);
        return NULL;
    }
    if (!ts_st_dtype_is_float(t->dtype)) {
        ts_errf(c->err, c->errlen, "checkpoint tensor '%s' has dtype %s; weights must be BF16, F16 or F32",
                name, ts_st_dtype_name(t->dtype));
        return NULL;
    }
    bool ok = t->n_dims == nd;
    for (uint32_t i = 0; ok && i < nd; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char have[128], want[128];
        fmt_shape(have, sizeof have, t->n_dims, t->shape);
        fmt_shape(want, sizeof want, nd, shape);
        ts_errf(c->err, c->errlen, "checkpoint tensor '%s' has shape %s, expected %s from config.json", name,
                have, want);
        return NULL;
    }
    mark_used(c, t);
    return t;
}

/* need_v with a printf name and 1–3 dims given inline. */
static const ts_st_tensor *need(conv *c, bool optional, uint32_t nd, int64_t d0, int64_t d1, int64_t d2,
                                const char *fmt, ...) TS_PRINTF(7, 8);
static const ts_st_tensor *need(conv *c, bool optional, uint32_t nd, int64_t d0, int64_t d1, int64_t d2,
                                const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t sh[3] = {d0, d1, d2};
    return need_v(c, optional, nd, sh, name);
}

static job *new_job(conv *c, const ts_tensor_spec *s, uint32_t n_src) {
    if (c->n_jobs == c->cap_jobs) {
        size_t cap = c->cap_jobs ? 2 * c->cap_jobs : 256;
        job *nj = realloc(c->jobs, cap * sizeof *nj);
        if (!nj) return NULL;
        c->jobs = nj, c->cap_jobs = cap;
    }
    job *j = &c->jobs[c->n_jobs];
    memset(j, 0, sizeof *j);
    j->src = calloc(n_src ? n_src : 1, sizeof *j->src);
    if (!j->src) return NULL;
    c->n_jobs++;
    j->spec = *s;
    j->n_src = n_src;
    j->type = ts_mix_type(c->o->mix, c->hp, s);
    j->nk = c->hp->ssm_nk;
    j->G = c->hp->ssm_nv / c->hp->ssm_nk;
    return j;
}

/* A job copying one checkpoint tensor whose PyTorch shape is the reverse of the ggml ne (a matrix
 * [ne1, ne0], a vector [ne0]), or `nd`/`shape` when given. */
static int plain(conv *c, const ts_tensor_spec *s, el_op op, const char *fmt, ...) TS_PRINTF(4, 5);
static int plain(conv *c, const ts_tensor_spec *s, el_op op, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t sh[3];
    for (uint32_t i = 0; i < s->n_dims; i++) sh[i] = s->ne[s->n_dims - 1 - i];
    const ts_st_tensor *t = need_v(c, s->optional, s->n_dims, sh, name);
    if (!t) return s->optional && !ts_st_find(c->st, name) ? 0 : -1;
    job *j = new_job(c, s, 1);
    if (!j) return ts_errf(c->err, c->errlen, "out of memory");
    j->src[0] = t;
    j->op = op;
    if (ts_mix_is_router(s->name) && j->type == TS_TYPE_BF16) { /* (a router's rows: no column map) */
        const int exact =
            ts_rows_bf16_exact(job_row, j, s->ne[0], (int64_t)job_rows(s), 0, c->err, c->errlen);
        if (exact < 0) return -1;
        j->type = ts_mix_router_type(j->type, exact);
    }
    return 0;
}

/* One hyper-connection tensor (suffix "norm.weight", "down.weight", "up.weight", "inject.weight"). */
static int hc_tensor(conv *c, const ts_tensor_spec *s, const char *hf, const char *suffix) {
    if (strcmp(suffix, "norm.weight") == 0) return plain(c, s, EL_PLUS1, "%shc_norm.weight", hf);
    if (strcmp(suffix, "down.weight") == 0) return plain(c, s, EL_NONE, "%sinput_mix_weight_down.weight", hf);
    if (strcmp(suffix, "up.weight") == 0) return plain(c, s, EL_NONE, "%sinput_mix_weight_up.weight", hf);
    if (strcmp(suffix, "inject.weight") == 0) return plain(c, s, EL_NONE, "%sblock_inject_weight.weight", hf);
    return ts_errf(c->err, c->errlen, "internal: no HF source for '%s'", s->name);
}

/* GDN tensors with the value-head reorder. */
static int gdn_tensor(conv *c, const ts_tensor_spec *s, const char *L, const char *suf) {
    const ts_hparams *hp = c->hp;
    int64_t H = hp->n_embd, nv = hp->ssm_nv, dv = hp->ssm_dv, kd = (int64_t)hp->ssm_nk * hp->ssm_dk;
    int64_t conv_dim = ts_gdn_conv_dim(hp);
    const ts_st_tensor *t = NULL;
    job *j;
    row_map rm = RM_VHEAD;
    col_map cm = CM_IDENT;
    int64_t fixed = 0, unit = dv;
    el_op op = EL_NONE;
    if (!strcmp(suf, "attn_qkv.weight")) {
        t = need(c, false, 2, conv_dim, H, 0, "%slinear_attn.in_proj_qkv.weight", L), fixed = 2 * kd;
    } else if (!strcmp(suf, "attn_gate.weight")) {
        t = need(c, false, 2, nv * dv, H, 0, "%slinear_attn.in_proj_z.weight", L);
    } else if (!strcmp(suf, "ssm_beta.weight")) {
        t = need(c, false, 2, nv, H, 0, "%slinear_attn.in_proj_b.weight", L), unit = 1;
    } else if (!strcmp(suf, "ssm_alpha.weight")) {
        t = need(c, false, 2, nv, H, 0, "%slinear_attn.in_proj_a.weight", L), unit = 1;
    } else if (!strcmp(suf, "ssm_a")) {
        t = need(c, false, 1, nv, 0, 0, "%slinear_attn.A_log", L), rm = RM_IDENT, cm = CM_VHEAD, unit = 1;
        op = EL_NEGEXP;
    } else if (!strcmp(suf, "ssm_dt.bias")) {
        t = need(c, false, 1, nv, 0, 0, "%slinear_attn.dt_bias", L), rm = RM_IDENT, cm = CM_VHEAD, unit = 1;
    } else if (!strcmp(suf, "ssm_conv1d.weight")) {
        t = need(c, false, 3, conv_dim, 1, hp->ssm_conv, "%slinear_attn.conv1d.weight", L), fixed = 2 * kd;
    } else if (!strcmp(suf, "ssm_norm.weight")) {
        return plain(c, s, EL_NONE, "%slinear_attn.norm.weight", L); /* plain gamma: no +1 */
    } else if (!strcmp(suf, "ssm_out.weight")) {
        t = need(c, false, 2, H, nv * dv, 0, "%slinear_attn.out_proj.weight", L), rm = RM_IDENT,
        cm = CM_VHEAD;
    } else {
        return ts_errf(c->err, c->errlen, "internal: no HF source for '%s'", s->name);
    }
    if (!t) return -1;
    if (!(j = new_job(c, s, 1))) return ts_errf(c->err, c->errlen, "out of memory");
    j->src[0] = t, j->rm = rm, j->cm = cm, j->fixed = fixed, j->unit = unit, j->op = op;
    return 0;
}

/* Routed experts: fused gate_up_proj / down_proj, or one tensor per expert. */
static int expert_tensor(conv *c, const ts_tensor_spec *s, const char *L, const char *suf, uint32_t l) {
    const ts_hparams *hp = c->hp;
    int64_t H = hp->n_embd, E = hp->n_expert, F = hp->n_ff_exp[l];
    bool down = !strcmp(suf, "ffn_down_exps.weight");
    char fused[256];
    snprintf(fused, sizeof fused, "%smlp.experts.%s", L, down ? "down_proj" : "gate_up_proj");
    if (ts_st_find(c->st, fused)) {
        const ts_st_tensor *t =
            down ? need(c, false, 3, E, H, F, "%s", fused) : need(c, false, 3, E, 2 * F, H, "%s", fused);
        job *j = t ? new_job(c, s, 1) : NULL;
        if (!t) return -1;
        if (!j) return ts_errf(c->err, c->errlen, "out of memory");
        j->src[0] = t;
        if (!down) j->rm = RM_EXPERT_HALF, j->per = F, j->half = !strcmp(suf, "ffn_up_exps.weight");
        return 0;
    }
    char probe[256];
    snprintf(probe, sizeof probe, "%smlp.experts.0.%s.weight", L, down ? "down_proj" : "gate_proj");
    if (!ts_st_find(c->st, probe))
        return ts_errf(c->err, c->errlen, "the checkpoint has neither '%s' nor per-expert '%s'", fused,
                       probe);
    job *j = new_job(c, s, (uint32_t)E);
    if (!j) return ts_errf(c->err, c->errlen, "out of memory");
    const char *which = down ? "down_proj" : !strcmp(suf, "ffn_up_exps.weight") ? "up_proj" : "gate_proj";
    j->rm = RM_PER_EXPERT, j->per = down ? H : F;
    for (int64_t e = 0; e < E; e++) {
        j->src[e] = down ? need(c, false, 2, H, F, 0, "%smlp.experts.%" PRId64 ".%s.weight", L, e, which)
                         : need(c, false, 2, F, H, 0, "%smlp.experts.%" PRId64 ".%s.weight", L, e, which);
        if (!j->src[e]) return -1;
    }
    return 0;
}

/* The PLE table: shards ngram_embedding.shard_{i}.weight in numeric order, or one ngram_embedding.weight. */
static int ple_table(conv *c, const ts_tensor_spec *s) {
    const ts_hparams *hp = c->hp;
    char pre[256];
    snprintf(pre, sizeof pre, "%slayers.%d.ple.ple_embedding.ngram_embedding.", c->cfg->prefix,
             hp->ple_layer);
    size_t pl = strlen(pre);
    int64_t max_idx = -1, count = 0;
    for (size_t i = 0; i < ts_st_count(c->st); i++) {
        const char *n = ts_st_at(c->st, i)->name;
        if (strncmp(n, pre, pl) != 0 || strncmp(n + pl, "shard_", 6) != 0) continue;
        const char *d = n + pl + 6;
        char *end;
        long long v = strtoll(d, &end, 10);
        if (end == d || *d < '0' || *d > '9' || (d[0] == '0' && end - d > 1) || strcmp(end, ".weight") != 0 ||
            v > 1 << 20)
            return ts_errf(c->err, c->errlen,
                           "checkpoint tensor '%s' is not a PLE shard name (shard_<n>.weight)", n);
        if (v > max_idx) max_idx = v;
        count++;
    }
    char whole[300];
    snprintf(whole, sizeof whole, "%sweight", pre);
    bool has_whole = ts_st_find(c->st, whole) != NULL;
    if (count && has_whole)
        return ts_errf(c->err, c->errlen, "the checkpoint has both '%s' and PLE shards; expected one layout",
                       whole);
    if (!count && !has_whole)
        return ts_errf(c->err, c->errlen, "the checkpoint has no PLE table ('%s' or '%sshard_0.weight')",
                       whole, pre);
    if (count && count != max_idx + 1)
        return ts_errf(c->err, c->errlen,
                       "the PLE table shards are not numbered 0..%" PRId64 " without gaps (%" PRId64
                       " shards found)",
                       max_idx, count);
    uint32_t n = has_whole ? 1 : (uint32_t)count;
    job *j = new_job(c, s, n);
    if (!j) return ts_errf(c->err, c->errlen, "out of memory");
    j->start = calloc(n + 1, sizeof *j->start);
    if (!j->start) return ts_errf(c->err, c->errlen, "out of memory");
    j->rm = RM_SHARDS;
    int64_t rows = 0;
    for (uint32_t i = 0; i < n; i++) {
        char name[320];
        if (has_whole)
            snprintf(name, sizeof name, "%s", whole);
        else
            snprintf(name, sizeof name, "%sshard_%u.weight", pre, i);
        const ts_st_tensor *t = ts_st_find(c->st, name);
        if (t->n_dims != 2 || t->shape[1] != hp->ple_dh) {
            char have[128];
            fmt_shape(have, sizeof have, t->n_dims, t->shape);
            return ts_errf(c->err, c->errlen,
                           "checkpoint tensor '%s' has shape %s, expected [rows, %" PRIu32 "]", name, have,
                           hp->ple_dh);
        }
        int64_t sh[2] = {t->shape[0], hp->ple_dh};
        if (!(j->src[i] = need_v(c, false, 2, sh, name))) return -1;
        j->start[i] = rows;
        rows += t->shape[0];
    }
    j->start[n] = rows;
    if ((uint64_t)rows != hp->ple_rows)
        return ts_errf(c->err, c->errlen,
                       "the PLE table in the checkpoint has %" PRId64 " rows; the config implies %" PRIu64
                       " (%" PRIu64 " hashed rows padded to make_ngram_vocab_size_divisible_by)",
                       rows, hp->ple_rows, c->cfg->ple_total_rows);
    return 0;
}

/* The PLE hash buffers, when the checkpoint has them, must equal what the config derives. */
static int check_ple_buffers(conv *c) {
    const ts_hparams *hp = c->hp;
    char pre[256];
    snprintf(pre, sizeof pre, "%slayers.%d.ple.ple_embedding.", c->cfg->prefix, hp->ple_layer);
    static const char *names[3] = {"layer_multipliers", "ngram_heads_vocab_sizes", "ngram_heads_offsets"};
    for (int b = 0; b < 3; b++) {
        char name[300];
        snprintf(name, sizeof name, "%s%s", pre, names[b]);
        const ts_st_tensor *t = ts_st_find(c->st, name);
        if (!t) continue;
        int64_t n = b == 0 ? hp->ple_n : hp->ple_nh;
        if (!(t->dtype == TS_ST_I64 || t->dtype == TS_ST_F64 || t->dtype == TS_ST_U64) || t->n_dims != 1 ||
            t->shape[0] != n)
            return ts_errf(c->err, c->errlen,
                           "checkpoint buffer '%s' must be %" PRId64 " int64 values (found %s with %" PRId64
                           " elements)",
                           name, n, ts_st_dtype_name(t->dtype), t->nelements);
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            uint64_t want = b == 0 ? hp->ple_mult[i] : b == 1 ? hp->ple_sizes[i] : hp->ple_offsets[i];
            if (!ts_st_read_i64(t, i, &v) || (uint64_t)v != want)
                return ts_errf(
                    c->err, c->errlen,
                    "checkpoint buffer '%s'[%" PRId64 "] is %" PRId64 " but the config "
                    "(vocab_size, ngram_size, heads_per_ngram, ngram_vocab_size_base, seed) gives %" PRIu64,
                    name, i, v, want);
        }
        mark_used(c, t);
    }
    return 0;
}

static int plan_one(void *ctx, const ts_tensor_spec *s) {
    conv *c = ctx;
    const ts_hparams *hp = c->hp;
    const char *P = c->cfg->prefix;
    const char *n = s->name;
    if (!strcmp(n, "token_embd.weight")) {
        int64_t sh[2] = {hp->n_vocab, hp->n_embd};
        const ts_st_tensor *t = need_v(c, false, 2, sh, c->embed_src->name);
        job *j = t ? new_job(c, s, 1) : NULL;
        if (!t) return -1;
        if (!j) return ts_errf(c->err, c->errlen, "out of memory");
        j->src[0] = t;
        return 0;
    }
    if (!strcmp(n, "output.weight")) {
        if (!c->output_src) return 0;
        return plain(c, s, EL_NONE, "%s", c->output_src->name);
    }
    if (!strncmp(n, "output_hc_", 10)) {
        char hf[128];
        snprintf(hf, sizeof hf, "%shyper_connection_mixer.", P);
        return hc_tensor(c, s, hf, n + 10);
    }
    if (!strcmp(n, "per_layer_token_embd.weight")) return ple_table(c, s);
    unsigned l;
    int off = 0;
    if (sscanf(n, "blk.%u.%n", &l, &off) != 1 || off == 0 || l >= hp->n_block)
        return ts_errf(c->err, c->errlen, "internal: unexpected tensor name '%s'", n);
    const char *suf = n + off;
    char L[128];
    if (l < hp->n_layer)
        snprintf(L, sizeof L, "%slayers.%u.", P, l);
    else
        snprintf(L, sizeof L, "mtp.layers.%u.", l - hp->n_layer);
    char hf[160];
    if (!strncmp(suf, "hc_attn_", 8)) {
        snprintf(hf, sizeof hf, "%sattn_hyper_connection.", L);
        return hc_tensor(c, s, hf, suf + 8);
    }
    if (!strncmp(suf, "hc_ffn_", 7)) {
        snprintf(hf, sizeof hf, "%smlp_hyper_connection.", L);
        return hc_tensor(c, s, hf, suf + 7);
    }
    if (!strncmp(suf, "nextn.hc_head_", 14)) return hc_tensor(c, s, "mtp.hyper_connection_mixer.", suf + 14);
    if (!strcmp(suf, "nextn.enorm.weight")) return plain(c, s, EL_PLUS1, "mtp.pre_fc_norm_embedding.weight");
    if (!strcmp(suf, "nextn.hnorm.weight")) return plain(c, s, EL_PLUS1, "mtp.pre_fc_norm_hidden.weight");
    if (!strcmp(suf, "nextn.eh_proj.weight")) {
        int64_t H = hp->n_embd;
        const ts_st_tensor *a = need(c, false, 2, H, H, 0, "mtp.fc_embedding.weight");
        const ts_st_tensor *b = a ? need(c, false, 2, H, H, 0, "mtp.fc_hidden.weight") : NULL;
        job *j = b ? new_job(c, s, 2) : NULL;
        if (!b) return -1;
        if (!j) return ts_errf(c->err, c->errlen, "out of memory");
        j->src[0] = a, j->src[1] = b, j->cm = CM_CONCAT, j->src_ne0 = H;
        return 0;
    }
    if (!strncmp(suf, "ple_", 4)) {
        static const char *map[][2] = {{"ple_key.weight", "key_proj.weight"},
                                       {"ple_value.weight", "value_proj.weight"},
                                       {"ple_norm_key.weight", "norm_key.weight"},
                                       {"ple_norm_query.weight", "norm_query.weight"},
                                       {"ple_norm_conv.weight", "norm_conv.weight"}};
        for (size_t i = 0; i < 5; i++)
            if (!strcmp(suf, map[i][0]))
                return plain(c, s, i >= 2 ? EL_PLUS1 : EL_NONE, "%sple.%s", L, map[i][1]);
        if (!strcmp(suf, "ple_conv1d.weight")) {
            int64_t W = (int64_t)hp->hc_count * hp->n_embd;
            const ts_st_tensor *t = need(c, false, 3, W, 1, hp->ple_conv, "%sple.conv1d.weight", L);
            job *j = t ? new_job(c, s, 1) : NULL;
            if (!t) return -1;
            if (!j) return ts_errf(c->err, c->errlen, "out of memory");
            j->src[0] = t;
            return 0;
        }
    }
    if (!strncmp(suf, "attn_qkv", 8) || !strncmp(suf, "attn_gate", 9) || !strncmp(suf, "ssm_", 4))
        return gdn_tensor(c, s, L, suf);
    if (!strcmp(suf, "attn_q.weight")) return plain(c, s, EL_NONE, "%sself_attn.q_proj.weight", L);
    if (!strcmp(suf, "attn_k.weight")) return plain(c, s, EL_NONE, "%sself_attn.k_proj.weight", L);
    if (!strcmp(suf, "attn_v.weight")) return plain(c, s, EL_NONE, "%sself_attn.v_proj.weight", L);
    if (!strcmp(suf, "attn_output.weight")) return plain(c, s, EL_NONE, "%sself_attn.o_proj.weight", L);
    if (!strcmp(suf, "attn_q_norm.weight")) return plain(c, s, EL_PLUS1, "%sself_attn.q_norm.weight", L);
    if (!strcmp(suf, "attn_k_norm.weight")) return plain(c, s, EL_PLUS1, "%sself_attn.k_norm.weight", L);
    if (!strcmp(suf, "indexer.q_norm.weight"))
        return plain(c, s, EL_PLUS1, "%sself_attn.indexer.q_layernorm.weight", L);
    if (!strcmp(suf, "indexer.k_norm.weight"))
        return plain(c, s, EL_PLUS1, "%sself_attn.indexer.k_layernorm.weight", L);
    if (!strcmp(suf, "indexer.q_proj.weight") || !strcmp(suf, "indexer.k_proj.weight")) {
        int64_t ni = hp->idx_n_head, di = hp->idx_head_dim;
        char name[200];
        snprintf(name, sizeof name, "%sself_attn.indexer.index_qk_proj.weight", L);
        if (s->optional && !ts_st_find(c->st, name)) return 0;
        const ts_st_tensor *t = need(c, false, 2, (ni + 1) * di, hp->n_embd, 0, "%s", name);
        job *j = t ? new_job(c, s, 1) : NULL;
        if (!t) return -1;
        if (!j) return ts_errf(c->err, c->errlen, "out of memory");
        j->src[0] = t;
        if (suf[8] == 'k') j->row0 = ni * di;
        return 0;
    }
    if (!strcmp(suf, "ffn_gate_inp.weight")) return plain(c, s, EL_NONE, "%smlp.gate.weight", L);
    if (!strcmp(suf, "ffn_gate_exps.weight") || !strcmp(suf, "ffn_up_exps.weight") ||
        !strcmp(suf, "ffn_down_exps.weight"))
        return expert_tensor(c, s, L, suf, l);
    if (!strcmp(suf, "ffn_gate_inp_shexp.weight")) {
        const ts_st_tensor *t = need(c, false, 2, 1, hp->n_embd, 0, "%smlp.shared_expert_gate.weight", L);
        job *j = t ? new_job(c, s, 1) : NULL;
        if (!t) return -1;
        if (!j) return ts_errf(c->err, c->errlen, "out of memory");
        j->src[0] = t;
        return 0;
    }
    if (!strcmp(suf, "ffn_gate_shexp.weight"))
        return plain(c, s, EL_NONE, "%smlp.shared_expert.gate_proj.weight", L);
    if (!strcmp(suf, "ffn_up_shexp.weight"))
        return plain(c, s, EL_NONE, "%smlp.shared_expert.up_proj.weight", L);
    if (!strcmp(suf, "ffn_down_shexp.weight"))
        return plain(c, s, EL_NONE, "%smlp.shared_expert.down_proj.weight", L);
    return ts_errf(c->err, c->errlen, "internal: no HF source for GGUF tensor '%s'", n);
}

static bool has_prefix(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}
static bool has_suffix(const char *s, const char *suf) {
    size_t n = strlen(s), m = strlen(suf);
    return n >= m && strcmp(s + n - m, suf) == 0;
}

/* Checkpoint tensors that no job uses but that are fine to leave out. */
static bool skippable(const conv *c, const char *n) {
    if (has_prefix(n, "model.visual.")) return true;        /* vision tower */
    if (has_prefix(n, "mtp.") && !c->o->mtp) return true;   /* MTP head without --mtp */
    if (has_suffix(n, ".rotary_emb.inv_freq")) return true; /* non-persistent in 5.x; old exports */
    char mix_inject[128];                                   /* the final mixer's inject: unused */
    snprintf(mix_inject, sizeof mix_inject, "%shyper_connection_mixer.block_inject_weight.weight",
             c->cfg->prefix);
    return strcmp(n, mix_inject) == 0;
}

/* Which tensors give token_embd and output (tie_word_embeddings, as transformers resolves it). */
static int resolve_embeddings(conv *c) {
    char en[128];
    snprintf(en, sizeof en, "%sembed_tokens.weight", c->cfg->prefix);
    const ts_st_tensor *emb = ts_st_find(c->st, en), *lm = ts_st_find(c->st, "lm_head.weight");
    c->embed_src = emb, c->output_src = NULL;
    if (!c->cfg->tie_embeddings) {
        if (!lm)
            return ts_errf(c->err, c->errlen,
                           "the checkpoint has no 'lm_head.weight' and tie_word_embeddings is false");
        c->output_src = lm;
    } else if (lm && !emb) {
        c->embed_src = lm; /* transformers ties the missing side to the present one */
    } else if (lm && (lm->dtype != emb->dtype || lm->nbytes != emb->nbytes ||
                      memcmp(lm->data, emb->data, lm->nbytes))) {
        c->output_src = lm; /* both present and different: transformers does not tie them */
        fprintf(stderr,
                "convert: tie_word_embeddings is true but lm_head.weight differs from %s; writing "
                "output.weight as transformers does\n",
                en);
    } else if (lm) {
        mark_used(c, lm);
    }
    if (!c->embed_src) return ts_errf(c->err, c->errlen, "the checkpoint has no '%s'", en);
    return 0;
}

static void free_jobs(conv *c) {
    for (size_t i = 0; i < c->n_jobs; i++) free(c->jobs[i].src), free(c->jobs[i].start);
    free(c->jobs);
}

/* The last path component of p, without trailing slashes, into buf. */
static void base_name(const char *p, char *buf, size_t n) {
    size_t len = strlen(p);
    while (len > 1 && p[len - 1] == '/') len--;
    size_t b = len;
    while (b > 0 && p[b - 1] != '/') b--;
    snprintf(buf, n, "%.*s", (int)(len - b), p + b);
}

/* Metadata beyond ts_hparams_write. */
static int write_extra_metadata(ts_gguf_writer *w, const ts_hf_config *cfg, const ts_mix *mix,
                                const char *hf_dir) {
    const ts_hparams *hp = &cfg->hp;
    char name[256];
    base_name(cfg->name[0] ? cfg->name : hf_dir, name, sizeof name);
    int rc = ts_gguf_writer_set_str(w, "general.name", name);
    rc |= ts_gguf_writer_set_u32(w, "general.file_type", mix->ftype);
    if (ts_type_get(mix->base)->block_size > 1)
        rc |= ts_gguf_writer_set_u32(w, "general.quantization_version", 2);
    if (!hp->full_attn_interval) { /* no period describes the layer pattern: list it */
        uint8_t *rec = calloc(hp->n_block, 1);
        if (!rec) return -1;
        for (uint32_t l = 0; l < hp->n_layer; l++) rec[l] = hp->kind[l] == TS_LAYER_GDN;
        rc |=
            ts_gguf_writer_set_arr(w, TS_ARCH ".attention.recurrent_layers", TS_GGUF_BOOL, rec, hp->n_block);
        free(rec);
    }
    if (hp->ple_layer >= 0 && cfg->image_token_id >= 0)
        rc |= ts_gguf_writer_set_u32(w, TS_ARCH ".ple.image_token_id", (uint32_t)cfg->image_token_id);
    return rc ? -1 : 0;
}

static int declare_job(ts_gguf_writer *w, const job *j, char *err, size_t errlen) {
    if (ts_gguf_writer_add_tensor(w, j->spec.name, j->type, j->spec.n_dims, j->spec.ne))
        return ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    return 0;
}

static bool same_file(const char *a, const char *b) {
    struct stat sa, sb;
    return stat(a, &sa) == 0 && stat(b, &sb) == 0 && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/* Whether the checkpoint holds any mtp.* tensor; n_layers gets the count of distinct mtp.layers.N. */
static bool find_mtp(const ts_st *st, uint32_t *n_layers) {
    bool any = false;
    uint32_t max = 0;
    for (size_t i = 0; i < ts_st_count(st); i++) {
        const char *n = ts_st_at(st, i)->name;
        unsigned l;
        if (!has_prefix(n, "mtp.")) continue;
        any = true;
        if (sscanf(n, "mtp.layers.%u.", &l) == 1 && l + 1 > max) max = l + 1;
    }
    *n_layers = max;
    return any;
}

int ts_convert_hf(const char *hf_dir, const char *out_path, const ts_convert_opts *o, char *err,
                  size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", hf_dir);
    ts_hf_config cfg;
    if (ts_hf_config_read(path, &cfg, err, errlen)) return -1;
    ts_hf_sampling sampling;
    if (ts_hf_sampling_read(hf_dir, &sampling, err, errlen)) {
        ts_hf_config_free(&cfg);
        return -1;
    }
    ts_st *st = NULL;
    conv c = {.cfg = &cfg, .hp = &cfg.hp, .o = o, .err = err, .errlen = errlen};
    ts_gguf_writer *w = NULL;
    bool started = false;
    int rc = ts_st_open_dir(hf_dir, &st, err, errlen);
    if (rc) goto done;
    c.st = st;
    for (uint32_t f = 0; f < ts_st_file_count(st); f++) /* writing over a mapped input would crash */
        if (same_file(out_path, ts_st_file_path(st, f))) {
            rc = ts_errf(err, errlen, "the output %s is one of the checkpoint's files; write to another path",
                         out_path);
            goto done;
        }
    uint32_t mtp_layers = 0;
    bool has_mtp = find_mtp(st, &mtp_layers);
    if (o->mtp) {
        uint32_t n = cfg.has_mtp_key ? cfg.mtp_layers : mtp_layers;
        if (!has_mtp)
            rc = ts_errf(err, errlen, "--mtp: the checkpoint in %s has no mtp.* tensors", hf_dir);
        else if (n != 1)
            rc = ts_errf(err, errlen,
                         "--mtp: the checkpoint has %u MTP blocks (mtp_num_hidden_layers); a qwen4exp GGUF "
                         "holds exactly one",
                         n);
        if (!rc) rc = ts_hf_config_set_mtp(&cfg, 1, err, errlen);
        if (rc) goto done;
    }
    c.used = calloc(ts_st_count(st) + 1, sizeof *c.used);
    if (!c.used) {
        rc = ts_errf(err, errlen, "out of memory");
        goto done;
    }
    ts_layout lay = {0};
    char needs[64];
    uint32_t needs_type;
    if (ts_mix_needs_imatrix(o->mix, &cfg.hp, lay, needs, sizeof needs, &needs_type)) {
        rc = ts_errf(
            err, errlen,
            "the mix %s puts %s at %s, which ggml quantizes only with importance weights: convert to bf16 "
            "first, make an importance matrix with `turbospark imatrix`, then run `turbospark quantize "
            "IN.gguf "
            "OUT.gguf %s --imatrix FILE`",
            o->mix->name, needs, ts_type_name(needs_type), o->mix->name);
        goto done;
    }
    rc = resolve_embeddings(&c);
    if (!rc && cfg.hp.ple_layer >= 0) rc = check_ple_buffers(&c);
    if (!rc) rc = ts_qwen4exp_visit_tensors(&cfg.hp, lay, NULL, plan_one, &c);
    if (rc) goto done;
    size_t n_unexpected = 0;
    const char *first = NULL;
    for (size_t i = 0; i < ts_st_count(st); i++) {
        const char *n = ts_st_at(st, i)->name;
        if (c.used[i] || skippable(&c, n)) continue;
        if (!first) first = n;
        n_unexpected++;
    }
    if (first) {
        rc = ts_errf(err, errlen,
                     "checkpoint tensor '%s'%s is not part of a qwen4_exp text model as turbospark converts "
                     "it (wrong config.json, or weights this converter does not know)",
                     first, n_unexpected > 1 ? " (and others)" : "");
        if (n_unexpected > 1) {
            char tail[64];
            snprintf(tail, sizeof tail, " [%zu unexpected tensors]", n_unexpected);
            size_t k = strlen(err);
            if (k + strlen(tail) < errlen) strcat(err, tail);
        }
        goto done;
    }

    w = ts_gguf_writer_new(TS_GGUF_DEFAULT_ALIGNMENT, err, errlen);
    if (!w) {
        rc = -1;
        goto done;
    }
    if (ts_hparams_write(&cfg.hp, w) || write_extra_metadata(w, &cfg, o->mix, hf_dir) ||
        ts_hf_sampling_write(&sampling, w)) {
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        goto done;
    }
    char tok_path[4096];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.json", hf_dir);
    bool has_tokenizer = access(tok_path, R_OK) == 0;
    if (has_tokenizer && (rc = ts_tokenizer_write_gguf(w, hf_dir, cfg.hp.n_vocab, err, errlen))) goto done;
    if (!has_tokenizer && !o->quiet)
        fprintf(stderr,
                "convert: %s has no tokenizer.json; the file will hold no tokenizer (token ids only)\n",
                hf_dir);
    uint64_t total = 0;
    for (size_t i = 0; i < c.n_jobs && !rc; i++) {
        rc = declare_job(w, &c.jobs[i], err, errlen);
        total += ts_row_size(c.jobs[i].type, c.jobs[i].spec.ne[0]) * job_rows(&c.jobs[i].spec);
    }
    if (rc) goto done;
    if (ts_gguf_writer_begin_data(w, out_path)) {
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        goto done;
    }
    started = true;
    ts_progress prog;
    ts_progress_init(&prog, "convert", total);
    for (size_t i = 0; i < c.n_jobs && !rc; i++) {
        const job *j = &c.jobs[i];
        int64_t scratch = j->cm == CM_VHEAD ? j->spec.ne[0] : 0;
        rc = ts_stream_rows(w, j->spec.name, j->type, j->spec.ne[0], (int64_t)job_rows(&j->spec), scratch,
                            job_row, job_rows_done, j, NULL, 0, o->quiet ? NULL : &prog, err, errlen);
        for (uint32_t s = 0; s < j->n_src; s++) ts_st_release(j->src[s], 0, j->src[s]->nelements);
    }
    if (!rc && ts_gguf_writer_finish(w)) rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    if (!o->quiet) ts_progress_finish(&prog);
    if (!rc) { /* the file must bind as a qwen4exp model */
        ts_model *m;
        char berr[1024];
        if (ts_model_load(out_path, &m, berr, sizeof berr))
            rc = ts_errf(err, errlen,
                         "the written file does not bind (converter bug or unsupported config): %s", berr);
        else
            ts_model_free(m);
    }
done:
    ts_gguf_writer_free(w);
    if (rc && started) unlink(out_path);
    free_jobs(&c);
    free(c.used);
    ts_st_close(st);
    ts_hf_sampling_free(&sampling);
    ts_hf_config_free(&cfg);
    return rc;
}
