/* qwen4exp hyperparameters: read + validate (docs/MODEL.md §3.3), write (inverse), released values. */
#include "model/qwen4exp.h"

#include "common/error.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define K(name) TS_ARCH "." name

void ts_hparams_free(ts_hparams *hp) {
    free(hp->n_ff_exp);
    free(hp->kind);
    free(hp->ple_sizes);
    free(hp->ple_offsets);
    memset(hp, 0, sizeof *hp);
}

/* A required u32 key in [min, max]. The maxima (TS_MAX_* in qwen4exp.h) are far above any config of
 * the family and keep every product of two sizes inside 64 bits; they are checked before anything
 * sized by the key is allocated. */
static int get_u32_in(const ts_gguf *g, const char *key, uint32_t min, uint32_t max, uint32_t *v, char *err,
                      size_t errlen) {
    if (ts_gguf_get_u32(g, key, v, err, errlen)) return -1;
    if (*v < min || *v > max)
        return ts_errf(err, errlen,
                       "%s: metadata key '%s' is %" PRIu32 ", expected %" PRIu32 " to %" PRIu32
                       " (edited or corrupt file?)",
                       ts_gguf_path(g), key, *v, min, max);
    return 0;
}

/* A u64 array key of at least `min_count` elements; refuses float storage (MODEL.md §3.3). */
static int get_u64_array(const ts_gguf *g, const char *key, uint64_t min_count, const ts_gguf_value **a,
                         char *err, size_t errlen) {
    if (ts_gguf_get_arr(g, key, -1, a, err, errlen)) return -1;
    uint32_t et = (*a)->arr.elem_type;
    if (et != TS_GGUF_U64 && et != TS_GGUF_I64)
        return ts_errf(err, errlen,
                       "%s: metadata key '%s' is an array of %s, expected u64 (hash constants stored as "
                       "floats lose precision: convert the model again)",
                       ts_gguf_path(g), key, ts_gguf_vtype_name(et));
    if ((*a)->arr.count < min_count)
        return ts_errf(err, errlen,
                       "%s: metadata key '%s' has %" PRIu64 " elements, expected at least %" PRIu64,
                       ts_gguf_path(g), key, (*a)->arr.count, min_count);
    return 0;
}

static int read_arch(const ts_gguf *g, char *err, size_t errlen) {
    char arch[64];
    if (ts_gguf_get_str(g, "general.architecture", arch, sizeof arch, err, errlen)) return -1;
    if (strcmp(arch, "clip") == 0)
        return ts_errf(err, errlen,
                       "%s is a vision projector (mmproj) file; turbospark runs the text model only: "
                       "give it the model's main GGUF",
                       ts_gguf_path(g));
    if (strcmp(arch, TS_ARCH) != 0)
        return ts_errf(err, errlen, "%s is a '%s' model; turbospark runs only '%s' (Qwen3.8-Flash-Next)",
                       ts_gguf_path(g), arch, TS_ARCH);
    return 0;
}

static int read_layer_kinds(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen) {
    const char *path = ts_gguf_path(g);
    hp->kind = calloc(hp->n_block, sizeof *hp->kind);
    if (!hp->kind) return ts_errf(err, errlen, "out of memory");
    const ts_gguf_value *rec = ts_gguf_find(g, K("attention.recurrent_layers"));
    if (rec) {
        if (rec->type != TS_GGUF_ARRAY || rec->arr.elem_type != TS_GGUF_BOOL || rec->arr.count != hp->n_block)
            return ts_errf(err, errlen, "%s: '%s' must be a bool array of block_count (%" PRIu32 ") elements",
                           path, K("attention.recurrent_layers"), hp->n_block);
        for (uint32_t l = 0; l < hp->n_layer; l++)
            hp->kind[l] = ts_gguf_arr_u64(rec, l) ? TS_LAYER_GDN : TS_LAYER_QSA;
    } else {
        if (get_u32_in(g, K("full_attention_interval"), 1, TS_MAX_LAYERS, &hp->full_attn_interval, err,
                       errlen))
            return -1;
        for (uint32_t l = 0; l < hp->n_layer; l++)
            hp->kind[l] = (l + 1) % hp->full_attn_interval == 0 ? TS_LAYER_QSA : TS_LAYER_GDN;
    }
    for (uint32_t l = hp->n_layer; l < hp->n_block; l++) hp->kind[l] = TS_LAYER_QSA; /* MTP blocks */

    /* compress_ratios: 0 on GDN layers and MTP blocks, one shared B > 1 on QSA layers (rules 2-3). */
    const ts_gguf_value *cr;
    if (ts_gguf_get_arr(g, K("attention.compress_ratios"), -1, &cr, err, errlen)) return -1;
    if (cr->arr.count != hp->n_block ||
        !(cr->arr.elem_type == TS_GGUF_I32 || cr->arr.elem_type == TS_GGUF_U32))
        return ts_errf(err, errlen,
                       "%s: '%s' must be an i32 array of block_count (%" PRIu32
                       ") elements, found %s x %" PRIu64,
                       path, K("attention.compress_ratios"), hp->n_block,
                       ts_gguf_vtype_name(cr->arr.elem_type), cr->arr.count);
    hp->compress = 0;
    for (uint32_t l = 0; l < hp->n_block; l++) {
        int64_t b = ts_gguf_arr_i64(cr, l);
        bool qsa_trunk = l < hp->n_layer && hp->kind[l] == TS_LAYER_QSA;
        if (!qsa_trunk && b != 0)
            return ts_errf(err, errlen,
                           "%s: compress ratio of block %" PRIu32 " is %" PRId64 ", expected 0 for a %s",
                           path, l, b, l < hp->n_layer ? "GDN layer" : "MTP block");
        if (qsa_trunk && (b <= 1 || b > TS_MAX_CONTEXT))
            return ts_errf(err, errlen,
                           "%s: compress ratio of QSA layer %" PRIu32 " is %" PRId64 ", expected 2 to %u",
                           path, l, b, TS_MAX_CONTEXT);
        if (qsa_trunk && hp->compress && b != hp->compress)
            return ts_errf(err, errlen,
                           "%s: QSA layers have different compress ratios (%" PRIu32 " and %" PRId64
                           "); one shared ratio is supported",
                           path, hp->compress, b);
        if (qsa_trunk) hp->compress = (uint32_t)b;
    }
    return 0;
}

