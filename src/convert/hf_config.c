/* config.json → ts_hparams and generation_config.json → general.sampling.* (see hf_config.h).
 * Defaults are transformers 5.17's Qwen4ExpTextConfig. */
#include "convert/hf_config.h"

#include "common/error.h"
#include "common/json_check.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct cfg_ctx {
    const char *path;
    const cJSON *tc;   /* the text config object */
    const char *where; /* "" or "text_config." for messages */
    char *err;
    size_t errlen;
} cfg_ctx;

/* An item that is present and not null. */
static const cJSON *item(const cJSON *o, const char *key) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return j && !cJSON_IsNull(j) ? j : NULL;
}

/* Integer key with a default (used when absent or null) and a range. */
static int get_int(cfg_ctx *c, const char *key, int64_t def, int64_t min, int64_t max, int64_t *out) {
    const cJSON *j = item(c->tc, key);
    if (!j) {
        *out = def;
        return 0;
    }
    double d = j->valuedouble;
    if (!cJSON_IsNumber(j) || d != floor(d) || d < (double)min || d > (double)max)
        return ts_errf(c->err, c->errlen, "%s: '%s%s' must be an integer from %" PRId64 " to %" PRId64,
                       c->path, c->where, key, min, max);
    *out = (int64_t)d;
    return 0;
}

static int get_u32(cfg_ctx *c, const char *key, int64_t def, int64_t min, uint32_t *out) {
    int64_t v;
    if (get_int(c, key, def, min, INT32_MAX, &v)) return -1;
    *out = (uint32_t)v;
    return 0;
}

static int get_num(cfg_ctx *c, const cJSON *o, const char *key, double def, double *out) {
    const cJSON *j = item(o, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(j) || !isfinite(j->valuedouble))
        return ts_errf(c->err, c->errlen, "%s: '%s%s' must be a number", c->path, c->where, key);
    *out = j->valuedouble;
    return 0;
}

static int get_bool(cfg_ctx *c, const cJSON *o, const char *key, bool def, bool *out) {
    const cJSON *j = item(o, key);
    if (!j) {
        *out = def;
        return 0;
    }
    if (!cJSON_IsBool(j))
        return ts_errf(c->err, c->errlen, "%s: '%s%s' must be true or false", c->path, c->where, key);
    *out = cJSON_IsTrue(j);
    return 0;
}

/* A string key (NULL when absent or null). */
static int get_str(cfg_ctx *c, const cJSON *o, const char *key, const char **out) {
    const cJSON *j = item(o, key);
    *out = NULL;
    if (!j) return 0;
    if (!cJSON_IsString(j))
        return ts_errf(c->err, c->errlen, "%s: '%s%s' must be a string", c->path, c->where, key);
    *out = j->valuestring;
    return 0;
}

static bool is_prime(uint64_t v) {
    if (v < 2) return false;
    if (v % 2 == 0) return v == 2;
    for (uint64_t d = 3; d * d <= v; d += 2)
        if (v % d == 0) return false;
    return true;
}

uint64_t ts_nth_prime_after(uint64_t start, uint32_t count) {
    uint64_t p = start;
    for (uint32_t i = 0; i < count; i++) {
        p++;
        while (!is_prime(p)) p++;
    }
    return p;
}

void ts_hf_config_free(ts_hf_config *c) {
    ts_hparams_free(&c->hp);
}

