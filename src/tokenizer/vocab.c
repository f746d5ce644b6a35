/* Loading the tokenizer from GGUF metadata; lookups and accessors. */
#include "tokenizer/internal.h"

#include "common/error.h"
#include "gguf/gguf.h"

#include <stdlib.h>
#include <string.h>

static uint64_t pow2_at_least(uint64_t n) {
    uint64_t c = 16;
    while (c < n) c *= 2;
    return c;
}

static const char *tok_text(const ts_tokenizer *t, int32_t id, size_t *len) {
    *len = (size_t)(t->text_off[id + 1] - t->text_off[id]);
    return t->text_arena + t->text_off[id];
}

static int32_t map_get(const ts_tokenizer *t, const char *s, size_t len) {
    const ts_strmap *m = &t->by_text;
    uint32_t h = ts_hash_bytes(s, len);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        int32_t id = m->slot[i];
        if (id < 0) return -1;
        size_t l;
        const char *x = tok_text(t, id, &l);
        if (m->hash[i] == h && l == len && !memcmp(x, s, len)) return id;
    }
}

static void map_put(ts_tokenizer *t, int32_t id) {
    ts_strmap *m = &t->by_text;
    size_t len;
    const char *s = tok_text(t, id, &len);
    uint32_t h = ts_hash_bytes(s, len);
    for (uint64_t i = h & m->mask;; i = (i + 1) & m->mask) {
        int32_t o = m->slot[i];
        if (o < 0) {
            m->slot[i] = id, m->hash[i] = h;
            return;
        }
        size_t l;
        const char *x = tok_text(t, o, &l);
        if (m->hash[i] == h && l == len && !memcmp(x, s, len)) {
            /* The same text twice: the BPE vocabulary (NORMAL) entry is the one merges refer to. */
            if (t->type[o] != TS_TOKEN_NORMAL && t->type[id] == TS_TOKEN_NORMAL) m->slot[i] = id;
            return;
        }
    }
}

static ts_merge_entry *merge_slot(ts_merge_entry *tab, uint64_t mask, uint64_t key) {
    uint64_t h = key * 0x9E3779B97F4A7C15ull;
    for (uint64_t i = (h >> 20) & mask;; i = (i + 1) & mask)
        if (tab[i].key == key || tab[i].key == 0) return &tab[i];
}

void ts_tokenizer_free(ts_tokenizer *t) {
    if (!t) return;
    free(t->text_arena);
    free(t->text_off);
    free(t->bytes_arena);
    free(t->bytes_off);
    free(t->type);
    free(t->eog);
    free(t->by_text.slot);
    free(t->by_text.hash);
    free(t->merges);
    free(t->special_ids);
    ts_pretok_free(t->pretok);
    free(t->chat_template);
    free(t);
}

static int get_string(const ts_gguf *g, const char *key, const ts_gguf_str **s, bool required, char *err,
                      size_t errlen) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    *s = NULL;
    if (!v)
        return required ? ts_errf(err, errlen, "the file has no %s (a tokenizer is needed to run text)", key)
                        : 0;
    if (v->type != TS_GGUF_STRING)
        return ts_errf(err, errlen, "%s is a %s, expected a string", key, ts_gguf_vtype_name(v->type));
    *s = &v->str;
    return 0;
}

static int get_id(const ts_gguf *g, const char *key, int32_t n, int32_t *id, char *err, size_t errlen) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    *id = -1;
    if (!v) return 0;
    int64_t x;
    if (!ts_gguf_value_as_i64(v, &x))
        return ts_errf(err, errlen, "%s is a %s, expected an integer", key, ts_gguf_vtype_name(v->type));
    if (x < 0 || x >= n)
        return ts_errf(err, errlen, "%s is %lld but the vocabulary has %d tokens", key, (long long)x, (int)n);
    *id = (int32_t)x;
    return 0;
}

/* Decoded bytes of a NORMAL token: every code point through the inverse GPT-2 byte map (a code
 * point outside the map, or invalid UTF-8, is kept as it is). */
static size_t unmap_bytes(const char *s, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = ts_utf8_char((const unsigned char *)s + i, n - i, &cp);
        if (l <= 0) {
            out[o++] = s[i++];
            continue;
        }
        int b = ts_cp_to_byte(cp);
        if (b >= 0)
            out[o++] = (char)b;
        else
            memcpy(out + o, s + i, (size_t)l), o += (size_t)l;
        i += (size_t)l;
    }
    return o;
}