static int read_ple(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen) {
    const char *path = ts_gguf_path(g);
    hp->ple_layer = -1;
    const ts_gguf_value *pl = ts_gguf_find(g, K("ple.layers"));
    if (!pl) return 0;
    int64_t layer;
    if (pl->type == TS_GGUF_ARRAY) {
        if (pl->arr.count == 0) return 0;
        if (pl->arr.count != 1 || pl->arr.elem_type == TS_GGUF_STRING || pl->arr.elem_type == TS_GGUF_ARRAY ||
            pl->arr.elem_type == TS_GGUF_F32 || pl->arr.elem_type == TS_GGUF_F64)
            return ts_errf(err, errlen,
                           "%s: '%s' must list exactly one integer layer (multi-layer PLE is not supported)",
                           path, K("ple.layers"));
        layer = ts_gguf_arr_i64(pl, 0);
    } else if (!ts_gguf_value_as_i64(pl, &layer)) {
        return ts_errf(err, errlen, "%s: '%s' must be an integer array", path, K("ple.layers"));
    }
    if (layer < 0 || layer >= hp->n_layer || hp->kind[layer] != TS_LAYER_GDN)
        return ts_errf(err, errlen,
                       "%s: PLE layer %" PRId64 " must be a GDN trunk layer (0-based, < %" PRIu32 ")", path,
                       layer, hp->n_layer);
    hp->ple_layer = (int32_t)layer;
    if (get_u32_in(g, K("ple.ngram_size"), 2, TS_MAX_NGRAM, &hp->ple_n, err, errlen) ||
        get_u32_in(g, K("ple.heads_per_ngram"), 1, TS_MAX_HEADS, &hp->ple_p, err, errlen) ||
        get_u32_in(g, K("ple.conv_kernel"), 1, TS_MAX_CONV, &hp->ple_conv, err, errlen) ||
        ts_gguf_get_u32(g, K("ple.eos_token_id"), &hp->ple_eos, err, errlen) ||
        get_u32_in(g, K("embedding_length_per_layer_input"), 1, TS_MAX_WIDTH, &hp->ple_dh, err, errlen))
        return -1;
    if (hp->ple_n > TS_MAX_NGRAM)
        return ts_errf(err, errlen, "%s: PLE n-gram order %" PRIu32 " is above the supported %d", path,
                       hp->ple_n, TS_MAX_NGRAM);
    hp->ple_nh = (hp->ple_n - 1) * hp->ple_p;
    const ts_gguf_value *m, *sz, *of;
    if (get_u64_array(g, K("ple.layer_multipliers"), hp->ple_n, &m, err, errlen) ||
        get_u64_array(g, K("ple.head_vocab_sizes"), hp->ple_nh, &sz, err, errlen) ||
        get_u64_array(g, K("ple.head_offsets"), hp->ple_nh, &of, err, errlen))
        return -1;
    if (sz->arr.count != of->arr.count)
        return ts_errf(err, errlen,
                       "%s: ple.head_vocab_sizes and ple.head_offsets have different lengths (%" PRIu64
                       " and %" PRIu64 ")",
                       path, sz->arr.count, of->arr.count);
    for (uint32_t i = 0; i < hp->ple_n; i++) {
        hp->ple_mult[i] = ts_gguf_arr_u64(m, i);
        /* products m·id must not overflow 63 bits for any id < V (MODEL.md §3.3, §5.4) */
        if (hp->ple_mult[i] == 0 ||
            (hp->n_vocab > 1 && hp->ple_mult[i] > (uint64_t)INT64_MAX / (hp->n_vocab - 1)))
            return ts_errf(err, errlen,
                           "%s: PLE multiplier %" PRIu32 " (%" PRIu64 ") is zero or overflows 63 bits "
                           "times the largest token id",
                           path, i, hp->ple_mult[i]);
    }
    hp->ple_sizes = malloc(hp->ple_nh * sizeof *hp->ple_sizes);
    hp->ple_offsets = malloc(hp->ple_nh * sizeof *hp->ple_offsets);
    if (!hp->ple_sizes || !hp->ple_offsets) return ts_errf(err, errlen, "out of memory");
    uint64_t expect = 0;
    for (uint32_t h = 0; h < hp->ple_nh; h++) {
        hp->ple_sizes[h] = ts_gguf_arr_u64(sz, h);
        hp->ple_offsets[h] = ts_gguf_arr_u64(of, h);
        if (hp->ple_sizes[h] == 0 || hp->ple_offsets[h] != expect)
            return ts_errf(err, errlen,
                           "%s: PLE head %" PRIu32 " has size %" PRIu64 " at offset %" PRIu64
                           "; offsets must be the prefix sums of positive sizes (expected offset %" PRIu64
                           ")",
                           path, h, hp->ple_sizes[h], hp->ple_offsets[h], expect);
        expect += hp->ple_sizes[h];
        if (expect > INT32_MAX)
            return ts_errf(err, errlen, "%s: PLE head %" PRIu32 " ends past row 2^31-1", path, h);
    }
    /* the joined table's rows; the per-head layout (MODEL.md §4.6) holds exactly Σ sizes */
    const ts_gguf_tensor *tab = ts_gguf_find_tensor(g, "per_layer_token_embd.weight");
    hp->ple_rows = tab && tab->n_dims == 2 ? (uint64_t)tab->ne[1] : expect;
    if (hp->ple_rows < expect)
        return ts_errf(err, errlen, "%s: the PLE table has %" PRIu64 " rows but its heads need %" PRIu64,
                       path, hp->ple_rows, expect);
    if (hp->ple_eos >= hp->n_vocab)
        return ts_errf(err, errlen,
                       "%s: ple.eos_token_id %" PRIu32 " is not below the vocabulary size %" PRIu32, path,
                       hp->ple_eos, hp->n_vocab);
    return 0;
}