/* Layer kinds from layer_types (or full_attention_interval), like Qwen4ExpTextConfig.__post_init__. */
static int read_layer_kinds(cfg_ctx *c, ts_hparams *hp) {
    const cJSON *lt = item(c->tc, "layer_types");
    hp->kind = calloc(hp->n_layer, sizeof *hp->kind);
    if (!hp->kind) return ts_errf(c->err, c->errlen, "out of memory");
    if (lt) {
        if (!cJSON_IsArray(lt) || cJSON_GetArraySize(lt) != (int)hp->n_layer)
            return ts_errf(c->err, c->errlen,
                           "%s: '%slayer_types' must list num_hidden_layers (%" PRIu32 ") strings", c->path,
                           c->where, hp->n_layer);
        for (uint32_t l = 0; l < hp->n_layer; l++) {
            const cJSON *s = cJSON_GetArrayItem(lt, (int)l);
            const char *v = cJSON_IsString(s) ? s->valuestring : "";
            if (strcmp(v, "linear_attention") == 0)
                hp->kind[l] = TS_LAYER_GDN;
            else if (strcmp(v, "qwen_sparse_attention") == 0 || strcmp(v, "full_attention") == 0)
                hp->kind[l] = TS_LAYER_QSA;
            else
                return ts_errf(c->err, c->errlen,
                               "%s: layer_types[%" PRIu32 "] is '%.40s'; qwen4_exp has only "
                               "'linear_attention' and 'qwen_sparse_attention' layers",
                               c->path, l, v);
        }
        /* the GGUF key is a period; a pattern that has none is written as attention.recurrent_layers */
        hp->full_attn_interval = 0;
        for (uint32_t k = 1; k <= hp->n_layer + 1 && !hp->full_attn_interval; k++) {
            bool ok = true;
            for (uint32_t l = 0; l < hp->n_layer && ok; l++)
                ok = (hp->kind[l] == TS_LAYER_QSA) == ((l + 1) % k == 0);
            if (ok) hp->full_attn_interval = k;
        }
        return 0;
    }
    int64_t k;
    if (get_int(c, "full_attention_interval", 4, 1, INT32_MAX, &k)) return -1;
    hp->full_attn_interval = (uint32_t)k;
    for (uint32_t l = 0; l < hp->n_layer; l++) hp->kind[l] = (l + 1) % k == 0 ? TS_LAYER_QSA : TS_LAYER_GDN;
    return 0;
}

/* rope_parameters (transformers 5) or the legacy rope_theta / partial_rotary_factor / rope_scaling. */
static int read_rope(cfg_ctx *c, ts_hparams *hp) {
    const cJSON *rp = item(c->tc, "rope_parameters");
    const cJSON *legacy = item(c->tc, "rope_scaling");
    if (!rp) rp = legacy;
    if (rp && !cJSON_IsObject(rp))
        return ts_errf(c->err, c->errlen, "%s: '%srope_parameters' must be an object", c->path, c->where);
    for (const cJSON *e = rp ? rp->child : NULL; e; e = e->next)
        if (cJSON_IsObject(e))
            return ts_errf(c->err, c->errlen, "%s: per-layer-type RoPE parameters ('%s') are not supported",
                           c->path, e->string);
    const char *type = NULL;
    if (rp && (get_str(c, rp, "rope_type", &type) || (!type && get_str(c, rp, "type", &type)))) return -1;
    if (type && strcmp(type, "default") != 0)
        return ts_errf(c->err, c->errlen,
                       "%s: RoPE type '%.40s' is not supported (GGUF qwen4exp has no rope scaling; "
                       "only 'default')",
                       c->path, type);
    double theta = 0, factor = 0;
    if (get_num(c, c->tc, "rope_theta", 10000.0, &theta) ||
        get_num(c, c->tc, "partial_rotary_factor", 1.0, &factor))
        return -1;
    if (rp && (get_num(c, rp, "rope_theta", theta, &theta) ||
               get_num(c, rp, "partial_rotary_factor", factor, &factor)))
        return -1;
    if (!(theta > 0) || !(factor > 0 && factor <= 1))
        return ts_errf(c->err, c->errlen,
                       "%s: rope_theta must be positive and partial_rotary_factor in (0, 1]", c->path);
    hp->rope_base = (float)theta;
    hp->n_rot = (uint32_t)(hp->head_dim * factor); /* int(head_dim * factor), as transformers */
    if (hp->n_rot < 2 || hp->n_rot % 2)
        return ts_errf(c->err, c->errlen,
                       "%s: head_dim × partial_rotary_factor = %" PRIu32 " rotary dims; an even "
                       "count ≥ 2 is needed",
                       c->path, hp->n_rot);
    /* mRoPE sections only matter for image positions; text positions reduce to 1-D RoPE, so a config
     * whose sections do not cover n_rot/2 (tiny test models) gets a proportional split instead. */
    int32_t sec[3] = {11, 11, 10};
    const cJSON *ms = rp ? item(rp, "mrope_section") : NULL;
    if (ms) {
        if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) != 3)
            return ts_errf(c->err, c->errlen, "%s: mrope_section must be three integers", c->path);
        for (int i = 0; i < 3; i++) {
            const cJSON *v = cJSON_GetArrayItem(ms, i);
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 65536 ||
                v->valuedouble != floor(v->valuedouble))
                return ts_errf(c->err, c->errlen, "%s: mrope_section must be three non-negative integers",
                               c->path);
            sec[i] = (int32_t)v->valuedouble;
        }
    }
    int32_t half = (int32_t)hp->n_rot / 2;
    if (sec[0] + sec[1] + sec[2] != half) {
        sec[1] = half / 3, sec[2] = half / 3, sec[0] = half - 2 * (half / 3);
    }
    memcpy(hp->rope_sections, sec, sizeof sec);
    hp->rope_sections[3] = 0;
    return 0;
}

