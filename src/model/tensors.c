/* qwen4exp tensors: the one table of names and shapes (MODEL.md §4), and the binder built on it,
 * which also reads the file's tokenizer and recommended sampling (MODEL.md §9).
 *
 * ts_qwen4exp_visit_tensors is the single place that knows what a file holds; the binder, synth
 * and convert all walk it, so a name or a shape cannot drift between them. */
#include "model/qwen4exp.h"

#include "common/error.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ts_role_allows(char role, uint32_t type) {
    switch (role) {
    case 'f':
        return type == TS_TYPE_F32;
    case 'v':
        return type == TS_TYPE_F32 || type == TS_TYPE_F16 || type == TS_TYPE_BF16;
    default:
        return ts_can_dequantize(type);
    }
}

typedef struct visitor {
    ts_tensor_visit_fn fn;
    void *ctx;
    int rc;
} visitor;

/* Emits one tensor: name from a format, shape ne (n_dims ≤ 3), role, slot. */
static void emit(visitor *v, const ts_gguf_tensor **slot, char role, bool optional, uint32_t n_dims,
                 int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...) TS_PRINTF(9, 10);
static void emit(visitor *v, const ts_gguf_tensor **slot, char role, bool optional, uint32_t n_dims,
                 int64_t ne0, int64_t ne1, int64_t ne2, const char *fmt, ...) {
    if (v->rc) return;
    ts_tensor_spec s = {
        .n_dims = n_dims, .ne = {ne0, ne1, ne2}, .role = role, .optional = optional, .slot = slot};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s.name, sizeof s.name, fmt, ap);
    va_end(ap);
    v->rc = v->fn(v->ctx, &s);
}

#define SLOT(m, field) ((m) ? &(m)->field : NULL)

static void emit_hc(visitor *v, ts_hc_weights *hc, const ts_hparams *hp, bool inject, const char *prefix) {
    int64_t W = (int64_t)hp->hc_count * hp->n_embd, r = hp->hc_rank;
    emit(v, hc ? &hc->norm : NULL, 'v', false, 1, W, 1, 1, "%s_norm.weight", prefix);
    emit(v, hc ? &hc->down : NULL, 'm', false, 2, W, r, 1, "%s_down.weight", prefix);
    emit(v, hc ? &hc->up : NULL, 'm', false, 2, r, W, 1, "%s_up.weight", prefix);
    if (inject)
        emit(v, hc ? &hc->inject : NULL, 'm', false, 2, W, hp->hc_count, 1, "%s_inject.weight", prefix);
}

static void emit_moe(visitor *v, ts_layer_weights *L, const ts_hparams *hp, ts_layout lay, uint32_t l) {
    int64_t H = hp->n_embd, E = hp->n_expert, F = hp->n_ff_exp[l], Fs = hp->n_ff_shexp;
    emit(v, SLOT(L, ffn_gate_inp), 'm', false, 2, H, E, 1, "blk.%u.ffn_gate_inp.weight", l);
    if (lay.fused_experts) {
        emit(v, SLOT(L, ffn_gate_up_exps), 'm', false, 3, H, 2 * F, E, "blk.%u.ffn_gate_up_exps.weight", l);
    } else {
        emit(v, SLOT(L, ffn_gate_exps), 'm', false, 3, H, F, E, "blk.%u.ffn_gate_exps.weight", l);
        emit(v, SLOT(L, ffn_up_exps), 'm', false, 3, H, F, E, "blk.%u.ffn_up_exps.weight", l);
    }
    emit(v, SLOT(L, ffn_down_exps), 'm', false, 3, F, H, E, "blk.%u.ffn_down_exps.weight", l);
    emit(v, SLOT(L, ffn_gate_inp_shexp), 'v', false, 1, H, 1, 1, "blk.%u.ffn_gate_inp_shexp.weight", l);
    emit(v, SLOT(L, ffn_gate_shexp), 'm', false, 2, H, Fs, 1, "blk.%u.ffn_gate_shexp.weight", l);
    emit(v, SLOT(L, ffn_up_shexp), 'm', false, 2, H, Fs, 1, "blk.%u.ffn_up_shexp.weight", l);
    emit(v, SLOT(L, ffn_down_shexp), 'm', false, 2, Fs, H, 1, "blk.%u.ffn_down_shexp.weight", l);
}