static int read_ff_exp(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen) {
    hp->n_ff_exp = calloc(hp->n_block, sizeof *hp->n_ff_exp);
    if (!hp->n_ff_exp) return ts_errf(err, errlen, "out of memory");
    const ts_gguf_value *v = ts_gguf_find(g, K("expert_feed_forward_length"));
    if (v && v->type == TS_GGUF_ARRAY) {
        if (v->arr.count != hp->n_block ||
            !(v->arr.elem_type == TS_GGUF_U32 || v->arr.elem_type == TS_GGUF_I32))
            return ts_errf(err, errlen, "%s: '%s' as an array must hold block_count (%" PRIu32 ") u32 values",
                           ts_gguf_path(g), K("expert_feed_forward_length"), hp->n_block);
        for (uint32_t l = 0; l < hp->n_block; l++) {
            int64_t f = ts_gguf_arr_i64(v, l);
            if (f <= 0 || f > TS_MAX_WIDTH)
                return ts_errf(err, errlen, "%s: expert width of layer %" PRIu32 " is %" PRId64,
                               ts_gguf_path(g), l, f);
            hp->n_ff_exp[l] = (uint32_t)f;
        }
        return 0;
    }
    uint32_t f;
    if (get_u32_in(g, K("expert_feed_forward_length"), 1, TS_MAX_WIDTH, &f, err, errlen)) return -1;
    for (uint32_t l = 0; l < hp->n_block; l++) hp->n_ff_exp[l] = f;
    return 0;
}