static int read_ple(cfg_ctx *c, ts_hparams *hp, ts_hf_config *out) {
    hp->ple_layer = -1;
    const cJSON *ids = item(c->tc, "ple_layer_ids");
    if (ids && !cJSON_IsArray(ids))
        return ts_errf(c->err, c->errlen, "%s: '%sple_layer_ids' must be a list of layer ids", c->path,
                       c->where);
    int n_ids = ids ? cJSON_GetArraySize(ids) : 0;
    int64_t first = -1;
    for (int i = 0; i < n_ids; i++) { /* transformers keeps sorted(set(ids)) */
        const cJSON *v = cJSON_GetArrayItem(ids, i);
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 ||
            v->valuedouble > hp->n_layer)
            return ts_errf(c->err, c->errlen,
                           "%s: ple_layer_ids must hold 1-based layer ids in [1, %" PRIu32 "]", c->path,
                           hp->n_layer);
        int64_t id = (int64_t)v->valuedouble;
        if (first >= 0 && id != first)
            return ts_errf(c->err, c->errlen,
                           "%s: ple_layer_ids names more than one layer; a qwen4exp GGUF holds one "
                           "PLE layer",
                           c->path);
        first = id;
    }
    if (first < 0) return 0;
    hp->ple_layer = (int32_t)(first - 1); /* HF ids are 1-based, GGUF ple.layers 0-based */
    if (hp->kind[hp->ple_layer] != TS_LAYER_GDN)
        return ts_errf(c->err, c->errlen,
                       "%s: PLE layer %" PRId64 " (1-based) is not a linear_attention layer", c->path, first);
    int64_t embed_dim, base, divisor, seed;
    if (get_u32(c, "ngram_size", 3, 2, &hp->ple_n) || get_u32(c, "heads_per_ngram", 8, 1, &hp->ple_p) ||
        get_u32(c, "ple_conv_kernel_size", 4, 1, &hp->ple_conv) ||
        get_int(c, "ple_embed_dim", hp->n_embd, 1, INT32_MAX, &embed_dim) ||
        get_int(c, "ngram_vocab_size_base", 20000000, 1, INT32_MAX, &base) ||
        get_int(c, "make_ngram_vocab_size_divisible_by", 128, 1, INT32_MAX, &divisor) ||
        get_int(c, "seed", 1234, 0, INT64_MAX / 2, &seed))
        return -1;
    if (hp->ple_n > TS_MAX_NGRAM)
        return ts_errf(c->err, c->errlen, "%s: ngram_size %" PRIu32 " is above the supported %d", c->path,
                       hp->ple_n, TS_MAX_NGRAM);
    hp->ple_nh = (hp->ple_n - 1) * hp->ple_p;
    if (embed_dim % hp->ple_nh)
        return ts_errf(c->err, c->errlen,
                       "%s: ple_embed_dim %" PRId64 " is not a multiple of the %" PRIu32 " n-gram heads",
                       c->path, embed_dim, hp->ple_nh);
    hp->ple_dh = (uint32_t)(embed_dim / hp->ple_nh);
    /* eos_token_id may be a list: the n-gram reset uses its first element */
    const cJSON *eos = item(c->tc, "eos_token_id");
    if (eos && cJSON_IsArray(eos)) eos = cJSON_GetArrayItem(eos, 0);
    if (!eos || !cJSON_IsNumber(eos) || eos->valuedouble < 0 || eos->valuedouble >= hp->n_vocab ||
        eos->valuedouble != floor(eos->valuedouble))
        return ts_errf(c->err, c->errlen,
                       "%s: '%seos_token_id' must be set to a token id below vocab_size when PLE "
                       "layers are enabled",
                       c->path, c->where);
    hp->ple_eos = (uint32_t)eos->valuedouble;
    hp->ple_sizes = malloc(hp->ple_nh * sizeof *hp->ple_sizes);
    hp->ple_offsets = malloc(hp->ple_nh * sizeof *hp->ple_offsets);
    if (!hp->ple_sizes || !hp->ple_offsets) return ts_errf(c->err, c->errlen, "out of memory");
    uint64_t total = 0, p = (uint64_t)base - 1;
    for (uint32_t h = 0; h < hp->ple_nh;
         h++) { /* ple_layer_index 0: head h is the (h+1)-th prime after base−1 */
        p = ts_nth_prime_after(p, 1);
        hp->ple_sizes[h] = p, hp->ple_offsets[h] = total, total += p;
    }
    if (total > INT32_MAX)
        return ts_errf(c->err, c->errlen, "%s: the PLE table would have %" PRIu64 " rows, beyond 2^31",
                       c->path, total);
    out->ple_total_rows = total;
    hp->ple_rows = (total + (uint64_t)divisor - 1) / (uint64_t)divisor * (uint64_t)divisor;
    ts_ple_multipliers(hp->n_vocab, hp->ple_n, (uint64_t)seed, 0, hp->ple_mult);
    return 0;
}

