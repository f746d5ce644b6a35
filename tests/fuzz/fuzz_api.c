/* Fuzz harness of the server's request -> job conversion (src/server/openai.c): a body in, a parsed
 * request or an error out. The first byte picks the endpoint (even: chat, odd: completions) and is
 * the low byte of the JSON value limit (so the count check is reached both ways); the rest is the
 * body. Promises checked (abort when broken):
 *   - a refusal has a status of 400 or 413 (500 only for out of memory) and its error body is valid
 *     UTF-8 JSON text of the documented shape, whatever bytes the body echoed;
 *   - an accepted request is consistent: chat has 1+ messages with a role and content, a completion
 *     has a prompt (text or ids), at most 16 stop strings of valid UTF-8, and sampling values the
 *     sampler accepts as they are (ts_sampler_check);
 *   - no string is cut short by \u0000 (cJSON ends its C strings there): a chat request whose body
 *     holds the escape is refused; a completion's text prompt is valid UTF-8, agrees with cJSON's
 *     string up to its first NUL and holds a NUL only when the body has the escape; the same body
 *     as /tokenize's {"content"} likewise;
 *   - the string check (ts_json_check) on the body itself: when it finds nothing and cJSON
 *     parses the body, the body holds no \u0000 and every string and key of the tree is valid UTF-8;
 *   - ts_api_clip never cuts a character and stays within its buffer;
 *   - a slot action's file name (the same body read as {"filename"}) is accepted only when it is a
 *     plain name: valid UTF-8, no path separator, no "..".
 * libFuzzer: fuzz_api (tests/fuzz/CMakeLists.txt, scripts/fuzz.sh api). Without it, api_replay runs
 * every file of tests/fuzz/corpus_api through the same body (a test of the default suite, under
 * ASan + UBSan in the sanitizer build). */
#include "common/json_check.h"
#include "engine/sampler.h"
#include "server/openai.h"
#include "tokenizer/tokenizer.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(c)                                                                                             \
    do {                                                                                                     \
        if (!(c)) {                                                                                          \
            fprintf(stderr, "fuzz_api: broken promise: %s (line %d)\n", #c, __LINE__);                       \
            abort();                                                                                         \
        }                                                                                                    \
    } while (0)

static bool valid_utf8(const char *s, size_t n) {
    ts_text t = {0};
    long bad = ts_utf8_sanitize(s, n, &t);
    ts_text_free(&t);
    return bad == 0;
}

/* Whether the text holds the escape \u0000 (an odd run of backslashes before "u0000"). */
static bool has_nul_escape(const char *s, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (s[i] != '\\') continue;
        if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return true;
        i++; /* the escaped character */
    }
    return false;
}

/* A text the request carries with its length (a NUL allowed) against cJSON's reading of the field
 * (obj.key, or obj.key[0] when that is an array): the same up to the first NUL, valid UTF-8,
 * NUL-terminated, and a NUL only when the body holds \u0000. */
static void check_carried(const char *body, size_t n, const char *key, const char *s, size_t len) {
    cJSON *j = cJSON_ParseWithLength(body, n), *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (cJSON_IsArray(v)) v = v->child;
    CHECK(cJSON_IsString(v) && strcmp(v->valuestring, s) == 0);
    CHECK(s[len] == 0 && len >= strlen(s) && valid_utf8(s, len));
    if (len > strlen(s)) CHECK(has_nul_escape(body, n));
    cJSON_Delete(j);
}

/* Every string and key of a tree is valid UTF-8. */
static bool tree_utf8(const cJSON *v) {
    for (; v; v = v->next) {
        if (v->string && !valid_utf8(v->string, strlen(v->string))) return false;
        if (cJSON_IsString(v) && !valid_utf8(v->valuestring, strlen(v->valuestring))) return false;
        if (v->child && !tree_utf8(v->child)) return false;
    }
    return true;
}

