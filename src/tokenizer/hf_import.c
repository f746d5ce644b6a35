/* Hugging Face tokenizer folder -> tokenizer.ggml.* keys, the way llama.cpp's converter writes them
 * (convert_hf_to_gguf.py: get_vocab_base + _set_vocab_gpt2; gguf-py: SpecialVocab). See
 * ts_tokenizer_write_gguf in tokenizer.h for the list of keys. Departures, all deliberate:
 * a post-processor's TemplateProcessing is not read for add_bos/add_eos (Qwen's is ByteLevel);
 * special ids outside the vocabulary are left out (the loader would refuse them); the
 * pre-tokenizer name comes from the Split regex itself rather than from llama.cpp's hash of a
 * tokenized test string. */
#include "tokenizer/internal.h"
#include "turbospark.h"

#include "common/error.h"
#include "common/json_check.h"
#include "gguf/gguf.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A whole file, NUL-terminated; NULL with *absent when it does not exist, else NULL with err. */
static char *slurp(const char *dir, const char *name, size_t max, bool *absent, char *err, size_t errlen) {
    char path[4096];
    *absent = false;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path) {
        ts_errf(err, errlen, "the folder path %.80s... is too long", dir);
        return NULL;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            *absent = true;
        else
            ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        fclose(f);
        ts_errf(err, errlen, "%s is not a regular file of at most %zu MiB", path, max >> 20);
        return NULL;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        ts_errf(err, errlen, buf ? "cannot read %s" : "out of memory reading %s", path);
        free(buf);
        fclose(f);
        return NULL;
    }
    fclose(f);
    buf[n] = 0;
    return buf;
}

static cJSON *load_json(const char *dir, const char *name, bool required, char *err, size_t errlen, int *rc) {
    bool absent;
    char *text = slurp(dir, name, (size_t)1 << 30, &absent, err, errlen);
    if (!text) {
        if (!absent || required) *rc = absent ? ts_errf(err, errlen, "%s has no %s", dir, name) : -1;
        return NULL;
    }
    char what[4200]; /* a token cut at \u0000 by cJSON would alias another: refused */
    snprintf(what, sizeof what, "%s/%s", dir, name);
    if (ts_json_check_text(what, text, strlen(text), "the tokenizer", err, errlen)) {
        free(text);
        *rc = -1;
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        *rc = ts_errf(err, errlen, "%s/%s is not a JSON object", dir, name);
        return NULL;
    }
    return j;
}

static const cJSON *get(const cJSON *o, const char *key) {
    return o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
}

static bool starts(const char *s, const char *p) {
    return strncmp(s, p, strlen(p)) == 0;
}
static bool ends(const char *s, const char *p) {
    size_t a = strlen(s), b = strlen(p);
    return a >= b && memcmp(s + a - b, p, b) == 0;
}

/* convert_hf_to_gguf.py does_token_look_special. */
static bool looks_special(const char *t) {
    return !strcmp(t, "<pad>") || !strcmp(t, "<mask>") || !strcmp(t, "<2mass>") || !strcmp(t, "[@BOS@]") ||
           (starts(t, "<|") && ends(t, "|>")) || (starts(t, "<\xef\xbd\x9c") && ends(t, "\xef\xbd\x9c>")) ||
           (starts(t, "<unused") && ends(t, ">"));
}

/* Replaces every occurrence of `from` by `to` (a fresh string). */
static char *replace_all(const char *s, const char *from, const char *to) {
    size_t fl = strlen(from), tl = strlen(to), n = 0;
    for (const char *p = s; (p = strstr(p, from)); p += fl) n++;
    char *out = malloc(strlen(s) + n * (tl > fl ? tl - fl : 0) + 1);
    if (!out) return NULL;
    char *o = out;
    for (const char *p = s;;) {
        const char *q = strstr(p, from);
        if (!q) {
            strcpy(o, p);
            break;
        }
        memcpy(o, p, (size_t)(q - p)), o += q - p;
        memcpy(o, to, tl), o += tl;
        p = q + fl;
    }
    return out;
}