/* The indexer fields: all set (QSA) or all unset (then there may be no sparse-attention layer). */
static int read_indexer(cfg_ctx *c, ts_hparams *hp, ts_hf_config *out) {
    static const char *keys[5] = {"indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget",
                                  "indexer_compress_ratio"};
    int64_t v[5];
    int set = 0;
    for (int i = 0; i < 5; i++) {
        if (get_int(c, keys[i], -1, 1, INT32_MAX, &v[i])) return -1;
        set += v[i] > 0;
    }
    bool any_qsa = false;
    for (uint32_t l = 0; l < hp->n_layer; l++) any_qsa |= hp->kind[l] == TS_LAYER_QSA;
    if (set != 0 && set != 5)
        return ts_errf(c->err, c->errlen,
                       "%s: the QSA indexer needs all of indexer_n_heads, indexer_kv_heads, "
                       "indexer_head_dim, indexer_budget and indexer_compress_ratio, or none",
                       c->path);
    if (set == 0) {
        if (any_qsa)
            return ts_errf(c->err, c->errlen,
                           "%s: the config has sparse-attention layers but no indexer_* settings; "
                           "transformers cannot build that model either",
                           c->path);
        /* no attention layer at all: the keys still need sane values for a reader */
        hp->idx_n_head = 1, hp->idx_head_dim = hp->head_dim, hp->idx_top_k = 4, hp->compress = 4;
        hp->idx_top_blocks = 1;
        return 0;
    }
    out->qsa_configured = true;
    if (v[1] != 1)
        return ts_errf(c->err, c->errlen,
                       "%s: indexer_kv_heads is %" PRId64 "; qwen4exp (and transformers) need "
                       "exactly one indexer key head",
                       c->path, v[1]);
    if (v[4] < 2 || v[3] % v[4])
        return ts_errf(c->err, c->errlen,
                       "%s: indexer_budget %" PRId64 " must be a multiple of indexer_compress_ratio "
                       "%" PRId64 " (which must be > 1)",
                       c->path, v[3], v[4]);
    hp->idx_n_head = (uint32_t)v[0], hp->idx_head_dim = (uint32_t)v[2], hp->idx_top_k = (uint32_t)v[3];
    hp->compress = (uint32_t)v[4], hp->idx_top_blocks = (uint32_t)(v[3] / v[4]);
    if (hp->n_rot > hp->idx_head_dim)
        return ts_errf(c->err, c->errlen,
                       "%s: %" PRIu32 " rotary dims do not fit the %" PRIu32 "-dim indexer heads", c->path,
                       hp->n_rot, hp->idx_head_dim);
    return 0;
}