int ts_fuzz_api_one(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    ts_api_kind kind = data[0] & 1 ? TS_API_COMPLETION : TS_API_CHAT;
    size_t max_values = 64 + data[0];
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    ts_sampler_params def = ts_sampler_default_params();
    ts_api_request r;
    ts_api_error e;
    char err[256];
    ts_json_issue is;
    if (!ts_json_check(body, n, NULL, 0, &is)) {
        const char *end = NULL; /* one value and nothing after it, as the server parses */
        cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, false);
        while (j && end < body + n && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
        if (j && end == body + n) CHECK(!has_nul_escape(body, n) && tree_utf8(j));
        cJSON_Delete(j);
    } else {
        CHECK(is.kind != TS_JSON_OK && strlen(is.path) < sizeof is.path && is.at < n);
    }
    if (ts_api_parse(kind, body, n, &def, max_values, &r, &e)) {
        CHECK(e.status == 400 || e.status == 413 || e.status == 500);
        ts_text out = {0};
        CHECK(ts_api_error_json(&e, &out) == 0);
        CHECK(valid_utf8(out.s, out.n));
        cJSON *j = cJSON_ParseWithLength(out.s, out.n);
        CHECK(j && cJSON_IsString(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "error"), "message")));
        cJSON_Delete(j);
        ts_text_free(&out);
    } else {
        if (kind == TS_API_CHAT) {
            CHECK(r.n_msgs >= 1);
            CHECK(!has_nul_escape(body, n)); /* no field of a chat request carries a NUL */
            CHECK(valid_utf8(r.messages_json, strlen(r.messages_json)));
            cJSON *ms = cJSON_Parse(r.messages_json); /* what ts_chat_apply reads */
            CHECK(cJSON_IsArray(ms) && (size_t)cJSON_GetArraySize(ms) == r.n_msgs);
            const cJSON *m;
            cJSON_ArrayForEach(m, ms) CHECK(cJSON_IsString(cJSON_GetObjectItem(m, "role")) &&
                                            cJSON_IsString(cJSON_GetObjectItem(m, "content")));
            cJSON_Delete(ms);
        } else {
            CHECK(r.prompt_is_ids ? r.prompt_ids.n >= 1 : r.prompt != NULL);
            if (!r.prompt_is_ids) check_carried(body, n, "prompt", r.prompt, r.prompt_len);
        }
        CHECK(r.n_stops >= 0 && r.n_stops <= TS_API_MAX_STOPS);
        for (int i = 0; i < r.n_stops; i++) CHECK(valid_utf8(r.stops[i], strlen(r.stops[i])));
        CHECK(ts_sampler_check(&r.sp, err, sizeof err) == 0);
        ts_api_request_free(&r);
    }
    ts_api_tokenize t; /* the same body as /tokenize's {"content"} */
    if (ts_api_parse_tokenize(body, n, max_values, &t, &e)) {
        CHECK(!t.content && (e.status == 400 || e.status == 413 || e.status == 500));
    } else {
        check_carried(body, n, "content", t.content, t.n_content);
        free(t.content);
    }
    char *name = NULL; /* the same body as a slot action's {"filename"} */
    if (ts_api_parse_slot_file(body, n, max_values, &name, &e)) {
        CHECK(!name && (e.status == 400 || e.status == 413 || e.status == 500));
    } else {
        CHECK(name && !strchr(name, '/') && !strchr(name, '\\') && !strstr(name, "..") && strcmp(name, "."));
        CHECK(ts_api_filename_problem(name, strlen(name)) == NULL && valid_utf8(name, strlen(name)));
        free(name);
    }
    char clip[40], s[64];
    size_t k = n < sizeof s - 1 ? n : sizeof s - 1;
    memcpy(s, body, k), s[k] = 0;
    ts_api_clip(s, data[0] % 40, clip, sizeof clip);
    CHECK(strlen(clip) < sizeof clip);
    if (valid_utf8(s, strlen(s))) CHECK(valid_utf8(clip, strlen(clip)));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    return ts_fuzz_api_one(data, size);
}

#ifndef TS_LIBFUZZER
/* api_replay DIR...: every file of each directory through the harness. */
int main(int argc, char **argv) {
    int files = 0;
    for (int a = 1; a < argc; a++) {
        DIR *d = opendir(argv[a]);
        if (!d) return fprintf(stderr, "api_replay: cannot open %s\n", argv[a]), 1;
        for (struct dirent *de; (de = readdir(d));) {
            if (de->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], de->d_name);
            FILE *f = fopen(path, "rb");
            if (!f) continue;
            uint8_t *buf = malloc(1 << 20);
            size_t size = buf ? fread(buf, 1, 1 << 20, f) : 0;
            fclose(f);
            uint8_t *exact = malloc(size ? size : 1); /* exactly its size: ASan sees a read past it */
            if (exact) memcpy(exact, buf, size);
            free(buf);
            if (exact) ts_fuzz_api_one(exact, size), files++;
            free(exact);
        }
        closedir(d);
    }
    printf("api_replay: %d inputs kept every promise\n", files);
    return files > 0 ? 0 : 1;
}
#endif