static const char *const k_eog_texts[] = {
    "<|eot_id|>",  "<|im_end|>",    "<|end|>",      "<end_of_turn>",   "<|endoftext|>",
    "<|eom_id|>",  "<EOT>",         "_<EOT>",       "<|end_of_text|>", "<end_of_utterance>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
};

static int cmp_special(const void *a, const void *b, void *ctx) {
    const ts_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx, ly;
    const char *sx = tok_text(t, x, &lx), *sy = tok_text(t, y, &ly);
    int fx = (unsigned char)sx[0], fy = (unsigned char)sy[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (lx != ly) return lx > ly ? -1 : 1; /* longest first */
    return x < y ? -1 : x > y;
}

int ts_tokenizer_load(const ts_gguf *g, ts_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    const ts_gguf_str *model, *pre, *tmpl;
    if (get_string(g, "tokenizer.ggml.model", &model, true, err, errlen)) return -1;
    if (!ts_gguf_str_eq(*model, "gpt2"))
        return ts_errf(
            err, errlen,
            "tokenizer.ggml.model is '%.*s'; this runtime reads byte-level BPE ('gpt2') tokenizers only",
            (int)(model->len > 64 ? 64 : model->len), model->ptr);
    if (get_string(g, "tokenizer.ggml.pre", &pre, true, err, errlen)) return -1;
    if (pre->len >= sizeof((ts_tokenizer *)0)->pre)
        return ts_errf(err, errlen, "tokenizer.ggml.pre is '%.*s'; this runtime knows 'qwen35' and 'qwen2'",
                       40, pre->ptr);
    if (get_string(g, "tokenizer.chat_template", &tmpl, false, err, errlen)) return -1;
    const ts_gguf_value *toks = ts_gguf_find(g, "tokenizer.ggml.tokens");
    if (!toks)
        return ts_errf(err, errlen,
                       "the file has no tokenizer.ggml.tokens (a tokenizer is needed to run text)");
    if (toks->type != TS_GGUF_ARRAY || toks->arr.elem_type != TS_GGUF_STRING)
        return ts_errf(err, errlen, "tokenizer.ggml.tokens must be an array of strings");
    if (toks->arr.count == 0 || toks->arr.count > INT32_MAX / 2)
        return ts_errf(err, errlen, "tokenizer.ggml.tokens has %llu entries",
                       (unsigned long long)toks->arr.count);
    const ts_gguf_value *types = ts_gguf_find(g, "tokenizer.ggml.token_type");
    if (types && (types->type != TS_GGUF_ARRAY || types->arr.count != toks->arr.count || !types->arr.data ||
                  ts_gguf_vtype_size(types->arr.elem_type) == 0 || types->arr.elem_type == TS_GGUF_F32 ||
                  types->arr.elem_type == TS_GGUF_F64))
        return ts_errf(err, errlen,
                       "tokenizer.ggml.token_type must be an integer array with one entry per token (%llu)",
                       (unsigned long long)toks->arr.count);
    const ts_gguf_value *merges = ts_gguf_find(g, "tokenizer.ggml.merges");
    if (!merges)
        return ts_errf(err, errlen, "the file has no tokenizer.ggml.merges (needed by a 'gpt2' tokenizer)");
    if (merges->type != TS_GGUF_ARRAY || merges->arr.elem_type != TS_GGUF_STRING ||
        merges->arr.count > INT32_MAX / 2)
        return ts_errf(err, errlen, "tokenizer.ggml.merges must be an array of strings");

    ts_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return ts_errf(err, errlen, "out of memory loading the tokenizer");
    int32_t n = t->n = (int32_t)toks->arr.count;
    memcpy(t->pre, pre->ptr, pre->len);
    t->pre[pre->len] = 0;
    if (ts_pretok_new(t->pre, &t->pretok, err, errlen)) goto fail;
    uint64_t total = 0;
    for (int32_t i = 0; i < n; i++) total += toks->arr.items[i].str.len;
    t->text_arena = malloc(total + 1);
    t->bytes_arena = malloc(total + 1);
    t->text_off = malloc((size_t)(n + 1) * sizeof(uint64_t));
    t->bytes_off = malloc((size_t)(n + 1) * sizeof(uint64_t));
    t->type = malloc((size_t)n);
    t->eog = calloc((size_t)n, 1);
    uint64_t cap = pow2_at_least(2 * (uint64_t)n);
    t->by_text.slot = malloc(cap * sizeof(int32_t));
    t->by_text.hash = malloc(cap * sizeof(uint32_t));
    t->by_text.mask = cap - 1;
    if (!t->text_arena || !t->bytes_arena || !t->text_off || !t->bytes_off || !t->type || !t->eog ||
        !t->by_text.slot || !t->by_text.hash) {
        ts_errf(err, errlen, "out of memory loading a tokenizer of %d tokens", (int)n);
        goto fail;
    }
    memset(t->by_text.slot, 0xff, cap * sizeof(int32_t));
    uint64_t to = 0, bo = 0;
    for (int32_t i = 0; i < n; i++) {
        const ts_gguf_str *s = &toks->arr.items[i].str;
        int64_t ty = types ? ts_gguf_arr_i64(types, (uint64_t)i) : TS_TOKEN_NORMAL;
        if (ty < TS_TOKEN_UNDEFINED || ty > TS_TOKEN_BYTE) {
            ts_errf(err, errlen, "tokenizer.ggml.token_type[%d] is %lld, expected 0..6", (int)i,
                    (long long)ty);
            goto fail;
        }
        t->type[i] = (uint8_t)(ty == TS_TOKEN_UNDEFINED ? TS_TOKEN_NORMAL : ty);
        t->text_off[i] = to;
        memcpy(t->text_arena + to, s->ptr, s->len);
        t->bytes_off[i] = bo;
        switch (t->type[i]) {
        case TS_TOKEN_NORMAL:
        case TS_TOKEN_BYTE:
            bo += unmap_bytes(s->ptr, s->len, t->bytes_arena + bo);
            break;
        case TS_TOKEN_UNUSED:
            break;
        default:
            memcpy(t->bytes_arena + bo, s->ptr, s->len), bo += s->len;
        }
        to += s->len;
    }
    t->text_off[n] = to;
    t->bytes_off[n] = bo;
    for (int32_t i = 0; i < n; i++) map_put(t, i);

    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t l = ts_utf8_put(ts_byte_to_cp((uint8_t)b), u);
        t->byte_id[b] = map_get(t, u, l);
    }

    /* Merges: "left right" in the byte-level alphabet; rank = position in the list. */
    t->n_merges = (int64_t)merges->arr.count;
    uint64_t mcap = pow2_at_least(2 * (uint64_t)t->n_merges + 2);
    t->merges = calloc(mcap, sizeof(ts_merge_entry));
    t->merge_mask = mcap - 1;
    ts_text scratch = {0};
    if (!t->merges) {
        ts_errf(err, errlen, "out of memory for %lld merges", (long long)t->n_merges);
        goto fail;
    }
    for (int64_t r = 0; r < t->n_merges; r++) {
        const ts_gguf_str *m = &merges->arr.items[r].str;
        const char *sp = m->len > 1 ? memchr(m->ptr + 1, ' ', m->len - 1) : NULL;
        if (!sp) {
            ts_text_free(&scratch);
            ts_errf(err, errlen, "tokenizer.ggml.merges[%lld] '%.*s' is not two tokens separated by a space",
                    (long long)r, (int)(m->len > 40 ? 40 : m->len), m->ptr);
            goto fail;
        }
        size_t ll = (size_t)(sp - m->ptr), rl = m->len - ll - 1;
        int32_t a = map_get(t, m->ptr, ll), b = map_get(t, sp + 1, rl);
        scratch.n = 0;
        int32_t c = -1;
        if (ts_text_append(&scratch, m->ptr, ll) == 0 && ts_text_append(&scratch, sp + 1, rl) == 0)
            c = map_get(t, scratch.s, scratch.n);
        if (a < 0 || b < 0 || c < 0) {
            ts_text_free(&scratch);
            ts_errf(err, errlen,
                    "tokenizer.ggml.merges[%lld] '%.*s' names a token that is not in tokenizer.ggml.tokens",
                    (long long)r, (int)(m->len > 40 ? 40 : m->len), m->ptr);
            goto fail;
        }
        uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
        ts_merge_entry *e = merge_slot(t->merges, t->merge_mask, key);
        *e = (ts_merge_entry){key, (int32_t)r, c}; /* a repeated pair keeps its last rank, as HF's map does */
    }
    ts_text_free(&scratch);

    if (get_id(g, "tokenizer.ggml.bos_token_id", n, &t->bos, err, errlen) ||
        get_id(g, "tokenizer.ggml.eos_token_id", n, &t->eos, err, errlen) ||
        get_id(g, "tokenizer.ggml.padding_token_id", n, &t->pad, err, errlen) ||
        get_id(g, "tokenizer.ggml.eot_token_id", n, &t->eot, err, errlen) ||
        get_id(g, "tokenizer.ggml.eom_token_id", n, &t->eom, err, errlen))
        goto fail;
    const ts_gguf_value *ab = ts_gguf_find(g, "tokenizer.ggml.add_bos_token");
    t->add_bos = ab && ab->type == TS_GGUF_BOOL && ab->u64;
    if (tmpl) {
        t->chat_template = malloc(tmpl->len + 1);
        if (!t->chat_template) {
            ts_errf(err, errlen, "out of memory");
            goto fail;
        }
        memcpy(t->chat_template, tmpl->ptr, tmpl->len);
        t->chat_template[tmpl->len] = 0;
    }
    int32_t eogs[3] = {t->eos, t->eot, t->eom};
    for (int k = 0; k < 3; k++)
        if (eogs[k] >= 0) t->eog[eogs[k]] = 1;
    for (size_t k = 0; k < sizeof k_eog_texts / sizeof *k_eog_texts; k++) {
        int32_t id = map_get(t, k_eog_texts[k], strlen(k_eog_texts[k]));
        if (id >= 0 && t->type[id] != TS_TOKEN_NORMAL) t->eog[id] = 1;
    }

    /* Added tokens for atomic matching, bucketed by first byte, longest first. */
    size_t n_special = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if ((ty == TS_TOKEN_CONTROL || ty == TS_TOKEN_USER_DEFINED || ty == TS_TOKEN_UNKNOWN) &&
            t->text_off[i + 1] > t->text_off[i])
            n_special++;
    }
    t->special_ids = malloc((n_special ? n_special : 1) * sizeof(int32_t));
    if (!t->special_ids) {
        ts_errf(err, errlen, "out of memory");
        goto fail;
    }
    size_t k = 0;
    for (int32_t i = 0; i < n; i++) {
        uint8_t ty = t->type[i];
        if ((ty == TS_TOKEN_CONTROL || ty == TS_TOKEN_USER_DEFINED || ty == TS_TOKEN_UNKNOWN) &&
            t->text_off[i + 1] > t->text_off[i])
            t->special_ids[k++] = i;
    }
    qsort_r(t->special_ids, n_special, sizeof(int32_t), cmp_special, t);
    memset(t->special_start, 0, sizeof t->special_start);
    for (size_t j = 0; j < n_special; j++)
        t->special_start[(unsigned char)t->text_arena[t->text_off[t->special_ids[j]]] + 1]++;
    for (int b = 0; b < 256; b++) t->special_start[b + 1] += t->special_start[b];
    *out = t;
    return 0;