static int read_rope(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen) {
    const char *path = ts_gguf_path(g);
    if (get_u32_in(g, K("rope.dimension_count"), 2, TS_MAX_HEAD_DIM, &hp->n_rot, err, errlen) ||
        ts_gguf_get_f32(g, K("rope.freq_base"), &hp->rope_base, err, errlen))
        return -1;
    if (hp->n_rot % 2 || hp->n_rot > hp->head_dim || hp->n_rot > hp->idx_head_dim)
        return ts_errf(err, errlen,
                       "%s: rope.dimension_count %" PRIu32 " must be even and at most the head dims (%" PRIu32
                       ", indexer %" PRIu32 ")",
                       path, hp->n_rot, hp->head_dim, hp->idx_head_dim);
    if (!(hp->rope_base >= 1 && hp->rope_base <= 1e12f))
        return ts_errf(err, errlen, "%s: rope.freq_base is %g, expected a finite value from 1 to 1e12", path,
                       (double)hp->rope_base);
    for (int64_t i = 0; i < ts_gguf_kv_count(g); i++) { /* no rope scaling is implemented (MODEL.md §3.3) */
        const ts_gguf_kv *kv = ts_gguf_kv_at(g, i);
        const char *pre = K("rope.scaling.");
        if (kv->key.len > strlen(pre) && memcmp(kv->key.ptr, pre, strlen(pre)) == 0 &&
            !ts_gguf_str_eq(kv->key, K("rope.scaling.type")))
            return ts_errf(err, errlen, "%s: rope scaling ('%.*s') is not supported", path, (int)kv->key.len,
                           kv->key.ptr);
    }
    const ts_gguf_value *st = ts_gguf_find(g, K("rope.scaling.type"));
    if (st && !(st->type == TS_GGUF_STRING && ts_gguf_str_eq(st->str, "none")))
        return ts_errf(err, errlen, "%s: rope scaling is not supported (rope.scaling.type is set)", path);
    const ts_gguf_value *sec = ts_gguf_find(g, K("rope.dimension_sections"));
    if (sec) {
        if (sec->type != TS_GGUF_ARRAY || sec->arr.count < 3 || sec->arr.count > 4 ||
            !(sec->arr.elem_type == TS_GGUF_I32 || sec->arr.elem_type == TS_GGUF_U32))
            return ts_errf(err, errlen, "%s: rope.dimension_sections must be 3 or 4 integers", path);
        int64_t sum = 0;
        for (uint64_t i = 0; i < sec->arr.count; i++) {
            hp->rope_sections[i] = (int32_t)ts_gguf_arr_i64(sec, i);
            if (hp->rope_sections[i] < 0 || hp->rope_sections[i] > (int32_t)hp->n_rot)
                return ts_errf(err, errlen,
                               "%s: rope.dimension_sections[%" PRIu64 "] is %" PRId32
                               ", expected 0 to %" PRIu32,
                               path, i, hp->rope_sections[i], hp->n_rot);
            if (i < 3) sum += hp->rope_sections[i];
        }
        if (sum != hp->n_rot / 2)
            return ts_errf(err, errlen,
                           "%s: rope.dimension_sections[0..2] sum to %" PRId64
                           ", expected n_rot/2 = %" PRIu32,
                           path, sum, hp->n_rot / 2);
    }
    return 0;
}