/* What GGUF (and this runtime) cannot express. */
static int refuse_unsupported(cfg_ctx *c) {
    const char *act, *gate;
    bool b = false;
    if (get_str(c, c->tc, "hidden_act", &act) || get_str(c, c->tc, "output_gate_type", &gate)) return -1;
    if (!act) act = "silu";
    if (strcmp(act, "silu") != 0)
        return ts_errf(c->err, c->errlen,
                       "%s: hidden_act '%.40s' is not supported: qwen4exp GGUF files use silu in the "
                       "experts and the GDN convolution",
                       c->path, act);
    const char *g = gate ? gate : act;
    if (strcmp(g, "sigmoid") != 0)
        return ts_errf(c->err, c->errlen,
                       "%s: the GDN output gate is '%.40s' (%s); a qwen4exp GGUF implies sigmoid, so "
                       "this checkpoint cannot be converted",
                       c->path, g, gate ? "output_gate_type" : "output_gate_type unset, so hidden_act");
    if (get_bool(c, c->tc, "norm_topk_prob", true, &b)) return -1;
    if (!b)
        return ts_errf(c->err, c->errlen,
                       "%s: norm_topk_prob is false; qwen4exp GGUF files renormalise the top-k "
                       "router weights",
                       c->path);
    if (get_bool(c, c->tc, "attention_bias", false, &b)) return -1;
    if (b)
        return ts_errf(c->err, c->errlen, "%s: attention_bias is true; qwen4exp has no attention biases",
                       c->path);
    return 0;
}

static int read_text(cfg_ctx *c, ts_hf_config *out) {
    ts_hparams *hp = &out->hp;
    int64_t eps_unused;
    (void)eps_unused;
    uint32_t nk, nv, dk, dv, ff;
    if (refuse_unsupported(c) || get_u32(c, "vocab_size", 248320, 1, &hp->n_vocab) ||
        get_u32(c, "hidden_size", 2048, 1, &hp->n_embd) ||
        get_u32(c, "num_hidden_layers", 40, 1, &hp->n_layer) ||
        get_u32(c, "num_attention_heads", 16, 1, &hp->n_head) ||
        get_u32(c, "num_key_value_heads", 2, 1, &hp->n_head_kv) ||
        get_u32(c, "max_position_embeddings", 32768, 1, &hp->n_ctx_train) ||
        get_u32(c, "head_dim", 256, 1, &hp->head_dim) ||
        get_u32(c, "linear_conv_kernel_dim", 4, 1, &hp->ssm_conv) ||
        get_u32(c, "linear_key_head_dim", 128, 1, &dk) || get_u32(c, "linear_value_head_dim", 128, 1, &dv) ||
        get_u32(c, "linear_num_key_heads", 16, 1, &nk) || get_u32(c, "linear_num_value_heads", 32, 1, &nv) ||
        get_u32(c, "moe_intermediate_size", 512, 1, &ff) ||
        get_u32(c, "shared_expert_intermediate_size", 512, 1, &hp->n_ff_shexp) ||
        get_u32(c, "num_experts_per_tok", 10, 1, &hp->n_expert_used) ||
        get_u32(c, "num_experts", 512, 1, &hp->n_expert) || get_u32(c, "hc_count", 4, 2, &hp->hc_count) ||
        get_u32(c, "hc_lowrank", 320, 1, &hp->hc_rank))
        return -1;
    double eps = 0;
    if (get_num(c, c->tc, "rms_norm_eps", 1e-6, &eps)) return -1;
    if (!(eps > 0)) return ts_errf(c->err, c->errlen, "%s: rms_norm_eps must be positive", c->path);
    hp->eps = (float)eps;
    hp->ssm_nk = nk, hp->ssm_nv = nv, hp->ssm_dk = dk, hp->ssm_dv = dv;
    hp->n_block = hp->n_layer;
    if (hp->n_head % hp->n_head_kv)
        return ts_errf(c->err, c->errlen,
                       "%s: num_attention_heads %" PRIu32 " is not a multiple of num_key_value_heads "
                       "%" PRIu32,
                       c->path, hp->n_head, hp->n_head_kv);
    if (nv % nk)
        return ts_errf(c->err, c->errlen,
                       "%s: linear_num_value_heads %" PRIu32 " is not a multiple of "
                       "linear_num_key_heads %" PRIu32,
                       c->path, nv, nk);
    if (hp->n_expert_used > hp->n_expert)
        return ts_errf(c->err, c->errlen, "%s: num_experts_per_tok %" PRIu32 " exceeds num_experts %" PRIu32,
                       c->path, hp->n_expert_used, hp->n_expert);
    hp->n_ff_exp = malloc(hp->n_layer * sizeof *hp->n_ff_exp);
    if (!hp->n_ff_exp) return ts_errf(c->err, c->errlen, "out of memory");
    for (uint32_t l = 0; l < hp->n_layer; l++) hp->n_ff_exp[l] = ff;
    if (read_layer_kinds(c, hp) || read_rope(c, hp) || read_indexer(c, hp, out) || read_ple(c, hp, out))
        return -1;
    int64_t mtp;
    out->has_mtp_key = item(c->tc, "mtp_num_hidden_layers") != NULL;
    if (get_int(c, "mtp_num_hidden_layers", 0, 0, 64, &mtp)) return -1;
    out->mtp_layers = (uint32_t)mtp;
    return 0;
}