static void emit_gdn(visitor *v, ts_layer_weights *L, const ts_hparams *hp, uint32_t l) {
    int64_t H = hp->n_embd, nv = hp->ssm_nv, vdim = (int64_t)hp->ssm_nv * hp->ssm_dv;
    int64_t conv_dim = ts_gdn_conv_dim(hp);
    emit(v, SLOT(L, attn_qkv), 'm', false, 2, H, conv_dim, 1, "blk.%u.attn_qkv.weight", l);
    emit(v, SLOT(L, attn_gate), 'm', false, 2, H, vdim, 1, "blk.%u.attn_gate.weight", l);
    emit(v, SLOT(L, ssm_beta), 'm', false, 2, H, nv, 1, "blk.%u.ssm_beta.weight", l);
    emit(v, SLOT(L, ssm_alpha), 'm', false, 2, H, nv, 1, "blk.%u.ssm_alpha.weight", l);
    emit(v, SLOT(L, ssm_a), 'f', false, 1, nv, 1, 1, "blk.%u.ssm_a", l);
    emit(v, SLOT(L, ssm_dt), 'f', false, 1, nv, 1, 1, "blk.%u.ssm_dt.bias", l);
    emit(v, SLOT(L, ssm_conv1d), 'v', false, 2, hp->ssm_conv, conv_dim, 1, "blk.%u.ssm_conv1d.weight", l);
    emit(v, SLOT(L, ssm_norm), 'v', false, 1, hp->ssm_dv, 1, 1, "blk.%u.ssm_norm.weight", l);
    emit(v, SLOT(L, ssm_out), 'm', false, 2, vdim, H, 1, "blk.%u.ssm_out.weight", l);
}

static void emit_qsa(visitor *v, ts_layer_weights *L, const ts_hparams *hp, uint32_t l,
                     bool indexer_optional) {
    int64_t H = hp->n_embd, hd = hp->head_dim, di = hp->idx_head_dim;
    emit(v, SLOT(L, attn_q), 'm', false, 2, H, 2 * hd * hp->n_head, 1, "blk.%u.attn_q.weight", l);
    emit(v, SLOT(L, attn_k), 'm', false, 2, H, hd * hp->n_head_kv, 1, "blk.%u.attn_k.weight", l);
    emit(v, SLOT(L, attn_v), 'm', false, 2, H, hd * hp->n_head_kv, 1, "blk.%u.attn_v.weight", l);
    emit(v, SLOT(L, attn_output), 'm', false, 2, hd * hp->n_head, H, 1, "blk.%u.attn_output.weight", l);
    emit(v, SLOT(L, attn_q_norm), 'v', false, 1, hd, 1, 1, "blk.%u.attn_q_norm.weight", l);
    emit(v, SLOT(L, attn_k_norm), 'v', false, 1, hd, 1, 1, "blk.%u.attn_k_norm.weight", l);
    emit(v, SLOT(L, idx_q), 'm', indexer_optional, 2, H, di * hp->idx_n_head, 1,
         "blk.%u.indexer.q_proj.weight", l);
    emit(v, SLOT(L, idx_k), 'm', indexer_optional, 2, H, di, 1, "blk.%u.indexer.k_proj.weight", l);
    emit(v, SLOT(L, idx_q_norm), 'v', indexer_optional, 1, di, 1, 1, "blk.%u.indexer.q_norm.weight", l);
    emit(v, SLOT(L, idx_k_norm), 'v', indexer_optional, 1, di, 1, 1, "blk.%u.indexer.k_norm.weight", l);
}

static void emit_ple(visitor *v, ts_layer_weights *L, const ts_hparams *hp, uint32_t l) {
    int64_t H = hp->n_embd, W = (int64_t)hp->hc_count * hp->n_embd, E = (int64_t)hp->ple_nh * hp->ple_dh;
    emit(v, SLOT(L, ple_key), 'm', false, 2, E, W, 1, "blk.%u.ple_key.weight", l);
    emit(v, SLOT(L, ple_value), 'm', false, 2, E, H, 1, "blk.%u.ple_value.weight", l);
    emit(v, SLOT(L, ple_norm_key), 'v', false, 1, W, 1, 1, "blk.%u.ple_norm_key.weight", l);
    emit(v, SLOT(L, ple_norm_query), 'v', false, 1, W, 1, 1, "blk.%u.ple_norm_query.weight", l);
    emit(v, SLOT(L, ple_norm_conv), 'v', false, 1, W, 1, 1, "blk.%u.ple_norm_conv.weight", l);
    emit(v, SLOT(L, ple_conv1d), 'v', false, 2, hp->ple_conv, W, 1, "blk.%u.ple_conv1d.weight", l);
}

