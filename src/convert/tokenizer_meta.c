/* tokenizer.json → tokenizer.ggml.* (see tokenizer_meta.h). */
#include "convert/tokenizer_meta.h"

#include "common/error.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { TOK_NORMAL = 1, TOK_CONTROL = 3, TOK_USER_DEFINED = 4, TOK_UNUSED = 5 }; /* llama.cpp TokenType */

/* A whole file as a NUL-terminated string, or NULL (absent: *absent set; else err). */
static char *read_file(const char *path, size_t max, bool *absent, char *err, size_t errlen) {
    *absent = false;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno == ENOENT)
            *absent = true;
        else
            ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || sb.st_size < 0 || (uint64_t)sb.st_size > max) {
        fclose(f);
        ts_errf(err, errlen, "%s is not a regular file of at most %zu bytes", path, max);
        return NULL;
    }
    size_t n = (size_t)sb.st_size;
    char *buf = malloc(n + 1);
    if (!buf || fread(buf, 1, n, f) != n) {
        free(buf);
        fclose(f);
        ts_errf(err, errlen, buf ? "cannot read %s" : "out of memory reading %s", path);
        return NULL;
    }
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static cJSON *read_json(const char *dir, const char *name, size_t max, bool *absent, char *err,
                        size_t errlen) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *text = read_file(path, max, absent, err, errlen);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        ts_errf(err, errlen, "%s is not a JSON object", path);
    }
    return j;
}