/* Parses the JSON object in path (a file of at most 16 MiB; `what` names the kind of file). */
static int read_json(const char *path, const char *what, cJSON **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    char *text = malloc((16u << 20) + 1);
    size_t n = text ? fread(text, 1, 16u << 20, f) : 0;
    bool too_big = text && n == (16u << 20) && fgetc(f) != EOF;
    bool failed = ferror(f);
    fclose(f);
    if (!text) return ts_errf(err, errlen, "out of memory");
    if (failed || too_big) {
        free(text);
        return failed ? ts_errf(err, errlen, "cannot read %s", path)
                      : ts_errf(err, errlen, "%s is larger than 16 MiB; that is not a %s", path, what);
    }
    if (ts_json_check_text(path, text, n, "a config", err, errlen)) return free(text), -1;
    cJSON *root = cJSON_ParseWithLength(text, n);
    const char *stop = root ? NULL : cJSON_GetErrorPtr();
    size_t at = stop && stop >= text && stop <= text + n ? (size_t)(stop - text) : n;
    free(text);
    if (!root) return ts_errf(err, errlen, "%s is not valid JSON (error at byte offset %zu)", path, at);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return ts_errf(err, errlen, "%s is not a JSON object", path);
    }
    *out = root;
    return 0;
}

int ts_hf_config_read(const char *path, ts_hf_config *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    out->image_token_id = -1;
    out->hp.ple_layer = -1;
    cJSON *root;
    if (read_json(path, "config.json", &root, err, errlen)) return -1;
    cfg_ctx c = {.path = path, .tc = root, .where = "", .err = err, .errlen = errlen};
    const char *mt = NULL;
    int rc = get_str(&c, root, "model_type", &mt);
    const cJSON *tc = item(root, "text_config");
    if (!rc && !mt)
        rc = ts_errf(err, errlen, "%s has no model_type; is this a transformers checkpoint?", path);
    if (!rc && strcmp(mt, "qwen4_exp") == 0) {
        if (!cJSON_IsObject(tc))
            rc = ts_errf(err, errlen, "%s: model_type qwen4_exp needs a text_config object", path);
        out->multimodal = true;
        snprintf(out->prefix, sizeof out->prefix, "model.language_model.");
        /* the composite config's tie_word_embeddings governs Qwen4ExpForConditionalGeneration */
        if (!rc) rc = get_bool(&c, root, "tie_word_embeddings", false, &out->tie_embeddings);
        double img = -1;
        if (!rc && item(root, "image_token_id")) {
            rc = get_num(&c, root, "image_token_id", -1, &img);
            out->image_token_id = (int64_t)img;
        } else if (!rc) {
            out->image_token_id = 248056; /* Qwen4ExpConfig default */
        }
        c.tc = tc, c.where = "text_config.";
        const char *tmt = NULL;
        if (!rc) rc = get_str(&c, tc, "model_type", &tmt);
        if (!rc && tmt && strcmp(tmt, "qwen4_exp_text") != 0)
            rc = ts_errf(err, errlen, "%s: text_config.model_type is '%.40s', expected qwen4_exp_text", path,
                         tmt);
    } else if (!rc && strcmp(mt, "qwen4_exp_text") == 0) {
        snprintf(out->prefix, sizeof out->prefix, "model.");
        rc = get_bool(&c, root, "tie_word_embeddings", false, &out->tie_embeddings);
    } else if (!rc) {
        rc = ts_errf(err, errlen,
                     "%s: model_type is '%.40s'; turbospark converts qwen4_exp (or qwen4_exp_text) "
                     "checkpoints only",
                     path, mt);
    }
    const char *nm = NULL;
    if (!rc && get_str(&c, root, "_name_or_path", &nm) == 0 && nm)
        snprintf(out->name, sizeof out->name, "%s", nm);
    if (!rc) rc = read_text(&c, out);
    if (!rc && out->image_token_id >= 0 && out->image_token_id >= out->hp.n_vocab) out->image_token_id = -1;
    cJSON_Delete(root);
    if (rc) ts_hf_config_free(out);
    return rc;
}