static void emit_mtp_head(visitor *v, ts_layer_weights *L, const ts_hparams *hp, uint32_t l) {
    int64_t H = hp->n_embd, W = (int64_t)hp->hc_count * hp->n_embd;
    char prefix[48];
    snprintf(prefix, sizeof prefix, "blk.%u.nextn.hc_head", l);
    emit(v, SLOT(L, nextn_eh_proj), 'm', false, 2, 2 * H, H, 1, "blk.%u.nextn.eh_proj.weight", l);
    emit(v, SLOT(L, nextn_enorm), 'v', false, 1, H, 1, 1, "blk.%u.nextn.enorm.weight", l);
    emit(v, SLOT(L, nextn_hnorm), 'v', false, 1, W, 1, 1, "blk.%u.nextn.hnorm.weight", l);
    emit_hc(v, L ? &L->nextn_hc_head : NULL, hp, false, prefix);
}

int ts_qwen4exp_visit_tensors(const ts_hparams *hp, ts_layout lay, ts_model *m, ts_tensor_visit_fn fn,
                              void *ctx) {
    visitor v = {fn, ctx, 0};
    int64_t H = hp->n_embd, V = hp->n_vocab;
    emit(&v, SLOT(m, token_embd), 'm', false, 2, H, V, 1, "token_embd.weight");
    for (uint32_t l = 0; l < hp->n_block; l++) {
        ts_layer_weights *L = m ? &m->layers[l] : NULL;
        char prefix[48];
        snprintf(prefix, sizeof prefix, "blk.%u.hc_attn", l);
        emit_hc(&v, L ? &L->hc_attn : NULL, hp, true, prefix);
        snprintf(prefix, sizeof prefix, "blk.%u.hc_ffn", l);
        emit_hc(&v, L ? &L->hc_ffn : NULL, hp, true, prefix);
        if ((int32_t)l == hp->ple_layer) emit_ple(&v, L, hp, l);
        if (hp->kind[l] == TS_LAYER_GDN)
            emit_gdn(&v, L, hp, l);
        else
            emit_qsa(&v, L, hp, l, l >= hp->n_layer);
        emit_moe(&v, L, hp, lay, l);
        if (l >= hp->n_layer) emit_mtp_head(&v, L, hp, l);
    }
    emit_hc(&v, m ? &m->output_hc : NULL, hp, false, "output_hc");
    emit(&v, SLOT(m, output), 'm', true, 2, H, V, 1, "output.weight");
    if (hp->ple_layer >= 0 && !lay.ple_split)
        emit(&v, SLOT(m, ple_table), 'm', false, 2, hp->ple_dh, (int64_t)hp->ple_rows, 1,
             "per_layer_token_embd.weight");
    for (uint32_t h = 0; hp->ple_layer >= 0 && lay.ple_split && h < hp->ple_nh; h++)
        emit(&v, m ? &m->ple_head_tables[h] : NULL, 'm', false, 2, hp->ple_dh, (int64_t)hp->ple_sizes[h], 1,
             "ple_ngram_embd.%u.weight", h);
    return v.rc;
}

/* ---- binder -------------------------------------------------------------------------------- */

typedef struct binder {
    ts_model *m;
    bool *used; /* [tensor count] */
    char *err;
    size_t errlen;
} binder;

static int bind_one(void *ctx, const ts_tensor_spec *s) {
    binder *b = ctx;
    const ts_gguf *g = b->m->gguf;
    const char *path = ts_gguf_path(g);
    const ts_gguf_tensor *t = ts_gguf_find_tensor(g, s->name);
    if (!t) {
        if (s->optional) return 0;
        return ts_errf(b->err, b->errlen, "%s: tensor '%s' is missing (a qwen4exp model needs it)", path,
                       s->name);
    }
    int64_t want[4] = {s->ne[0], s->n_dims > 1 ? s->ne[1] : 1, s->n_dims > 2 ? s->ne[2] : 1, 1};
    if (memcmp(want, t->ne, sizeof want) != 0)
        return ts_errf(b->err, b->errlen,
                       "%s: tensor '%s' has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                       "], expected [%" PRId64 ", %" PRId64 ", %" PRId64
                       "] (ggml ne order) from the metadata",
                       path, s->name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], want[0], want[1], want[2]);
    if (!ts_role_allows(s->role, t->type))
        return ts_errf(b->err, b->errlen,
                       "%s: tensor '%s' has type %s, which turbospark cannot use there (%s)", path, s->name,
                       ts_type_name(t->type),
                       s->role == 'f'   ? "it must be f32"
                       : s->role == 'v' ? "it must be f32, f16 or bf16"
                                        : "no dequantizer for that type yet");
    b->used[t - ts_gguf_tensor_at(g, 0)] = true;
    *s->slot = t;
    return 0;
}

/* general.sampling.*: top_k of any integer type (llama.cpp writes an i32; ≤ 0 means off), the others
 * floats; a key of another type is ignored. */