int ts_hparams_read(const ts_gguf *g, ts_hparams *hp, char *err, size_t errlen) {
    memset(hp, 0, sizeof *hp);
    const char *path = ts_gguf_path(g);
    if (read_arch(g, err, errlen)) return -1;
    const ts_gguf_tensor *emb = ts_gguf_find_tensor(g, "token_embd.weight");
    if (!emb || emb->n_dims != 2 || emb->ne[1] > UINT32_MAX)
        return ts_errf(err, errlen, "%s: tensor 'token_embd.weight' is %s", path,
                       emb ? "not a 2-D [H, V] matrix" : "missing");
    hp->n_vocab = (uint32_t)emb->ne[1];
    uint32_t kv_len, v_len;
    if (get_u32_in(g, K("embedding_length"), 1, TS_MAX_WIDTH, &hp->n_embd, err, errlen) ||
        get_u32_in(g, K("block_count"), 1, TS_MAX_LAYERS, &hp->n_block, err, errlen) ||
        get_u32_in(g, K("context_length"), 1, TS_MAX_CONTEXT, &hp->n_ctx_train, err, errlen) ||
        ts_gguf_get_f32(g, K("attention.layer_norm_rms_epsilon"), &hp->eps, err, errlen) ||
        get_u32_in(g, K("hyper_connection.count"), 2, TS_MAX_STREAMS, &hp->hc_count, err, errlen) ||
        get_u32_in(g, K("hyper_connection.low_rank"), 1, TS_MAX_WIDTH, &hp->hc_rank, err, errlen) ||
        get_u32_in(g, K("attention.head_count"), 1, TS_MAX_HEADS, &hp->n_head, err, errlen) ||
        get_u32_in(g, K("attention.head_count_kv"), 1, TS_MAX_HEADS, &hp->n_head_kv, err, errlen) ||
        get_u32_in(g, K("attention.key_length"), 1, TS_MAX_HEAD_DIM, &kv_len, err, errlen) ||
        get_u32_in(g, K("attention.value_length"), 1, TS_MAX_HEAD_DIM, &v_len, err, errlen) ||
        get_u32_in(g, K("attention.indexer.head_count"), 1, TS_MAX_HEADS, &hp->idx_n_head, err, errlen) ||
        get_u32_in(g, K("attention.indexer.key_length"), 1, TS_MAX_HEAD_DIM, &hp->idx_head_dim, err,
                   errlen) ||
        get_u32_in(g, K("attention.indexer.top_k"), 1, TS_MAX_CONTEXT, &hp->idx_top_k, err, errlen) ||
        get_u32_in(g, K("ssm.conv_kernel"), 1, TS_MAX_CONV, &hp->ssm_conv, err, errlen) ||
        get_u32_in(g, K("ssm.state_size"), 1, TS_MAX_HEAD_DIM, &hp->ssm_dk, err, errlen) ||
        get_u32_in(g, K("ssm.group_count"), 1, TS_MAX_HEADS, &hp->ssm_nk, err, errlen) ||
        get_u32_in(g, K("ssm.time_step_rank"), 1, TS_MAX_HEADS, &hp->ssm_nv, err, errlen) ||
        get_u32_in(g, K("expert_count"), 1, TS_MAX_EXPERTS, &hp->n_expert, err, errlen) ||
        get_u32_in(g, K("expert_used_count"), 1, TS_MAX_EXPERTS, &hp->n_expert_used, err, errlen) ||
        get_u32_in(g, K("expert_shared_feed_forward_length"), 1, TS_MAX_WIDTH, &hp->n_ff_shexp, err, errlen))
        return -1;
    /* every block is at least TS_MIN_TENSORS_PER_BLOCK tensors of this file: refused here, before the
     * per-block tables below are allocated (a 4-byte edit of block_count must cost nothing) */
    if ((uint64_t)hp->n_block * TS_MIN_TENSORS_PER_BLOCK > (uint64_t)ts_gguf_tensor_count(g))
        return ts_errf(err, errlen,
                       "%s: block_count is %" PRIu32 ", but the file holds %" PRId64 " tensors, fewer "
                       "than the %d a block needs at least (edited or truncated file?)",
                       path, hp->n_block, ts_gguf_tensor_count(g), TS_MIN_TENSORS_PER_BLOCK);
    if (!(hp->eps > 0 && hp->eps <= 0.1f))
        return ts_errf(err, errlen,
                       "%s: attention.layer_norm_rms_epsilon is %g, expected a finite value above 0 and "
                       "at most 0.1",
                       path, (double)hp->eps);
    uint32_t inner;
    if (get_u32_in(g, K("ssm.inner_size"), 1, TS_MAX_WIDTH, &inner, err, errlen)) return -1;
    const ts_gguf_value *nmtp = ts_gguf_find(g, K("nextn_predict_layers"));
    if (nmtp && ts_gguf_get_u32(g, K("nextn_predict_layers"), &hp->n_mtp, err, errlen)) return -1;
    if (hp->n_mtp >= hp->n_block)
        return ts_errf(err, errlen,
                       "%s: nextn_predict_layers (%" PRIu32
                       ") leaves no trunk layers of block_count %" PRIu32,
                       path, hp->n_mtp, hp->n_block);
    hp->n_layer = hp->n_block - hp->n_mtp;
    hp->head_dim = kv_len;
    if (kv_len != v_len)
        return ts_errf(err, errlen, "%s: attention key_length %" PRIu32 " != value_length %" PRIu32, path,
                       kv_len, v_len);
    if (hp->n_head % hp->n_head_kv)
        return ts_errf(err, errlen, "%s: head_count %" PRIu32 " is not a multiple of head_count_kv %" PRIu32,
                       path, hp->n_head, hp->n_head_kv);
    if (hp->ssm_nv % hp->ssm_nk)
        return ts_errf(err, errlen,
                       "%s: ssm.time_step_rank (value heads, %" PRIu32 ") is not a multiple of "
                       "ssm.group_count (key heads, %" PRIu32 ")",
                       path, hp->ssm_nv, hp->ssm_nk);
    if (inner % hp->ssm_nv)
        return ts_errf(err, errlen,
                       "%s: ssm.inner_size %" PRIu32 " is not a multiple of the value heads %" PRIu32, path,
                       inner, hp->ssm_nv);
    hp->ssm_dv = inner / hp->ssm_nv;
    if (hp->n_expert_used > hp->n_expert)
        return ts_errf(err, errlen, "%s: expert_used_count %" PRIu32 " exceeds expert_count %" PRIu32, path,
                       hp->n_expert_used, hp->n_expert);
    if (read_layer_kinds(g, hp, err, errlen) || read_ff_exp(g, hp, err, errlen) ||
        read_rope(g, hp, err, errlen))
        return -1;
    bool any_qsa = false;
    for (uint32_t l = 0; l < hp->n_layer; l++) any_qsa |= hp->kind[l] == TS_LAYER_QSA;
    if (any_qsa) {
        if (hp->idx_top_k % hp->compress)
            return ts_errf(err, errlen,
                           "%s: indexer top_k %" PRIu32 " is not a multiple of the compress ratio %" PRIu32,
                           path, hp->idx_top_k, hp->compress);
        hp->idx_top_blocks = hp->idx_top_k / hp->compress;
    }
    return read_ple(g, hp, err, errlen);
}