/* The pre-tokenizer name of tokenizer.json's pre_tokenizer (a Split regex + ByteLevel). */
static int detect_pre(const cJSON *tok, const char *dir, const char **name, char *err, size_t errlen) {
    const cJSON *pt = get(tok, "pre_tokenizer");
    const cJSON *type = get(pt, "type");
    const char *pattern = NULL;
    bool byte_level = false;
    const cJSON *list =
        cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence") ? get(pt, "pretokenizers") : NULL;
    const cJSON *one = list ? list->child : pt;
    for (; one; one = list ? one->next : NULL) {
        const cJSON *ty = get(one, "type");
        if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "ByteLevel")) {
            byte_level = true;
            const cJSON *ur = get(one, "use_regex");
            if (cJSON_IsTrue(ur) && !pattern) pattern = "(the GPT-2 regex of ByteLevel)";
        } else if (cJSON_IsString(ty) && !strcmp(ty->valuestring, "Split")) {
            const cJSON *re = get(get(one, "pattern"), "Regex");
            pattern = cJSON_IsString(re) ? re->valuestring : "(a Split on a plain string)";
        }
        if (!list) break;
    }
    if (!byte_level)
        return ts_errf(err, errlen,
                       "%s/tokenizer.json: the pre-tokenizer is not byte-level (no ByteLevel step)", dir);
    const char *known[] = {"qwen35", "qwen2"};
    for (int i = 0; i < 2; i++)
        if (pattern && !strcmp(pattern, ts_pretok_pattern(known[i]))) {
            *name = known[i];
            return 0;
        }
    return ts_errf(
        err, errlen,
        "%s/tokenizer.json: the pre-tokenizer regex %.80s%s is not one turbospark knows (those of Qwen3.5 "
        "'qwen35' and Qwen2 'qwen2')",
        dir, pattern ? pattern : "(none)", pattern && strlen(pattern) > 80 ? "..." : "");
}

static const struct {
    const char *typ, *key;
} k_special[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", "tokenizer.ggml.cls_token_id"},
    {"mask", "tokenizer.ggml.mask_token_id"},
};

static const char *token_string(const cJSON *j) {
    if (cJSON_IsString(j)) return j->valuestring;
    const cJSON *c = cJSON_IsObject(j) ? get(j, "content") : NULL;
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int write_chat_templates(ts_gguf_writer *w, const cJSON *cfg, const char *dir, char *err,
                                size_t errlen) {
    const cJSON *ct = get(cfg, "chat_template");
    if (cJSON_IsString(ct)) return ts_gguf_writer_set_str(w, "tokenizer.chat_template", ct->valuestring);
    if (cJSON_IsArray(ct)) { /* [{name, template}]: "default" is the template, the others are named ones */
        const char *names[64];
        int n = 0, rc = 0;
        for (const cJSON *e = ct->child; e && !rc; e = e->next) {
            const cJSON *nm = get(e, "name"), *tp = get(e, "template");
            if (!cJSON_IsString(nm) || !cJSON_IsString(tp)) continue;
            if (!strcmp(nm->valuestring, "default"))
                rc = ts_gguf_writer_set_str(w, "tokenizer.chat_template", tp->valuestring);
            else {
                char key[256];
                snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm->valuestring);
                rc = ts_gguf_writer_set_str(w, key, tp->valuestring);
                if (n < 64) names[n++] = nm->valuestring;
            }
        }
        if (!rc && n) rc = ts_gguf_writer_set_arr_str(w, "tokenizer.chat_templates", names, (uint64_t)n);
        return rc;
    }
    bool absent;
    char *jinja = slurp(dir, "chat_template.jinja", (size_t)16 << 20, &absent, err, errlen);
    if (jinja) {
        int rc = ts_gguf_writer_set_str(w, "tokenizer.chat_template", jinja);
        free(jinja);
        return rc;
    }
    if (!absent) return -2;
    int jrc = 0;
    cJSON *j = load_json(dir, "chat_template.json", false, err, errlen, &jrc);
    if (jrc) return -2;
    const cJSON *t = get(j, "chat_template");
    int rc = cJSON_IsString(t) ? ts_gguf_writer_set_str(w, "tokenizer.chat_template", t->valuestring) : 0;
    cJSON_Delete(j);
    return rc;
}