static void read_sampling(const ts_gguf *g, ts_sampling_defaults *s) {
    int64_t k;
    s->has[TS_SAMPLING_TEMP] = !ts_gguf_get_f32(g, "general.sampling.temp", &s->temperature, NULL, 0);
    s->has[TS_SAMPLING_TOP_K] = !ts_gguf_get_i64(g, "general.sampling.top_k", &k, NULL, 0);
    s->top_k = s->has[TS_SAMPLING_TOP_K] ? (int32_t)(k < 0 ? 0 : k > INT32_MAX ? INT32_MAX : k) : 0;
    s->has[TS_SAMPLING_TOP_P] = !ts_gguf_get_f32(g, "general.sampling.top_p", &s->top_p, NULL, 0);
    s->has[TS_SAMPLING_MIN_P] = !ts_gguf_get_f32(g, "general.sampling.min_p", &s->min_p, NULL, 0);
}

/* The tokenizer, or the sentence that says why there is none (the model loads either way: its
 * logits can be computed from token ids). */
static void read_tokenizer(ts_model *m) {
    const ts_gguf *g = m->gguf;
    char why[256];
    if (!ts_gguf_find(g, "tokenizer.ggml.model") && !ts_gguf_find(g, "tokenizer.ggml.tokens"))
        snprintf(why, sizeof why, "the file has no tokenizer.ggml.* keys");
    else if (ts_tokenizer_load(g, &m->tokenizer, why, sizeof why) == 0)
        return;
    m->tokenizer = NULL;
    snprintf(m->tokenizer_err, sizeof m->tokenizer_err, "%s has no usable tokenizer: %s", ts_gguf_path(g),
             why);
}

int ts_model_bind(ts_gguf *g, ts_model **out, char *err, size_t errlen) {
    *out = NULL;
    ts_model *m = calloc(1, sizeof *m);
    if (!m) {
        ts_gguf_close(g);
        return ts_errf(err, errlen, "out of memory");
    }
    m->gguf = g;
    if (ts_hparams_read(g, &m->hp, err, errlen)) goto fail;
    const ts_hparams *hp = &m->hp;
    ts_layout lay = {
        .ple_split = ts_gguf_find_tensor(g, "ple_ngram_embd.0.weight") != NULL,
        .fused_experts = ts_gguf_find_tensor(g, "blk.0.ffn_gate_up_exps.weight") != NULL,
    };
    m->layers = calloc(hp->n_block, sizeof *m->layers);
    m->ple_head_tables = lay.ple_split ? calloc(hp->ple_nh, sizeof *m->ple_head_tables) : NULL;
    binder b = {m, calloc((size_t)ts_gguf_tensor_count(g) + 1, sizeof(bool)), err, errlen};
    if (!m->layers || !b.used || (lay.ple_split && !m->ple_head_tables)) {
        free(b.used);
        ts_errf(err, errlen, "out of memory");
        goto fail;
    }
    for (uint32_t l = 0; l < hp->n_block; l++) m->layers[l].kind = hp->kind[l];
    int rc = ts_qwen4exp_visit_tensors(hp, lay, m, bind_one, &b);
    for (int64_t i = 0; rc == 0 && i < ts_gguf_tensor_count(g); i++) {
        const ts_gguf_tensor *t = ts_gguf_tensor_at(g, i);
        if (!b.used[i])
            rc = ts_errf(err, errlen,
                         "%s: tensor '%.*s' is not part of a qwen4exp text model as turbospark knows it "
                         "(vision or unknown weights are not loaded)",
                         ts_gguf_path(g), (int)t->name.len, t->name.ptr);
    }
    free(b.used);
    if (rc) goto fail;
    if (!m->output) m->output = m->token_embd; /* tied embeddings (MODEL.md §4.1) */
    read_sampling(g, &m->sampling);
    read_tokenizer(m);
    *out = m;
    return 0;
fail:
    ts_model_free(m);
    return -1;
}

int ts_model_load(const char *path, ts_model **out, char *err, size_t errlen) {
    ts_gguf *g;
    *out = NULL;
    if (ts_gguf_open(path, &g, err, errlen)) return -1;
    return ts_model_bind(g, out, err, errlen);
}

void ts_model_free(ts_model *m) {
    if (!m) return;
    for (int b = 0; b < TS_MODEL_BACKENDS; b++)
        if (m->backend_ctx[b] && m->backend_ctx_free[b]) m->backend_ctx_free[b](m->backend_ctx[b]);
    ts_tokenizer_free(m->tokenizer);
    ts_hparams_free(&m->hp);
    free(m->layers);
    free(m->ple_head_tables);
    ts_gguf_close(m->gguf);
    free(m);
}