int ts_hparams_write(const ts_hparams *hp, ts_gguf_writer *w) {
    int rc = ts_gguf_writer_set_str(w, "general.architecture", TS_ARCH);
    rc |= ts_gguf_writer_set_u32(w, K("context_length"), hp->n_ctx_train);
    rc |= ts_gguf_writer_set_u32(w, K("embedding_length"), hp->n_embd);
    rc |= ts_gguf_writer_set_u32(w, K("block_count"), hp->n_block);
    rc |= ts_gguf_writer_set_u32(w, K("attention.head_count"), hp->n_head);
    rc |= ts_gguf_writer_set_u32(w, K("attention.head_count_kv"), hp->n_head_kv);
    rc |= ts_gguf_writer_set_u32(w, K("attention.key_length"), hp->head_dim);
    rc |= ts_gguf_writer_set_u32(w, K("attention.value_length"), hp->head_dim);
    rc |= ts_gguf_writer_set_f32(w, K("attention.layer_norm_rms_epsilon"), hp->eps);
    rc |= ts_gguf_writer_set_f32(w, K("rope.freq_base"), hp->rope_base);
    rc |= ts_gguf_writer_set_u32(w, K("rope.dimension_count"), hp->n_rot);
    rc |= ts_gguf_writer_set_arr(w, K("rope.dimension_sections"), TS_GGUF_I32, hp->rope_sections, 4);
    rc |= ts_gguf_writer_set_u32(w, K("expert_count"), hp->n_expert);
    rc |= ts_gguf_writer_set_u32(w, K("expert_used_count"), hp->n_expert_used);
    bool uniform = true;
    for (uint32_t l = 1; l < hp->n_block; l++) uniform &= hp->n_ff_exp[l] == hp->n_ff_exp[0];
    if (uniform)
        rc |= ts_gguf_writer_set_u32(w, K("expert_feed_forward_length"), hp->n_ff_exp[0]);
    else
        rc |= ts_gguf_writer_set_arr(w, K("expert_feed_forward_length"), TS_GGUF_U32, hp->n_ff_exp,
                                     hp->n_block);
    rc |= ts_gguf_writer_set_u32(w, K("expert_shared_feed_forward_length"), hp->n_ff_shexp);
    rc |= ts_gguf_writer_set_u32(w, K("ssm.conv_kernel"), hp->ssm_conv);
    rc |= ts_gguf_writer_set_u32(w, K("ssm.state_size"), hp->ssm_dk);
    rc |= ts_gguf_writer_set_u32(w, K("ssm.group_count"), hp->ssm_nk);
    rc |= ts_gguf_writer_set_u32(w, K("ssm.time_step_rank"), hp->ssm_nv);
    rc |= ts_gguf_writer_set_u32(w, K("ssm.inner_size"), hp->ssm_nv * hp->ssm_dv);
    rc |= ts_gguf_writer_set_u32(w, K("full_attention_interval"), hp->full_attn_interval);
    rc |= ts_gguf_writer_set_u32(w, K("hyper_connection.count"), hp->hc_count);
    rc |= ts_gguf_writer_set_u32(w, K("hyper_connection.low_rank"), hp->hc_rank);
    rc |= ts_gguf_writer_set_u32(w, K("attention.indexer.head_count"), hp->idx_n_head);
    rc |= ts_gguf_writer_set_u32(w, K("attention.indexer.key_length"), hp->idx_head_dim);
    rc |= ts_gguf_writer_set_u32(w, K("attention.indexer.top_k"), hp->idx_top_k);
    int32_t *cr = calloc(hp->n_block, sizeof *cr);
    if (!cr) return -1;
    for (uint32_t l = 0; l < hp->n_layer; l++)
        cr[l] = hp->kind[l] == TS_LAYER_QSA ? (int32_t)hp->compress : 0;
    rc |= ts_gguf_writer_set_arr(w, K("attention.compress_ratios"), TS_GGUF_I32, cr, hp->n_block);
    free(cr);
    if (hp->n_mtp) rc |= ts_gguf_writer_set_u32(w, K("nextn_predict_layers"), hp->n_mtp);
    if (hp->ple_layer >= 0) {
        int32_t pl = hp->ple_layer;
        rc |= ts_gguf_writer_set_arr(w, K("ple.layers"), TS_GGUF_I32, &pl, 1);
        rc |= ts_gguf_writer_set_u32(w, K("ple.ngram_size"), hp->ple_n);
        rc |= ts_gguf_writer_set_u32(w, K("ple.heads_per_ngram"), hp->ple_p);
        rc |= ts_gguf_writer_set_u32(w, K("ple.conv_kernel"), hp->ple_conv);
        rc |= ts_gguf_writer_set_u32(w, K("ple.eos_token_id"), hp->ple_eos);
        rc |= ts_gguf_writer_set_u32(w, K("embedding_length_per_layer_input"), hp->ple_dh);
        rc |= ts_gguf_writer_set_arr(w, K("ple.layer_multipliers"), TS_GGUF_U64, hp->ple_mult, hp->ple_n);
        rc |= ts_gguf_writer_set_arr(w, K("ple.head_vocab_sizes"), TS_GGUF_U64, hp->ple_sizes, hp->ple_nh);
        rc |= ts_gguf_writer_set_arr(w, K("ple.head_offsets"), TS_GGUF_U64, hp->ple_offsets, hp->ple_nh);
    }
    return rc ? -1 : 0;
}