int ts_tokenizer_write_gguf(ts_gguf_writer *w, const char *hf_dir, uint32_t n_vocab, char *err,
                            size_t errlen) {
    int rc = 0;
    cJSON *tok = load_json(hf_dir, "tokenizer.json", true, err, errlen, &rc);
    if (!tok) return -1;
    cJSON *cfg = load_json(hf_dir, "tokenizer_config.json", false, err, errlen, &rc);
    cJSON *mcfg = rc ? NULL : load_json(hf_dir, "config.json", false, err, errlen, &rc);
    const char **text = NULL;
    int32_t *type = NULL;
    char **owned = NULL, **merges = NULL;
    uint32_t n = 0;
    int n_merges = 0;
    const cJSON *model = get(tok, "model"), *vocab = get(model, "vocab"), *mj = get(model, "merges");
    const cJSON *mtype = get(model, "type"), *added = get(tok, "added_tokens");
    const char *pre = NULL;
    if (rc) goto done;
    if ((mtype && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))) || !cJSON_IsObject(vocab) ||
        !cJSON_IsArray(mj)) {
        rc = ts_errf(err, errlen,
                     "%s/tokenizer.json: expected a BPE model with a vocab object and a merges list", hf_dir);
        goto done;
    }
    const cJSON *norm = get(tok, "normalizer"), *nty = get(norm, "type");
    if (norm && !cJSON_IsNull(norm) && !(cJSON_IsString(nty) && !strcmp(nty->valuestring, "NFC"))) {
        rc = ts_errf(
            err, errlen,
            "%s/tokenizer.json: normalizer %s is not supported (turbospark applies NFC, as Qwen's does)",
            hf_dir, cJSON_IsString(nty) ? nty->valuestring : "?");
        goto done;
    }
    if ((rc = detect_pre(tok, hf_dir, &pre, err, errlen))) goto done;

    /* Size: the model's rows, or the largest id + 1. */
    double max_id = -1;
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble != floor(e->valuedouble) ||
            e->valuedouble > 1e9) {
            rc = ts_errf(err, errlen, "%s/tokenizer.json: vocab entry '%.40s' has no valid id", hf_dir,
                         e->string);
            goto done;
        }
        if (e->valuedouble > max_id) max_id = e->valuedouble;
    }
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next) {
        const cJSON *id = get(a, "id"), *content = get(a, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0 ||
            id->valuedouble != floor(id->valuedouble) || id->valuedouble > 1e9) {
            rc = ts_errf(err, errlen, "%s/tokenizer.json: an added token has no valid id or content", hf_dir);
            goto done;
        }
        if (id->valuedouble > max_id) max_id = id->valuedouble;
    }
    n = n_vocab ? n_vocab : (uint32_t)(max_id + 1);
    if (max_id >= (double)n) {
        rc = ts_errf(err, errlen,
                     "%s/tokenizer.json: token id %.0f does not fit the model's %u embedding rows", hf_dir,
                     max_id, n);
        goto done;
    }
    if (n == 0) {
        rc = ts_errf(err, errlen, "%s/tokenizer.json has no tokens", hf_dir);
        goto done;
    }
    text = calloc(n, sizeof *text);
    type = calloc(n, sizeof *type);
    owned = calloc(n, sizeof *owned);
    if (!text || !type || !owned) {
        rc = ts_errf(err, errlen, "out of memory for %u tokens", n);
        goto done;
    }
    for (const cJSON *e = vocab->child; e; e = e->next) {
        uint32_t id = (uint32_t)e->valuedouble;
        text[id] = e->string, type[id] = TS_TOKEN_NORMAL;
    }
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; a; a = a->next) {
        uint32_t id = (uint32_t)get(a, "id")->valuedouble;
        const char *c = get(a, "content")->valuestring;
        if (cJSON_IsTrue(get(a, "special")) || looks_special(c)) {
            text[id] = c, type[id] = TS_TOKEN_CONTROL;
        } else { /* llama.cpp pre-normalizes user-defined spaces: U+2581 -> ' ' */
            free(owned[id]);
            owned[id] = replace_all(c, "\xe2\x96\x81", " ");
            if (!owned[id]) {
                rc = ts_errf(err, errlen, "out of memory");
                goto done;
            }
            text[id] = owned[id], type[id] = TS_TOKEN_USER_DEFINED;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (text[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%u]", i);
        if (!(owned[i] = strdup(pad))) {
            rc = ts_errf(err, errlen, "out of memory");
            goto done;
        }
        text[i] = owned[i], type[i] = TS_TOKEN_UNUSED;
    }

    n_merges = cJSON_GetArraySize(mj);
    merges = calloc((size_t)n_merges + 1, sizeof *merges);
    if (!merges) {
        rc = ts_errf(err, errlen, "out of memory");
        goto done;
    }
    int k = 0;
    for (const cJSON *m = mj->child; m; m = m->next, k++) {
        if (cJSON_IsString(m))
            merges[k] = strdup(m->valuestring);
        else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) && cJSON_IsString(m->child->next)) {
            /* The pair form (transformers >= 4.45) may hold spaces: encoded as U+0120 like llama.cpp. */
            char *a = replace_all(m->child->valuestring, " ", "\xc4\xa0");
            char *b = replace_all(m->child->next->valuestring, " ", "\xc4\xa0");
            if (a && b && (merges[k] = malloc(strlen(a) + strlen(b) + 2))) sprintf(merges[k], "%s %s", a, b);
            free(a), free(b);
        } else {
            rc = ts_errf(err, errlen, "%s/tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]",
                         hf_dir, k);
            goto done;
        }
        if (!merges[k]) {
            rc = ts_errf(err, errlen, "out of memory");
            goto done;
        }
    }

    rc |= ts_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    rc |= ts_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    rc |= ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", text, n);
    rc |= ts_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TS_GGUF_I32, type, n);
    rc |= ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges,
                                     (uint64_t)n_merges);

    /* Special ids: tokenizer_config.json's <type>_token among the added tokens, then config.json. */
    int64_t ids[7];
    const char *want[7];
    for (int i = 0; i < 7; i++) {
        ids[i] = -1;
        char key[32];
        snprintf(key, sizeof key, "%s_token", k_special[i].typ);
        want[i] = token_string(get(cfg, key));
    }
    if (!want[0] && want[5]) want[0] = want[5]; /* no bos: cls; no eos: sep */
    if (!want[1] && want[3]) want[1] = want[3];
    for (int i = 0; i < 7; i++)
        for (const cJSON *a = cJSON_IsArray(added) && want[i] ? added->child : NULL; a; a = a->next)
            if (!strcmp(get(a, "content")->valuestring, want[i])) {
                ids[i] = (int64_t)get(a, "id")->valuedouble;
                break;
            }
    for (int i = 0; i < 7; i++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", k_special[i].typ);
        const cJSON *v = get(mcfg, key);
        if (ids[i] < 0 && cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble == floor(v->valuedouble))
            ids[i] = (int64_t)v->valuedouble;
        if (ids[i] >= 0 && ids[i] < (int64_t)n)
            rc |= ts_gguf_writer_set_u32(w, k_special[i].key, (uint32_t)ids[i]);
    }
    static const char *const add_types[] = {"bos", "eos", "sep"};
    for (int i = 0; i < 3; i++) {
        char key[48];
        snprintf(key, sizeof key, "add_%s_token", add_types[i]);
        const cJSON *v = get(cfg, key);
        if (cJSON_IsBool(v)) {
            snprintf(key, sizeof key, "tokenizer.ggml.add_%s_token", add_types[i]);
            rc |= ts_gguf_writer_set_bool(w, key, cJSON_IsTrue(v));
        }
    }
    if (rc) {
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        goto done;
    }
    int t = write_chat_templates(w, cfg, hf_dir, err, errlen);
    if (t == -2)
        rc = -1; /* err already says which file */
    else if (t)
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
done:
    for (uint32_t i = 0; owned && i < n; i++) free(owned[i]);
    for (int i = 0; merges && i < n_merges; i++) free(merges[i]);
    free(owned), free(merges), free(text), free(type);
    cJSON_Delete(mcfg);
    cJSON_Delete(cfg);
    cJSON_Delete(tok);
    return rc ? -1 : 0;
}

int ts_tokenizer_load_hf(const char *hf_dir, ts_tokenizer **out, char *err, size_t errlen) {
    *out = NULL;
    ts_gguf_writer *w = ts_gguf_writer_new(TS_GGUF_DEFAULT_ALIGNMENT, err, errlen);
    if (!w) return -1;
    void *data = NULL;
    size_t size = 0;
    int rc = ts_tokenizer_write_gguf(w, hf_dir, 0, err, errlen);
    if (!rc && ts_gguf_writer_to_buffer(w, &data, &size))
        rc = ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
    ts_gguf_writer_free(w);
    ts_gguf *g = NULL;
    if (!rc) rc = ts_gguf_open_buffer(data, size, hf_dir, &g, err, errlen);
    if (!rc) rc = ts_tokenizer_load(g, out, err, errlen); /* copies what it needs */
    ts_gguf_close(g);
    free(data);
    return rc ? -1 : 0;
}