/* A token given as "text" or {"content": "text"} in tokenizer_config.json. */
static const char *token_text(const cJSON *j) {
    if (cJSON_IsString(j)) return j->valuestring;
    const cJSON *c = cJSON_IsObject(j) ? cJSON_GetObjectItemCaseSensitive(j, "content") : NULL;
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

typedef struct vocab {
    uint32_t n;
    const char **text; /* [n]: into the parsed JSON, or pad (owned) */
    int32_t *type;     /* [n] */
    char **pads;       /* [n]: owned "[PAD<i>]" strings or NULL */
} vocab;

static int64_t find_id(const vocab *v, const char *text) {
    if (!text) return -1;
    for (uint32_t i = 0; i < v->n; i++)
        if (v->text[i] && strcmp(v->text[i], text) == 0) return i;
    return -1;
}

int ts_tokenizer_meta_write(const char *hf_dir, uint32_t n_vocab, ts_gguf_writer *w, bool *written, char *err,
                            size_t errlen) {
    *written = false;
    bool absent;
    cJSON *tok = read_json(hf_dir, "tokenizer.json", 1u << 30, &absent, err, errlen);
    if (!tok) return absent ? 0 : -1;
    cJSON *cfg = read_json(hf_dir, "tokenizer_config.json", 64u << 20, &absent, err, errlen);
    vocab v = {.n = n_vocab};
    char **merges = NULL;
    int rc = (!cfg && !absent) ? -1 : 0;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tok, "model");
    const cJSON *type = model ? cJSON_GetObjectItemCaseSensitive(model, "type") : NULL;
    const cJSON *vj = model ? cJSON_GetObjectItemCaseSensitive(model, "vocab") : NULL;
    const cJSON *mj = model ? cJSON_GetObjectItemCaseSensitive(model, "merges") : NULL;
    if (!rc && (!cJSON_IsString(type) || strcmp(type->valuestring, "BPE") != 0 || !cJSON_IsObject(vj) ||
                !cJSON_IsArray(mj)))
        rc = ts_errf(err, errlen,
                     "%s/tokenizer.json: expected a BPE model with a vocab object and a merges list "
                     "(qwen4exp uses byte-level BPE)",
                     hf_dir);
    v.text = calloc(n_vocab, sizeof *v.text);
    v.type = calloc(n_vocab, sizeof *v.type);
    v.pads = calloc(n_vocab, sizeof *v.pads);
    if (!rc && (!v.text || !v.type || !v.pads)) rc = ts_errf(err, errlen, "out of memory");
    for (const cJSON *e = vj ? vj->child : NULL; !rc && e; e = e->next) {
        double id = cJSON_IsNumber(e) ? e->valuedouble : -1;
        if (id < 0 || id != floor(id) || id >= n_vocab)
            rc = ts_errf(err, errlen,
                         "%s/tokenizer.json: token '%.40s' has id %.0f, outside the model's %" PRIu32
                         " embedding rows",
                         hf_dir, e->string, id, n_vocab);
        else
            v.text[(uint32_t)id] = e->string, v.type[(uint32_t)id] = TOK_NORMAL;
    }
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(tok, "added_tokens");
    for (const cJSON *a = cJSON_IsArray(added) ? added->child : NULL; !rc && a; a = a->next) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(a, "special");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content) || id->valuedouble < 0 ||
            id->valuedouble >= n_vocab || id->valuedouble != floor(id->valuedouble)) {
            rc = ts_errf(err, errlen, "%s/tokenizer.json: an added token has no valid id below %" PRIu32,
                         hf_dir, n_vocab);
            break;
        }
        uint32_t i = (uint32_t)id->valuedouble;
        v.text[i] = content->valuestring;
        v.type[i] = cJSON_IsTrue(special) ? TOK_CONTROL : TOK_USER_DEFINED;
    }
    for (uint32_t i = 0; !rc && i < n_vocab; i++) {
        if (v.text[i]) continue;
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%" PRIu32 "]", i);
        v.pads[i] = strdup(pad);
        if (!v.pads[i]) rc = ts_errf(err, errlen, "out of memory");
        v.text[i] = v.pads[i], v.type[i] = TOK_UNUSED;
    }
    int n_merges = mj ? cJSON_GetArraySize(mj) : 0;
    merges = rc ? NULL : calloc((size_t)n_merges + 1, sizeof *merges);
    if (!rc && !merges) rc = ts_errf(err, errlen, "out of memory");
    int k = 0;
    for (const cJSON *m = mj ? mj->child : NULL; !rc && m; m = m->next, k++) {
        const char *a = NULL, *b = NULL;
        if (cJSON_IsString(m)) {
            merges[k] = strdup(m->valuestring); /* already "a b" */
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            a = m->child->valuestring, b = m->child->next->valuestring;
            size_t n = strlen(a) + strlen(b) + 2;
            merges[k] = malloc(n);
            if (merges[k]) snprintf(merges[k], n, "%s %s", a, b);
        } else {
            rc = ts_errf(err, errlen, "%s/tokenizer.json: merge %d is neither \"a b\" nor [\"a\", \"b\"]",
                         hf_dir, k);
            break;
        }
        if (!merges[k]) rc = ts_errf(err, errlen, "out of memory");
    }
    if (!rc) {
        rc |= ts_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
        rc |= ts_gguf_writer_set_str(w, "tokenizer.ggml.pre", "qwen35");
        rc |= ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.text, n_vocab);
        rc |= ts_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", TS_GGUF_I32, v.type, n_vocab);
        rc |= ts_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges,
                                         (uint64_t)n_merges);
        int64_t eot = find_id(&v, "<|endoftext|>");
        int64_t eos = cfg ? find_id(&v, token_text(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token"))) : -1;
        int64_t pad = cfg ? find_id(&v, token_text(cJSON_GetObjectItemCaseSensitive(cfg, "pad_token"))) : -1;
        int64_t bos = cfg ? find_id(&v, token_text(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token"))) : -1;
        if (bos < 0) bos = eot;
        if (eos >= 0) rc |= ts_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)eos);
        if (bos >= 0) rc |= ts_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)bos);
        if (pad >= 0) rc |= ts_gguf_writer_set_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)pad);
        const cJSON *ab = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token") : NULL;
        rc |= ts_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", cJSON_IsTrue(ab));
        /* transformers 5 saves the template as chat_template.jinja; older ones inside tokenizer_config.json
         */
        char path[4096];
        snprintf(path, sizeof path, "%s/chat_template.jinja", hf_dir);
        bool no_file;
        char terr[256];
        char *tmpl = read_file(path, 16u << 20, &no_file, terr, sizeof terr);
        const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
        if (tmpl)
            rc |= ts_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl);
        else if (cJSON_IsString(ct))
            rc |= ts_gguf_writer_set_str(w, "tokenizer.chat_template", ct->valuestring);
        free(tmpl);
        if (rc)
            ts_errf(err, errlen, "%s", ts_gguf_writer_error(w));
        else
            *written = true;
    }
    for (int i = 0; merges && i < n_merges; i++) free(merges[i]);
    free(merges);
    for (uint32_t i = 0; v.pads && i < n_vocab; i++) free(v.pads[i]);
    free(v.pads), free(v.text), free(v.type);
    cJSON_Delete(cfg);
    cJSON_Delete(tok);
    return rc ? -1 : 0;
}