/* generation_config.json key → GGUF key, type and range (hf_config.h); llama.cpp's order. */
enum { S_STR, S_I32, S_F32 };
static const struct {
    const char *json, *key;
    int type;
    double min, max;
} k_sampling[TS_HF_SAMPLING_N] = {
    {"sequence", "general.sampling.sequence", S_STR, 0, 0},
    {"top_k", "general.sampling.top_k", S_I32, 0, INT32_MAX},
    {"top_p", "general.sampling.top_p", S_F32, 0, 1},
    {"min_p", "general.sampling.min_p", S_F32, 0, 1},
    {"xtc_probability", "general.sampling.xtc_probability", S_F32, 0, 1},
    {"xtc_threshold", "general.sampling.xtc_threshold", S_F32, 0, 1},
    {"temperature", "general.sampling.temp", S_F32, 0, 100},
    {"penalty_last_n", "general.sampling.penalty_last_n", S_I32, -1, INT32_MAX},
    {"penalty_repeat", "general.sampling.penalty_repeat", S_F32, 1e-6, 100},
    {"mirostat", "general.sampling.mirostat", S_I32, 0, 2},
    {"mirostat_tau", "general.sampling.mirostat_tau", S_F32, 0, 100},
    {"mirostat_eta", "general.sampling.mirostat_eta", S_F32, 0, 1},
};

int ts_hf_sampling_read(const char *hf_dir, ts_hf_sampling *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", hf_dir);
    if (access(path, F_OK) != 0 && errno == ENOENT) return 0;
    cJSON *root;
    if (read_json(path, "generation_config.json", &root, err, errlen)) return -1;
    int rc = 0;
    for (int i = 0; i < TS_HF_SAMPLING_N && !rc; i++) {
        const cJSON *j = item(root, k_sampling[i].json);
        if (!j) continue;
        if (k_sampling[i].type == S_STR) {
            if (!cJSON_IsString(j))
                rc = ts_errf(err, errlen, "%s: '%s' must be a string", path, k_sampling[i].json);
            else if (!(s->sequence = strdup(j->valuestring)))
                rc = ts_errf(err, errlen, "out of memory");
        } else {
            const double d = j->valuedouble;
            const bool integer = k_sampling[i].type == S_I32;
            if (!cJSON_IsNumber(j) || !(d >= k_sampling[i].min && d <= k_sampling[i].max) ||
                (integer && d != floor(d)))
                rc = ts_errf(err, errlen, "%s: '%s' must be %s from %.10g to %.10g", path, k_sampling[i].json,
                             integer ? "an integer" : "a number", k_sampling[i].min, k_sampling[i].max);
            s->num[i] = d;
        }
        s->has[i] = !rc;
    }
    cJSON_Delete(root);
    if (rc) ts_hf_sampling_free(s);
    return rc;
}

int ts_hf_sampling_write(const ts_hf_sampling *s, ts_gguf_writer *w) {
    int rc = 0;
    for (int i = 0; i < TS_HF_SAMPLING_N; i++) {
        if (!s->has[i]) continue;
        const char *key = k_sampling[i].key;
        if (k_sampling[i].type == S_STR)
            rc |= ts_gguf_writer_set_str(w, key, s->sequence);
        else if (k_sampling[i].type == S_I32)
            rc |= ts_gguf_writer_set_i32(w, key, (int32_t)s->num[i]);
        else
            rc |= ts_gguf_writer_set_f32(w, key, (float)s->num[i]);
    }
    return rc ? -1 : 0;
}

void ts_hf_sampling_free(ts_hf_sampling *s) {
    free(s->sequence);
    memset(s, 0, sizeof *s);
}

int ts_hf_config_set_mtp(ts_hf_config *c, uint32_t n, char *err, size_t errlen) {
    ts_hparams *hp = &c->hp;
    uint32_t nb = hp->n_layer + n;
    uint32_t *f = realloc(hp->n_ff_exp, nb * sizeof *f);
    if (f) hp->n_ff_exp = f;
    ts_layer_kind *k = realloc(hp->kind, nb * sizeof *k);
    if (k) hp->kind = k;
    if (!f || !k) return ts_errf(err, errlen, "out of memory");
    for (uint32_t l = hp->n_layer; l < nb; l++) f[l] = f[0], k[l] = TS_LAYER_QSA;
    hp->n_mtp = n, hp->n_block = nb;
    return 0;
}