static uint64_t splitmix64(uint64_t v) {
    v += UINT64_C(0x9E3779B97F4A7C15);
    v = (v ^ (v >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    v = (v ^ (v >> 27)) * UINT64_C(0x94D049BB133111EB);
    return v ^ (v >> 31);
}

void ts_ple_multipliers(uint32_t n_vocab, uint32_t n, uint64_t seed, uint32_t ple_index, uint64_t *out) {
    const uint64_t gamma = UINT64_C(0x9E3779B97F4A7C15);
    uint64_t half = ((uint64_t)INT64_MAX / n_vocab) / 2;
    for (uint32_t i = 0; i < n; i++)
        out[i] = 2 * (splitmix64(seed + UINT64_C(10007) * ple_index + gamma * (i + 1)) % half) + 1;
}

int ts_hparams_set_layers(ts_hparams *hp, uint32_t n_layer, uint32_t n_mtp, char *err, size_t errlen) {
    uint32_t n_block = n_layer + n_mtp;
    if (n_layer == 0) return ts_errf(err, errlen, "a model needs at least one trunk layer");
    if (hp->ple_layer >= (int32_t)n_layer)
        return ts_errf(err, errlen, "the PLE layer %" PRId32 " does not exist in %" PRIu32 " layers",
                       hp->ple_layer, n_layer);
    uint32_t ff = hp->n_ff_exp ? hp->n_ff_exp[0] : 0;
    uint32_t *f = realloc(hp->n_ff_exp, n_block * sizeof *f);
    if (f) hp->n_ff_exp = f;
    ts_layer_kind *k = realloc(hp->kind, n_block * sizeof *k);
    if (k) hp->kind = k;
    if (!f || !k) return ts_errf(err, errlen, "out of memory");
    for (uint32_t l = 0; l < n_block; l++) {
        f[l] = ff;
        k[l] = l >= n_layer || (l + 1) % hp->full_attn_interval == 0 ? TS_LAYER_QSA : TS_LAYER_GDN;
    }
    hp->n_layer = n_layer, hp->n_mtp = n_mtp, hp->n_block = n_block;
    return 0;
}

int ts_hparams_tiny(ts_hparams *hp, char *err, size_t errlen) {
    static const uint64_t sizes[4] = {101, 103, 107, 109};
    memset(hp, 0, sizeof *hp);
    *hp = (ts_hparams){
        .n_vocab = 512,
        .n_embd = 64,
        .n_ctx_train = 4096,
        .eps = 1e-6f,
        .hc_count = 4,
        .hc_rank = 32,
        .n_head = 4,
        .n_head_kv = 2,
        .head_dim = 32,
        .n_rot = 16,
        .rope_base = 1e7f,
        .rope_sections = {3, 3, 2, 0},
        .idx_n_head = 2,
        .idx_head_dim = 16,
        .idx_top_k = 16,
        .compress = 4,
        .idx_top_blocks = 4,
        .ssm_conv = 4,
        .ssm_dk = 16,
        .ssm_nk = 2,
        .ssm_nv = 6,
        .ssm_dv = 16,
        .full_attn_interval = 4,
        .n_expert = 8,
        .n_expert_used = 2,
        .n_ff_shexp = 32,
        .ple_layer = 1,
        .ple_n = 3,
        .ple_p = 2,
        .ple_nh = 4,
        .ple_dh = 16,
        .ple_conv = 4,
        .ple_eos = 500,
    };
    hp->n_ff_exp = malloc(sizeof *hp->n_ff_exp);
    hp->ple_sizes = malloc(4 * sizeof *hp->ple_sizes);
    hp->ple_offsets = malloc(4 * sizeof *hp->ple_offsets);
    if (!hp->n_ff_exp || !hp->ple_sizes || !hp->ple_offsets) {
        ts_hparams_free(hp);
        return ts_errf(err, errlen, "out of memory");
    }
    hp->n_ff_exp[0] = 32;
    uint64_t off = 0;
    for (int h = 0; h < 4; h++) hp->ple_sizes[h] = sizes[h], hp->ple_offsets[h] = off, off += sizes[h];
    hp->ple_rows = (off + 127) / 128 * 128;
    ts_ple_multipliers(hp->n_vocab, hp->ple_n, 1234, 0, hp->ple_mult);
    if (ts_hparams_set_layers(hp, 4, 0, err, errlen)) {
        ts_hparams_free(hp);
        return -1;
    }
    return 0;
}

int ts_hparams_mid(ts_hparams *hp, char *err, size_t errlen) {
    if (ts_hparams_tiny(hp, err, errlen)) return -1;
    /* every width a multiple of 256, so any quantization applies; ~0.9 B parameters, 8 layers */
    hp->n_vocab = 32768, hp->n_embd = 1024, hp->hc_rank = 256, hp->n_head = 8, hp->n_head_kv = 2;
    hp->head_dim = 256, hp->n_rot = 64, hp->rope_sections[0] = 11, hp->rope_sections[1] = 11;
    hp->rope_sections[2] = 10, hp->idx_n_head = 4, hp->idx_head_dim = 128, hp->idx_top_k = 2048;
    hp->idx_top_blocks = 512, hp->ssm_dk = 128, hp->ssm_nk = 4, hp->ssm_nv = 12, hp->ssm_dv = 128;
    hp->n_expert = 64, hp->n_expert_used = 8, hp->n_ff_shexp = 512, hp->ple_eos = 32000;
    hp->n_ff_exp[0] = 512;
    ts_ple_multipliers(hp->n_vocab, hp->ple_n, 1234, 0, hp->ple_mult);
    return ts_hparams_set_layers(hp, 8, 0, err, errlen);
}

int ts_hparams_released(ts_hparams *hp, char *err, size_t errlen) {
    static const uint64_t sizes[16] = {20000003, 20000023, 20000033, 20000047, 20000059, 20000063,
                                       20000069, 20000077, 20000081, 20000093, 20000107, 20000147,
                                       20000153, 20000159, 20000161, 20000171};
    memset(hp, 0, sizeof *hp);
    *hp = (ts_hparams){
        .n_vocab = 248320,
        .n_embd = 2560,
        .n_block = 48,
        .n_layer = 48,
        .n_ctx_train = 262144,
        .eps = 1e-6f,
        .hc_count = 4,
        .hc_rank = 320,
        .n_head = 24,
        .n_head_kv = 2,
        .head_dim = 256,
        .n_rot = 64,
        .rope_base = 1e7f,
        .rope_sections = {11, 11, 10, 0},
        .idx_n_head = 4,
        .idx_head_dim = 128,
        .idx_top_k = 2048,
        .compress = 4,
        .idx_top_blocks = 512,
        .ssm_conv = 4,
        .ssm_dk = 128,
        .ssm_nk = 16,
        .ssm_nv = 48,
        .ssm_dv = 128,
        .full_attn_interval = 4,
        .n_expert = 512,
        .n_expert_used = 10,
        .n_ff_shexp = 640,
        .ple_layer = 1,
        .ple_n = 3,
        .ple_p = 8,
        .ple_nh = 16,
        .ple_dh = 160,
        .ple_conv = 4,
        .ple_eos = 248044,
    };
    hp->n_ff_exp = malloc(hp->n_block * sizeof *hp->n_ff_exp);
    hp->kind = malloc(hp->n_block * sizeof *hp->kind);
    hp->ple_sizes = malloc(16 * sizeof *hp->ple_sizes);
    hp->ple_offsets = malloc(16 * sizeof *hp->ple_offsets);
    if (!hp->n_ff_exp || !hp->kind || !hp->ple_sizes || !hp->ple_offsets) {
        ts_hparams_free(hp);
        return ts_errf(err, errlen, "out of memory");
    }
    for (uint32_t l = 0; l < hp->n_block; l++) {
        hp->n_ff_exp[l] = 640;
        hp->kind[l] = (l + 1) % 4 == 0 ? TS_LAYER_QSA : TS_LAYER_GDN;
    }
    uint64_t off = 0;
    for (int h = 0; h < 16; h++) hp->ple_sizes[h] = sizes[h], hp->ple_offsets[h] = off, off += sizes[h];
    hp->ple_rows = (off + 127) / 128 * 128; /* 320,001,536: 128 shards of 2,500,012 rows */
    ts_ple_multipliers(hp->n_vocab, hp->ple_n, 1234, 0, hp->ple_mult);
    return 0;
}