fail:
    ts_tokenizer_free(t);
    return -1;
}

int32_t ts_tokenizer_n_tokens(const ts_tokenizer *t) {
    return t->n;
}
const char *ts_tokenizer_pre(const ts_tokenizer *t) {
    return t->pre;
}
const char *ts_tokenizer_chat_template(const ts_tokenizer *t) {
    return t->chat_template;
}
int32_t ts_tokenizer_bos(const ts_tokenizer *t) {
    return t->bos;
}
int32_t ts_tokenizer_eos(const ts_tokenizer *t) {
    return t->eos;
}
int32_t ts_tokenizer_pad(const ts_tokenizer *t) {
    return t->pad;
}
bool ts_tokenizer_add_bos(const ts_tokenizer *t) {
    return t->add_bos;
}

int ts_tokenizer_token_type(const ts_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n ? t->type[id] : -1;
}

bool ts_tokenizer_is_eog(const ts_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n && t->eog[id];
}

const char *ts_tokenizer_token_text(const ts_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n) {
        *len = 0;
        return NULL;
    }
    return tok_text(t, id, len);
}

int32_t ts_tokenizer_find(const ts_tokenizer *t, const char *text) {
    return map_get(t, text, strlen(text));
}

const char *ts_token_bytes(const ts_tokenizer *t, int32_t id, bool special, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n) return NULL;
    uint8_t ty = t->type[id];
    if (!special && (ty == TS_TOKEN_CONTROL || ty == TS_TOKEN_UNKNOWN))
        return t->bytes_arena + t->bytes_off[id];
    *len = (size_t)(t->bytes_off[id + 1] - t->bytes_off[id]);
    return t->bytes_arena + t->bytes_off[id];
}
