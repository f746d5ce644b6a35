/* OpenAI request parsing and response writing (see openai.h). */
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The length of s[0..n) without a UTF-8 sequence cut at its end. */
static size_t utf8_whole(const char *s, size_t n) {
    size_t i = n, k = 0;
    while (i > 0 && k < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) i--, k++; /* continuation bytes */
    if (i == 0) return n;
    unsigned char c = (unsigned char)s[i - 1];
    size_t want = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return want > k + 1 ? i - 1 : n; /* a lead byte with too few continuations: drop it and them */
}

const char *ts_api_clip(const char *s, size_t max, char *buf, size_t buflen) {
    size_t n = strlen(s);
    if (max + 4 > buflen) max = buflen > 4 ? buflen - 4 : 0;
    bool cut = n > max;
    if (cut) n = utf8_whole(s, max);
    memcpy(buf, s, n);
    if (cut) memcpy(buf + n, "...", 3), n += 3;
    buf[n] = 0;
    return buf;
}

int ts_api_fail(ts_api_error *e, int status, const char *type, const char *code, const char *param,
                const char *fmt, ...) {
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    e->param[utf8_whole(e->param, strlen(e->param))] = 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof e->message) /* cut: never in the middle of a character */
        e->message[utf8_whole(e->message, sizeof e->message - 1)] = 0;
    return -1;
}

#define BAD(e, code, param, ...) ts_api_fail(e, 400, "invalid_request_error", code, param, __VA_ARGS__)

/* ---- JSON helpers --------------------------------------------------------------------------- */

/* The member, or NULL when absent or null. */
static const cJSON *member(const cJSON *o, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *type_name(const cJSON *v) {
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

static int want_number(const cJSON *v, const char *name, double lo, double hi, double *out, ts_api_error *e) {
    if (!cJSON_IsNumber(v))
        return BAD(e, "invalid_type", name, "'%s' must be a number, not %s", name, type_name(v));
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi))
        return BAD(e, "invalid_value", name, "'%s' must be between %g and %g (got %g)", name, lo, hi, x);
    *out = x;
    return 0;
}

static int want_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out, ts_api_error *e) {
    if (!cJSON_IsNumber(v))
        return BAD(e, "invalid_type", name, "'%s' must be an integer, not %s", name, type_name(v));
    double x = v->valuedouble;
    if (!(x >= lo && x <= hi))
        return BAD(e, "invalid_value", name, "'%s' must be between %.0f and %.0f (got %g)", name, lo, hi, x);
    if (x != floor(x))
        return BAD(e, "invalid_type", name, "'%s' must be an integer, not a fraction (%g)", name, x);
    *out = x > -9.2e18 && x < 9.2e18 ? (int64_t)x : 0; /* larger ones: the caller reads valuedouble */
    return 0;
}

static int want_bool(const cJSON *v, const char *name, bool *out, ts_api_error *e) {
    if (!cJSON_IsBool(v))
        return BAD(e, "invalid_type", name, "'%s' must be true or false, not %s", name, type_name(v));
    *out = cJSON_IsTrue(v);
    return 0;
}

static int own(ts_api_request *r, char *s) {
    char **o = realloc(r->owned, (r->n_owned + 1) * sizeof *o);
    if (!o) return -1;
    r->owned = o;
    r->owned[r->n_owned++] = s;
    return 0;
}

static char *own_copy(ts_api_request *r, const char *s, size_t n) {
    char *c = malloc(n + 1);
    if (!c) return NULL;
    memcpy(c, s, n);
    c[n] = 0;
    if (own(r, c)) {
        free(c);
        return NULL;
    }
    return c;
}

static bool valid_utf8(const char *s, size_t n) {
    ts_text t = {0};
    long bad = ts_utf8_sanitize(s, n, &t);
    ts_text_free(&t);
    return bad == 0;
}

/* Every string of a body, keys included, checked before cJSON reads it (ts_json_check in
 * turbospark.h): a NUL (\u0000) is refused by the field's name unless `carry` lists the field (a
 * text taken with its length), and so are lone surrogate escapes and invalid UTF-8; a \u escape
 * without four hex digits (cJSON would read it as \u0000) or that JSON does not have is not JSON. */
static int check_strings(const char *body, size_t n, ts_json_carry *carry, int n_carry, ts_api_error *e) {
    ts_json_issue is;
    if (!ts_json_check(body, n, carry, n_carry, &is)) return 0;
    char msg[sizeof e->message];
    ts_json_issue_text(&is, "this server", msg, sizeof msg);
    if (is.kind == TS_JSON_BAD_ESCAPE)
        return BAD(e, "invalid_json", NULL, "the request body is not valid JSON: %s", msg);
    return BAD(e, "invalid_value", is.path[0] ? is.path : NULL, "%s", msg);
}

/* The text of the string v that the check carried (c: a NUL allowed), NUL bytes included, as a
 * copy in *out (a malloc'd, NUL-terminated buffer) with its length. 0, −1 with e, −2 out of memory. */
static int carried_text(const cJSON *v, const ts_json_carry *c, char **out, size_t *n, ts_api_error *e) {
    ts_text t = {0};
    if (!c || !c->tok || !c->nul) { /* no NUL: cJSON's string is the whole text */
        if (ts_text_append(&t, v->valuestring, strlen(v->valuestring))) return -2;
    } else {
        if (ts_json_decode(c->tok, c->n, &t)) return ts_text_free(&t), -2;
        if (strcmp(t.s, v->valuestring) != 0) { /* not the string cJSON read: never guess */
            ts_text_free(&t);
            return BAD(e, "invalid_value", c->path,
                       "'%s' contains a NUL character (\\u0000), which this server cannot carry here",
                       c->path);
        }
    }
    *out = t.s, *n = t.n;
    return 0;
}

/* ---- fields refused by name ----------------------------------------------------------------- */

static int refuse_unsupported(const cJSON *o, ts_api_kind kind, ts_api_error *e) {
    const cJSON *v;
    int64_t k;
    if ((v = member(o, "best_of"))) {
        if (want_int(v, "best_of", 1, 1e9, &k, e)) return -1;
        if (k != 1) return BAD(e, "unsupported_parameter", "best_of", "best_of > 1 is not supported");
    }
    if ((v = member(o, "functions")) && !(cJSON_IsArray(v) && cJSON_GetArraySize(v) == 0))
        return BAD(e, "unsupported_parameter", "functions",
                   "the legacy 'functions' are not supported: send them as 'tools'");
    if ((v = member(o, "function_call")) &&
        !(cJSON_IsString(v) && (!strcmp(v->valuestring, "none") || !strcmp(v->valuestring, "auto"))))
        return BAD(e, "unsupported_parameter", "function_call",
                   "the legacy 'function_call' is not supported: use 'tool_choice'");
    if ((v = member(o, "logit_bias")) && !(cJSON_IsObject(v) && !v->child))
        return BAD(e, "unsupported_parameter", "logit_bias", "logit_bias is not supported by this server");
    if ((v = member(o, "echo")) && !cJSON_IsFalse(v))
        return BAD(e, "unsupported_parameter", "echo", "echo is not supported by this server");
    if ((v = member(o, "suffix")) && !(cJSON_IsString(v) && !*v->valuestring))
        return BAD(e, "unsupported_parameter", "suffix",
                   "suffix (insertion) is not supported by this server");
    if ((v = member(o, "audio")))
        return BAD(e, "unsupported_parameter", "audio",
                   "audio output is not supported: this server loads the text model only");
    if ((v = member(o, "modalities"))) {
        if (!cJSON_IsArray(v))
            return BAD(e, "invalid_type", "modalities", "'modalities' must be an array of strings");
        const cJSON *m;
        cJSON_ArrayForEach(m, v) if (!cJSON_IsString(m) || strcmp(m->valuestring, "text") != 0) return BAD(
            e, "unsupported_parameter", "modalities",
            "only the text modality is supported: this server loads the text model only");
    }
    if ((v = member(o, "prediction")))
        return BAD(e, "unsupported_parameter", "prediction",
                   "predicted outputs are not supported by this server");
    if (kind == TS_API_COMPLETION && ((v = member(o, "tools")) || (v = member(o, "response_format"))))
        return BAD(e, "unsupported_parameter", v->string,
                   "'%s' is a chat completions field: use POST /v1/chat/completions", v->string);
    return 0;
}

/* llama-server's constrained decoding fields, on both endpoints: grammar (GBNF text) and a
 * top-level json_schema (an object). */
static int parse_llama_constraints(const cJSON *o, ts_api_request *r, ts_api_error *e) {
    const cJSON *gr = member(o, "grammar"), *js = member(o, "json_schema");
    if (gr && !cJSON_IsString(gr))
        return BAD(e, "invalid_type", "grammar", "'grammar' must be a string of GBNF rules, not %s",
                   type_name(gr));
    if (gr && !*gr->valuestring) gr = NULL; /* llama-server sends "" for none */
    if (js && !cJSON_IsObject(js))
        return BAD(e, "invalid_type", "json_schema", "'json_schema' must be a JSON schema object, not %s",
                   type_name(js));
    if ((gr || js) && (r->format || r->tool_choice >= TS_TOOLS_REQUIRED || (gr && js)))
        return BAD(e, "invalid_value", gr ? "grammar" : "json_schema",
                   "only one of grammar, json_schema, response_format and a required tool call may constrain "
                   "the answer");
    if (gr && !(r->grammar = own_copy(r, gr->valuestring, strlen(gr->valuestring)))) return -2;
    if (js) {
        char *j = cJSON_PrintUnformatted(js);
        if (!j || own(r, j)) return free(j), -2;
        r->format = TS_FORMAT_JSON_SCHEMA, r->schema_json = j;
    }
    return 0;
}

/* ---- sampling and common fields ------------------------------------------------------------- */

static int parse_common(const cJSON *o, ts_api_request *r, ts_api_error *e) {
    const cJSON *v;
    double d = 0;
    int64_t k;
    if ((v = member(o, "model"))) {
        if (!cJSON_IsString(v))
            return BAD(e, "invalid_type", "model", "'model' must be a string, not %s", type_name(v));
        if (!(r->model = own_copy(r, v->valuestring, strlen(v->valuestring)))) return -2;
    }
    const cJSON *mt = member(o, "max_completion_tokens");
    if (!mt) mt = member(o, "max_tokens");
    if (mt) {
        if (want_int(mt, mt->string, -1, 1e12, &k, e)) return -1;
        if (k != -1 && k < 1) /* −1: llama.cpp's "no limit", the rest of the context */
            return BAD(e, "invalid_value", mt->string, "'%s' must be at least 1 (got %lld)", mt->string,
                       (long long)k);
        r->max_tokens = k;
    }
    if ((v = member(o, "temperature"))) {
        if (want_number(v, "temperature", 0, 2, &d, e)) return -1;
        r->sp.temperature = (float)d, r->sp_given[TS_SAMPLING_TEMP] = true;
    }
    if ((v = member(o, "top_p"))) {
        if (want_number(v, "top_p", 0, 1, &d, e)) return -1;
        r->sp.top_p = (float)d, r->sp_given[TS_SAMPLING_TOP_P] = true;
    }
    if ((v = member(o, "top_k"))) {
        if (want_int(v, "top_k", -1, 1e9, &k, e)) return -1;
        r->sp.top_k = k < 0 ? 0 : (int32_t)k,
        r->sp_given[TS_SAMPLING_TOP_K] = true; /* −1 (vLLM) and 0: off */
    }
    if ((v = member(o, "min_p"))) {
        if (want_number(v, "min_p", 0, 1, &d, e)) return -1;
        r->sp.min_p = (float)d, r->sp_given[TS_SAMPLING_MIN_P] = true;
    }
    if ((v = member(o, "presence_penalty"))) {
        if (want_number(v, "presence_penalty", -2, 2, &d, e)) return -1;
        r->sp.presence_penalty = (float)d;
    }
    if ((v = member(o, "frequency_penalty"))) {
        if (want_number(v, "frequency_penalty", -2, 2, &d, e)) return -1;
        r->sp.frequency_penalty = (float)d;
    }
    const cJSON *rp = member(o, "repetition_penalty");
    if (!rp) rp = member(o, "repeat_penalty");
    if (rp) {
        if (want_number(rp, rp->string, 1e-6, 100, &d, e)) return -1;
        r->sp.repeat_penalty = (float)d;
    }
    if ((v = member(o, "repeat_last_n"))) {
        if (want_int(v, "repeat_last_n", -1, 4096, &k, e)) return -1;
        r->sp.penalty_last_n = (int32_t)k;
    }
    if ((v = member(o, "seed"))) {
        if (want_int(v, "seed", -9223372036854775808.0,
                     18446744073709549568.0 /* the largest double below 2^64 */, &k, e))
            return -1;
        r->sp.seed = v->valuedouble < 0 ? (uint64_t)(int64_t)v->valuedouble : (uint64_t)v->valuedouble;
        r->seed_given = true;
    }
    if ((v = member(o, "stop"))) {
        const cJSON *item;
        int i = 0;
        if (cJSON_IsString(v))
            item = v;
        else if (cJSON_IsArray(v))
            item = v->child;
        else
            return BAD(e, "invalid_type", "stop", "'stop' must be a string or an array of strings, not %s",
                       type_name(v));
        if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > TS_API_MAX_STOPS)
            return BAD(e, "invalid_value", "stop", "'stop' holds at most %d strings (got %d)",
                       TS_API_MAX_STOPS, cJSON_GetArraySize(v));
        for (; item; item = cJSON_IsArray(v) ? item->next : NULL, i++) {
            char pname[32];
            snprintf(pname, sizeof pname, cJSON_IsArray(v) ? "stop[%d]" : "stop", i);
            if (!cJSON_IsString(item))
                return BAD(e, "invalid_type", pname, "'%s' must be a string, not %s", pname, type_name(item));
            size_t L = strlen(item->valuestring);
            if (L == 0) continue; /* an empty stop string never stops anything */
            if (L > TS_API_MAX_STOP_BYTES)
                return BAD(e, "invalid_value", pname, "'%s' is %zu bytes long; at most %d", pname, L,
                           TS_API_MAX_STOP_BYTES);
            if (!valid_utf8(item->valuestring, L))
                return BAD(e, "invalid_value", pname, "'%s' is not valid UTF-8", pname);
            if (!(r->stops[r->n_stops++] = own_copy(r, item->valuestring, L))) return -2;
            if (!cJSON_IsArray(v)) break;
        }
    }
    if ((v = member(o, "stream")) && want_bool(v, "stream", &r->stream, e)) return -1;
    if ((v = member(o, "stream_options"))) {
        if (!cJSON_IsObject(v))
            return BAD(e, "invalid_type", "stream_options", "'stream_options' must be an object, not %s",
                       type_name(v));
        const cJSON *u = member(v, "include_usage");
        if (u && want_bool(u, "stream_options.include_usage", &r->include_usage, e)) return -1;
    }
    if ((v = member(o, "ignore_eos")) && want_bool(v, "ignore_eos", &r->ignore_eos, e)) return -1;
    if ((v = member(o, "cache_prompt")) && want_bool(v, "cache_prompt", &r->cache_prompt, e)) return -1;
    return 0;
}

/* ---- chat messages -------------------------------------------------------------------------- */

/* The text of a message's content: a string, or text parts joined by newlines. */
static int content_text(const cJSON *c, const char *where, ts_api_request *r, const char **out,
                        ts_api_error *e) {
    char pname[96], clip[80];
    if (!c) {
        *out = "";
        return 0;
    }
    if (cJSON_IsString(c)) {
        *out = c->valuestring;
        return 0;
    }
    snprintf(pname, sizeof pname, "%s.content", where);
    if (!cJSON_IsArray(c))
        return BAD(e, "invalid_type", pname, "'%s' must be a string or an array of content parts, not %s",
                   pname, type_name(c));
    ts_text t = {0};
    int i = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, c) {
        snprintf(pname, sizeof pname, "%s.content[%d]", where, i);
        const cJSON *ty = cJSON_IsObject(p) ? member(p, "type") : NULL;
        if (!ty || !cJSON_IsString(ty)) {
            ts_text_free(&t);
            return BAD(e, "invalid_type", pname, "'%s' must be an object with a string 'type'", pname);
        }
        const char *k = ty->valuestring;
        const char *what =
            !strcmp(k, "image_url") || !strcmp(k, "image") || !strcmp(k, "input_image")   ? "image"
            : !strcmp(k, "input_audio") || !strcmp(k, "audio")                            ? "audio"
            : !strcmp(k, "video_url") || !strcmp(k, "video") || !strcmp(k, "input_video") ? "video"
            : !strcmp(k, "file") || !strcmp(k, "input_file")                              ? "file"
                                                                                          : NULL;
        if (what) {
            ts_text_free(&t);
            snprintf(pname + strlen(pname), sizeof pname - strlen(pname), ".type");
            return ts_api_fail(
                e, 400, "invalid_request_error", "unsupported_content_type", pname,
                "%s content parts are not supported: this server loads the text model only (%s is '%s')",
                what, pname, ts_api_clip(k, 32, clip, sizeof clip));
        }
        if (strcmp(k, "text") != 0) {
            ts_text_free(&t);
            return BAD(e, "invalid_value", pname,
                       "'%s' has an unknown content part type '%s' (expected 'text')", pname,
                       ts_api_clip(k, 64, clip, sizeof clip));
        }
        const cJSON *tx = member(p, "text");
        if (!tx || !cJSON_IsString(tx)) {
            ts_text_free(&t);
            return BAD(e, "invalid_type", pname, "'%s.text' must be a string", pname);
        }
        if ((i > 0 && ts_text_append(&t, "\n", 1)) ||
            ts_text_append(&t, tx->valuestring, strlen(tx->valuestring))) {
            ts_text_free(&t);
            return -2;
        }
        i++;
    }
    if (ts_text_append(&t, "", 1) || own(r, t.s)) {
        ts_text_free(&t);
        return -2;
    }
    *out = t.s;
    return 0;
}

/* ---- tools and structured output ------------------------------------------------------------ */

static bool valid_fn_name(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > 64) return false;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
              *s == '-' || *s == '.'))
            return false;
    return true;
}

static int parse_tools(const cJSON *o, ts_api_request *r, ts_api_error *e) {
    const cJSON *ts = member(o, "tools"), *t, *v;
    char pname[64];
    r->parallel_tool_calls = true;
    if (ts) {
        if (!cJSON_IsArray(ts))
            return BAD(e, "invalid_type", "tools", "'tools' must be an array, not %s", type_name(ts));
        int i = 0, n = cJSON_GetArraySize(ts);
        if (n > 128) return BAD(e, "invalid_value", "tools", "'tools' holds at most 128 tools (got %d)", n);
        cJSON_ArrayForEach(t, ts) {
            snprintf(pname, sizeof pname, "tools[%d]", i);
            const cJSON *ty = cJSON_IsObject(t) ? member(t, "type") : NULL;
            const cJSON *f = cJSON_IsObject(t) ? member(t, "function") : NULL;
            if (!ty || !cJSON_IsString(ty) || strcmp(ty->valuestring, "function") != 0 || !f ||
                !cJSON_IsObject(f))
                return BAD(e, "invalid_value", pname,
                           "'%s' must be {\"type\": \"function\", \"function\": {\"name\", \"parameters\"}}",
                           pname);
            const cJSON *nm = member(f, "name");
            if (!nm || !cJSON_IsString(nm) || !valid_fn_name(nm->valuestring))
                return BAD(e, "invalid_value", pname,
                           "'%s.function.name' must be 1 to 64 letters, digits, '_', '-' or '.'", pname);
            for (const cJSON *u = ts->child; u != t; u = u->next)
                if (!strcmp(member(member(u, "function"), "name")->valuestring, nm->valuestring))
                    return BAD(e, "invalid_value", pname, "two tools are called '%.64s'", nm->valuestring);
            if ((v = member(f, "parameters")) && !cJSON_IsObject(v))
                return BAD(e, "invalid_type", pname, "'%s.function.parameters' must be a JSON schema object",
                           pname);
            r->n_tools++;
            i++;
        }
        if (n) {
            char *j = cJSON_PrintUnformatted(ts);
            if (!j || own(r, j)) return free(j), -2;
            r->tools_json = j;
        }
    }
    if ((v = member(o, "parallel_tool_calls")) &&
        want_bool(v, "parallel_tool_calls", &r->parallel_tool_calls, e))
        return -1;
    if ((v = member(o, "tool_choice"))) {
        const cJSON *f = cJSON_IsObject(v) ? member(v, "function") : NULL;
        const cJSON *nm = f && cJSON_IsObject(f) ? member(f, "name") : NULL;
        if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto"))
            r->tool_choice = TS_TOOLS_AUTO;
        else if (cJSON_IsString(v) && !strcmp(v->valuestring, "none"))
            r->tool_choice = TS_TOOLS_NONE;
        else if (cJSON_IsString(v) && !strcmp(v->valuestring, "required"))
            r->tool_choice = TS_TOOLS_REQUIRED;
        else if (nm && cJSON_IsString(nm)) {
            r->tool_choice = TS_TOOLS_NAMED;
            if (!(r->tool_name = own_copy(r, nm->valuestring, strlen(nm->valuestring)))) return -2;
            bool found = false;
            for (t = ts ? ts->child : NULL; t; t = t->next)
                found |= !strcmp(member(member(t, "function"), "name")->valuestring, r->tool_name);
            if (!found)
                return BAD(e, "invalid_value", "tool_choice",
                           "tool_choice names '%.64s', which is not in 'tools'", r->tool_name);
        } else
            return BAD(e, "invalid_value", "tool_choice",
                       "'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
                       "\"function\": {\"name\": ...}}");
        if ((r->tool_choice == TS_TOOLS_REQUIRED) && !r->n_tools)
            return BAD(e, "invalid_value", "tool_choice", "tool_choice \"required\" needs 'tools'");
    }
    if ((v = member(o, "response_format"))) {
        const cJSON *t2 = cJSON_IsObject(v) ? member(v, "type") : NULL;
        if (!t2 || !cJSON_IsString(t2))
            return BAD(e, "invalid_type", "response_format",
                       "'response_format' must be an object with a string 'type'");
        if (!strcmp(t2->valuestring, "json_object")) {
            r->format = TS_FORMAT_JSON_OBJECT;
        } else if (!strcmp(t2->valuestring, "json_schema")) {
            const cJSON *js = member(v, "json_schema"),
                        *sc = js && cJSON_IsObject(js) ? member(js, "schema") : NULL;
            if (!sc || !cJSON_IsObject(sc))
                return BAD(e, "invalid_value", "response_format.json_schema.schema",
                           "response_format json_schema needs 'json_schema': {'name', 'schema': {...}}");
            char *j = cJSON_PrintUnformatted(sc);
            if (!j || own(r, j)) return free(j), -2;
            r->format = TS_FORMAT_JSON_SCHEMA, r->schema_json = j;
        } else if (strcmp(t2->valuestring, "text") != 0) {
            return BAD(e, "invalid_value", "response_format.type",
                       "response_format type '%.64s' is unknown: text, json_object or json_schema",
                       t2->valuestring);
        }
        if (r->format && r->tool_choice >= TS_TOOLS_REQUIRED)
            return BAD(e, "invalid_value", "response_format",
                       "response_format and a required tool call cannot both constrain the answer");
    }
    return 0;
}

/* An assistant's tool calls into msg's "tool_calls": {"function": {"name", "arguments"}} each, the
 * arguments as given (a string, or an object the template writes with tojson). */
static int parse_tool_calls(const cJSON *tc, const char *where, cJSON *msg, ts_api_error *e) {
    char pname[128];
    int i = 0;
    cJSON *calls = cJSON_AddArrayToObject(msg, "tool_calls");
    if (!calls) return -2;
    const cJSON *c;
    cJSON_ArrayForEach(c, tc) {
        snprintf(pname, sizeof pname, "%s.tool_calls[%d]", where, i);
        const cJSON *f = cJSON_IsObject(c) ? member(c, "function") : NULL;
        const cJSON *nm = f ? member(f, "name") : NULL, *a = f ? member(f, "arguments") : NULL;
        if (!f || !nm || !cJSON_IsString(nm) || (a && !cJSON_IsString(a) && !cJSON_IsObject(a)))
            return BAD(
                e, "invalid_value", pname,
                "'%s' must be {\"id\", \"type\": \"function\", \"function\": {\"name\", \"arguments\"}}",
                pname);
        cJSON *call = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(calls, call)) return cJSON_Delete(call), -2;
        cJSON *fn = cJSON_AddObjectToObject(call, "function");
        if (!fn || !cJSON_AddStringToObject(fn, "name", nm->valuestring)) return -2;
        cJSON *args = a ? cJSON_Duplicate(a, true) : cJSON_CreateString("{}");
        if (!cJSON_AddItemToObject(fn, "arguments", args)) return cJSON_Delete(args), -2;
        i++;
    }
    return 0;
}

/* The messages, checked, into `out` normalized for ts_chat_apply: canonical roles, content a string
 * (text parts joined by newlines), reasoning_content and tool calls kept. */
static int read_messages(const cJSON *o, ts_api_request *r, cJSON *out, ts_api_error *e) {
    const cJSON *ms = member(o, "messages");
    if (!ms) return BAD(e, "missing_required_parameter", "messages", "'messages' is required");
    if (!cJSON_IsArray(ms))
        return BAD(e, "invalid_type", "messages", "'messages' must be an array, not %s", type_name(ms));
    int n = cJSON_GetArraySize(ms);
    if (n == 0) return BAD(e, "invalid_value", "messages", "'messages' must hold at least one message");
    const cJSON *m;
    int i = 0;
    cJSON_ArrayForEach(m, ms) {
        char where[48];
        snprintf(where, sizeof where, "messages[%d]", i);
        if (!cJSON_IsObject(m))
            return BAD(e, "invalid_type", where, "'%s' must be an object, not %s", where, type_name(m));
        const cJSON *role = member(m, "role");
        char pname[128];
        snprintf(pname, sizeof pname, "%s.role", where);
        if (!role || !cJSON_IsString(role))
            return BAD(e, "invalid_type", pname, "'%s' must be a string", pname);
        const char *rs = role->valuestring;
        char clip[48];
        const char *canon = !strcmp(rs, "system") || !strcmp(rs, "developer") ? "system"
                            : !strcmp(rs, "user")                             ? "user"
                            : !strcmp(rs, "assistant")                        ? "assistant"
                            : !strcmp(rs, "tool")                             ? "tool"
                                                                              : NULL;
        if (!canon)
            return BAD(e, "invalid_value", pname,
                       "'%s' is '%s'; expected system, developer, user, assistant or tool", pname,
                       ts_api_clip(rs, 32, clip, sizeof clip));
        const cJSON *tc = member(m, "tool_calls");
        if (tc && !cJSON_IsArray(tc)) {
            snprintf(pname, sizeof pname, "%s.tool_calls", where);
            return BAD(e, "invalid_type", pname, "'%s' must be an array", pname);
        }
        if (tc && cJSON_GetArraySize(tc) && strcmp(canon, "assistant") != 0) {
            snprintf(pname, sizeof pname, "%s.tool_calls", where);
            return BAD(e, "invalid_value", pname, "only assistant messages have tool calls");
        }
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!c && strcmp(canon, "assistant") != 0) {
            snprintf(pname, sizeof pname, "%s.content", where);
            return BAD(e, "missing_required_parameter", pname, "'%s' is required", pname);
        }
        const char *content = "";
        int rc = content_text(cJSON_IsNull(c) ? NULL : c, where, r, &content, e);
        if (rc) return rc;
        cJSON *msg = cJSON_CreateObject();
        if (!cJSON_AddItemToArray(out, msg)) return cJSON_Delete(msg), -2;
        if (!cJSON_AddStringToObject(msg, "role", canon) || !cJSON_AddStringToObject(msg, "content", content))
            return -2;
        if (tc && cJSON_GetArraySize(tc) && (rc = parse_tool_calls(tc, where, msg, e))) return rc;
        const cJSON *rc2 = member(m, "reasoning_content");
        if (rc2) {
            snprintf(pname, sizeof pname, "%s.reasoning_content", where);
            if (!cJSON_IsString(rc2)) return BAD(e, "invalid_type", pname, "'%s' must be a string", pname);
            if (!cJSON_AddStringToObject(msg, "reasoning_content", rc2->valuestring)) return -2;
        }
        i++;
        r->n_msgs = (size_t)i;
    }
    return 0;
}

static int parse_messages(const cJSON *o, ts_api_request *r, ts_api_error *e) {
    cJSON *out = cJSON_CreateArray();
    if (!out) return -2;
    int rc = read_messages(o, r, out, e);
    char *json = rc ? NULL : cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    if (rc) return rc;
    if (!json || own(r, json)) return free(json), -2;
    r->messages_json = json;
    const cJSON *kw = member(o, "chat_template_kwargs"), *v;
    if (kw) {
        if (!cJSON_IsObject(kw))
            return BAD(e, "invalid_type", "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        char *text = cJSON_PrintUnformatted(kw);
        if (!text) return -2;
        if (own(r, text)) {
            free(text);
            return -2;
        }
        r->template_kwargs = text;
        bool b;
        if ((v = member(kw, "enable_thinking"))) {
            if (want_bool(v, "chat_template_kwargs.enable_thinking", &b, e)) return -1;
            r->enable_thinking = b;
        }
    }
    if ((v = member(o, "add_generation_prompt")) &&
        want_bool(v, "add_generation_prompt", &r->add_generation_prompt, e))
        return -1;
    return 0;
}

/* ---- completion prompt ---------------------------------------------------------------------- */

static int token_ids(const cJSON *a, const char *pname, ts_api_request *r, ts_api_error *e) {
    const cJSON *t;
    int i = 0;
    cJSON_ArrayForEach(t, a) {
        int64_t id = 0;
        char name[48];
        snprintf(name, sizeof name, "%s[%d]", pname, i++);
        if (want_int(t, name, 0, 2147483647.0, &id, e)) return -1;
        if (ts_tokens_push(&r->prompt_ids, (int32_t)id)) return -2;
    }
    r->prompt_is_ids = true;
    return 0;
}

/* carry: what the string check found at "prompt" and "prompt[0]" (a prompt may hold NUL: the
 * tokenizer takes its length). */
static int parse_prompt(const cJSON *o, const ts_json_carry carry[2], ts_api_request *r, ts_api_error *e) {
    const cJSON *p = member(o, "prompt");
    const ts_json_carry *c = &carry[0];
    if (!p) return BAD(e, "missing_required_parameter", "prompt", "'prompt' is required");
    if (cJSON_IsArray(p)) {
        int n = cJSON_GetArraySize(p);
        if (n == 0) return BAD(e, "invalid_value", "prompt", "'prompt' is an empty array");
        if (cJSON_IsNumber(p->child)) return token_ids(p, "prompt", r, e);
        if (n > 1)
            return BAD(e, "unsupported_parameter", "prompt",
                       "several prompts in one request are not supported: send one request per prompt");
        if (cJSON_IsArray(p->child) && !p->child->child)
            return BAD(e, "invalid_value", "prompt[0]", "'prompt[0]' is an empty array");
        if (cJSON_IsArray(p->child)) return token_ids(p->child, "prompt[0]", r, e);
        p = p->child, c = &carry[1];
        if (!cJSON_IsString(p))
            return BAD(e, "invalid_type", "prompt[0]",
                       "'prompt[0]' must be a string or an array of token ids");
    }
    if (!cJSON_IsString(p))
        return BAD(e, "invalid_type", "prompt",
                   "'prompt' must be a string, an array of token ids or a one-element array, not %s",
                   type_name(p));
    int rc = carried_text(p, c, &r->prompt, &r->prompt_len, e);
    if (!rc && own(r, r->prompt)) free(r->prompt), r->prompt = NULL, rc = -2;
    return rc;
}

/* JSON values in s[0..n) (keys included), counting stops past max. Not a validator: malformed
 * input is counted somehow and left to cJSON to refuse. */
static size_t count_values(const char *s, size_t n, size_t max) {
    size_t k = 0;
    for (size_t i = 0; i < n && k <= max; i++) {
        char c = s[i];
        if (c == '"') {
            k++;
            for (i++; i < n && s[i] != '"'; i++)
                if (s[i] == '\\') i++;
        } else if (c == '[' || c == '{') {
            k++;
        } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
            k++;
            while (i + 1 < n && s[i + 1] != ',' && s[i + 1] != ']' && s[i + 1] != '}' && s[i + 1] != ' ' &&
                   s[i + 1] != '\n' && s[i + 1] != '"')
                i++;
        }
    }
    return k;
}

/* n, logprobs and top_logprobs. */
static int parse_choices(const cJSON *o, ts_api_kind kind, ts_api_request *r, ts_api_error *e) {
    const cJSON *v;
    int64_t k;
    r->n_choices = 1, r->logprobs = -1;
    if ((v = member(o, "n"))) {
        if (want_int(v, "n", 1, 1e9, &k, e)) return -1;
        if (k > TS_API_MAX_CHOICES)
            return BAD(e, "unsupported_parameter", "n",
                       "n = %lld is more than this server's limit of %d choices per request", (long long)k,
                       TS_API_MAX_CHOICES);
        r->n_choices = (int)k;
    }
    const cJSON *lp = member(o, "logprobs"), *top = member(o, "top_logprobs");
    if (kind == TS_API_CHAT) {
        bool on = false;
        if (lp && want_bool(lp, "logprobs", &on, e)) return -1;
        if (top) {
            if (want_int(top, "top_logprobs", 0, TS_LOGPROBS_MAX_TOP, &k, e)) return -1;
            if (!on) return BAD(e, "invalid_value", "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        }
        if (on) r->logprobs = top ? (int)k : 0;
    } else {
        if (top)
            return BAD(e, "invalid_value", "top_logprobs",
                       "'top_logprobs' is a chat parameter; completions take 'logprobs': N (0 to %d)",
                       TS_LOGPROBS_MAX_TOP);
        if (lp && !cJSON_IsFalse(lp)) {
            if (want_int(lp, "logprobs", 0, TS_LOGPROBS_MAX_TOP, &k, e)) return -1;
            r->logprobs = (int)k;
        }
    }
    return 0;
}

int ts_api_parse(ts_api_kind kind, const char *body, size_t n, const ts_sampler_params *defaults,
                 size_t max_values, ts_api_request *r, ts_api_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->max_tokens = -1;
    r->sp = *defaults;
    r->enable_thinking = -1;
    r->add_generation_prompt = true;
    r->cache_prompt = true;
    if (memchr(body, 0, n))
        return BAD(e, "invalid_json", NULL, "the request body holds a NUL byte at %zu: not JSON text",
                   (size_t)((const char *)memchr(body, 0, n) - body));
    if (max_values && count_values(body, n, max_values) > max_values)
        return ts_api_fail(
            e, 413, "invalid_request_error", "request_too_large", NULL,
            "the request body holds more than %zu JSON values, this server's limit (it allows 8 "
            "per token of context): a prompt or message list that long cannot fit the context",
            max_values);
    ts_json_carry carry[2] = {{.path = "prompt"}, {.path = "prompt[0]"}};
    if (check_strings(body, n, carry, kind == TS_API_COMPLETION ? 2 : 0, e)) return -1;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, n, &end, false);
    if (!o) {
        size_t at = end && end >= body && end <= body + n ? (size_t)(end - body) : 0;
        return BAD(e, "invalid_json", NULL, "the request body is not valid JSON (error near byte %zu of %zu)",
                   at, n);
    }
    while (end && end < body + n && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    int rc = 0;
    if (end && end < body + n)
        rc =
            BAD(e, "invalid_json", NULL,
                "the request body holds more than one JSON value (extra bytes at %zu)", (size_t)(end - body));
    else if (!cJSON_IsObject(o))
        rc = BAD(e, "invalid_type", NULL, "the request body must be a JSON object, not %s", type_name(o));
    if (!rc) rc = refuse_unsupported(o, kind, e);
    if (!rc) rc = parse_choices(o, kind, r, e);
    if (!rc) rc = parse_common(o, r, e);
    if (!rc) rc = kind == TS_API_CHAT ? parse_messages(o, r, e) : parse_prompt(o, carry, r, e);
    if (!rc && kind == TS_API_CHAT) rc = parse_tools(o, r, e);
    if (!rc) rc = parse_llama_constraints(o, r, e);
    char serr[256];
    if (!rc && ts_sampler_check(&r->sp, serr, sizeof serr)) /* as the floats the sampler will use */
        rc = BAD(e, "invalid_value", NULL, "the sampling parameters are out of range: %s", serr);
    if (!r->stream) r->include_usage = false;
    cJSON_Delete(o);
    if (rc == -2)
        ts_api_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory parsing the request");
    if (rc) {
        ts_api_request_free(r);
        return -1;
    }
    return 0;
}

/* A JSON object body for the small endpoints (the same limits as ts_api_parse). */
static cJSON *parse_object(const char *body, size_t n, size_t max_values, ts_json_carry *carry, int n_carry,
                           ts_api_error *e) {
    memset(e, 0, sizeof *e);
    if (memchr(body, 0, n))
        return BAD(e, "invalid_json", NULL, "the request body holds a NUL byte: not JSON text"), NULL;
    if (max_values && count_values(body, n, max_values) > max_values)
        return ts_api_fail(e, 413, "invalid_request_error", "request_too_large", NULL,
                           "the request body holds more than %zu JSON values, this server's limit",
                           max_values),
               NULL;
    if (check_strings(body, n, carry, n_carry, e)) return NULL;
    cJSON *o = cJSON_ParseWithLength(body, n);
    if (!o) return BAD(e, "invalid_json", NULL, "the request body is not valid JSON"), NULL;
    if (!cJSON_IsObject(o)) {
        BAD(e, "invalid_type", NULL, "the request body must be a JSON object, not %s", type_name(o));
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

int ts_api_parse_tokenize(const char *body, size_t n, size_t max_values, ts_api_tokenize *r,
                          ts_api_error *e) {
    memset(r, 0, sizeof *r);
    r->parse_special = true;
    ts_json_carry carry = {.path = "content"}; /* the text may hold NUL: the tokenizer takes its length */
    cJSON *o = parse_object(body, n, max_values, &carry, 1, e);
    if (!o) return -1;
    const cJSON *c = member(o, "content"), *v;
    int rc = 0;
    if (!c)
        rc = BAD(e, "missing_required_parameter", "content", "'content' is required");
    else if (!cJSON_IsString(c))
        rc = BAD(e, "invalid_type", "content", "'content' must be a string, not %s", type_name(c));
    if (!rc && (v = member(o, "add_special"))) rc = want_bool(v, "add_special", &r->add_special, e);
    if (!rc && (v = member(o, "parse_special"))) rc = want_bool(v, "parse_special", &r->parse_special, e);
    if (!rc && (v = member(o, "with_pieces"))) rc = want_bool(v, "with_pieces", &r->with_pieces, e);
    if (!rc && (rc = carried_text(c, &carry, &r->content, &r->n_content, e)) == -2)
        rc = ts_api_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    cJSON_Delete(o);
    return rc;
}

int ts_api_parse_detokenize(const char *body, size_t n, size_t max_values, int32_t n_vocab, ts_tokens *ids,
                            ts_api_error *e) {
    *ids = (ts_tokens){0};
    cJSON *o = parse_object(body, n, max_values, NULL, 0, e);
    if (!o) return -1;
    const cJSON *a = member(o, "tokens"), *t;
    int rc = 0, i = 0;
    if (!a)
        rc = BAD(e, "missing_required_parameter", "tokens", "'tokens' is required");
    else if (!cJSON_IsArray(a))
        rc = BAD(e, "invalid_type", "tokens", "'tokens' must be an array of token ids, not %s", type_name(a));
    const cJSON *list = rc ? NULL : a;
    cJSON_ArrayForEach(t, list) {
        int64_t id = 0;
        char name[48];
        snprintf(name, sizeof name, "tokens[%d]", i++);
        if ((rc = want_int(t, name, 0, (double)n_vocab - 1, &id, e))) break;
        if (ts_tokens_push(ids, (int32_t)id)) {
            rc = ts_api_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
            break;
        }
    }
    cJSON_Delete(o);
    if (rc) ts_tokens_free(ids);
    return rc;
}

/* One UTF-8 character at s[0 .. n): its code point and length, or length 0 when it is not a valid,
 * shortest encoding of a Unicode scalar value. */
static size_t utf8_char(const unsigned char *s, size_t n, uint32_t *cp) {
    const unsigned char c = s[0];
    size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t v = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3F);
    }
    static const uint32_t least[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (v < least[len] || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = v;
    return len;
}

const char *ts_api_filename_problem(const char *s, size_t n) {
    if (n == 0) return "it is empty";
    if (n > 255) return "it is longer than 255 bytes";
    for (size_t i = 0; i < n;) {
        uint32_t c = 0;
        size_t k = utf8_char((const unsigned char *)s + i, n - i, &c);
        if (!k) return "it is not valid UTF-8";
        if (c <= 0x1F || c == 0x7F || (c >= 0x80 && c <= 0x9F)) return "it holds a control character";
        if (c == '/' || c == '\\' || c == 0x2215 || c == 0x2216) return "it holds a path separator";
        if (c == 0xFF0E || c == 0xFFFD || c == 0xFEFF || strchr(":*?\"<>|", (int)c) != NULL)
            return "it holds a character not allowed in file names (: * ? \" < > |, U+FF0E, U+FFFD, U+FEFF)";
        i += k;
    }
    if (s[0] == ' ' || s[n - 1] == ' ') return "it starts or ends with a space";
    if (s[n - 1] == '.') return "it ends with '.'";
    for (size_t i = 0; i + 1 < n; i++)
        if (s[i] == '.' && s[i + 1] == '.') return "it holds \"..\"";
    return NULL;
}

int ts_api_parse_slot_file(const char *body, size_t n, size_t max_values, char **filename, ts_api_error *e) {
    *filename = NULL;
    cJSON *o = parse_object(body, n, max_values, NULL, 0, e);
    if (!o) return -1;
    const cJSON *f = member(o, "filename");
    const char *why = NULL;
    int rc = 0;
    if (!f)
        rc = BAD(e, "missing_required_parameter", "filename",
                 "'filename' is required (a file name in the slot directory)");
    else if (!cJSON_IsString(f))
        rc = BAD(e, "invalid_type", "filename", "'filename' must be a string, not %s", type_name(f));
    else if ((why = ts_api_filename_problem(f->valuestring, strlen(f->valuestring)))) {
        char clip[136];
        rc = BAD(e, "invalid_value", "filename",
                 "invalid filename '%s': %s; give a plain file name in the slot directory",
                 ts_api_clip(f->valuestring, 128, clip, sizeof clip), why);
    } else if (!(*filename = strdup(f->valuestring)))
        rc = ts_api_fail(e, 500, "server_error", "out_of_memory", NULL, "out of memory");
    cJSON_Delete(o);
    return rc;
}

void ts_api_request_free(ts_api_request *r) {
    for (size_t i = 0; i < r->n_owned; i++) free(r->owned[i]);
    free(r->owned);
    ts_tokens_free(&r->prompt_ids);
    memset(r, 0, sizeof *r);
}

/* ---- responses ------------------------------------------------------------------------------ */

int ts_json_string(ts_text *out, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    char buf[256];
    size_t k = 0;
    int rc = 0;
    buf[k++] = '"';
    for (size_t i = 0; i < n; i++) {
        if (k > sizeof buf - 8) rc |= ts_text_append(out, buf, k), k = 0;
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"':
            buf[k++] = '\\', buf[k++] = '"';
            break;
        case '\\':
            buf[k++] = '\\', buf[k++] = '\\';
            break;
        case '\n':
            buf[k++] = '\\', buf[k++] = 'n';
            break;
        case '\r':
            buf[k++] = '\\', buf[k++] = 'r';
            break;
        case '\t':
            buf[k++] = '\\', buf[k++] = 't';
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                buf[k++] = '\\', buf[k++] = 'u', buf[k++] = '0', buf[k++] = '0';
                buf[k++] = hex[c >> 4], buf[k++] = hex[c & 15];
            } else {
                buf[k++] = (char)c;
            }
        }
    }
    buf[k++] = '"';
    rc |= ts_text_append(out, buf, k);
    return rc ? -1 : 0;
}

static int put(ts_text *out, const char *s) {
    return ts_text_append(out, s, strlen(s));
}

__attribute__((format(printf, 2, 3))) static int putf(ts_text *out, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf) return -1;
    return ts_text_append(out, buf, (size_t)n);
}

int ts_api_error_json(const ts_api_error *e, ts_text *out) {
    ts_text msg = {0}; /* echoed input may hold invalid UTF-8: U+FFFD for it */
    if (ts_utf8_sanitize(e->message, strlen(e->message), &msg) < 0) return -1;
    int rc = put(out, "{\"error\":{\"message\":");
    rc |= ts_json_string(out, msg.s ? msg.s : "", msg.n);
    ts_text_free(&msg);
    rc |= put(out, ",\"type\":");
    rc |= ts_json_string(out, e->type ? e->type : "invalid_request_error",
                         strlen(e->type ? e->type : "invalid_request_error"));
    rc |= put(out, ",\"param\":"); /* a field's path may hold a client's key: sanitized as well */
    if (ts_utf8_sanitize(e->param, strlen(e->param), &msg) < 0) return -1;
    rc |= e->param[0] ? ts_json_string(out, msg.s, msg.n) : put(out, "null");
    ts_text_free(&msg);
    rc |= put(out, ",\"code\":");
    rc |= e->code ? ts_json_string(out, e->code, strlen(e->code)) : put(out, "null");
    rc |= put(out, "}}");
    return rc ? -1 : 0;
}

static int head(const ts_api_resp *r, ts_text *out, bool chunk) {
    const char *object =
        r->kind == TS_API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
    int rc = put(out, "{\"id\":");
    rc |= ts_json_string(out, r->id, strlen(r->id));
    rc |= putf(out, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, r->created);
    rc |= ts_json_string(out, r->model, strlen(r->model));
    rc |= put(out, ",\"system_fingerprint\":\"turbospark\"");
    return rc;
}

static int usage_json(const ts_api_usage *u, ts_text *out) {
    return putf(out,
                ",\"usage\":{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
                (long long)u->prompt_tokens, (long long)u->completion_tokens,
                (long long)(u->prompt_tokens + u->completion_tokens), (long long)u->cached_tokens);
}

static int calls_json(const ts_api_delta *d, bool chunk, ts_text *out) {
    int rc = put(out, ",\"tool_calls\":[");
    for (int i = 0; i < d->n_calls; i++) {
        const ts_api_call *c = &d->calls[i];
        rc |= put(out, i ? ",{" : "{");
        if (chunk) rc |= putf(out, "\"index\":%d,", d->first_index + i);
        rc |= put(out, "\"id\":"), rc |= ts_json_string(out, c->id, strlen(c->id));
        rc |= put(out, ",\"type\":\"function\",\"function\":{\"name\":");
        rc |= ts_json_string(out, c->name, strlen(c->name));
        rc |= put(out, ",\"arguments\":"), rc |= ts_json_string(out, c->arguments, strlen(c->arguments));
        rc |= put(out, "}}");
    }
    return rc | put(out, "]");
}

/* A token's text as a JSON string (invalid UTF-8 of a partial character becomes U+FFFD; "bytes"
 * has the exact bytes). */
static int token_text_json(const ts_api_resp *r, int32_t id, bool with_bytes, ts_text *out) {
    size_t n = 0;
    const char *b = ts_token_bytes(r->tok, id, true, &n);
    if (!b) b = "", n = 0;
    ts_text t = {0};
    int rc = ts_utf8_sanitize(b, n, &t) < 0 ? -1 : 0;
    rc |= ts_json_string(out, t.s ? t.s : "", t.n);
    ts_text_free(&t);
    if (with_bytes) {
        rc |= put(out, ",\"bytes\":[");
        for (size_t i = 0; i < n; i++) rc |= putf(out, i ? ",%u" : "%u", (unsigned)(unsigned char)b[i]);
        rc |= put(out, "]");
    }
    return rc;
}

/* The "logprobs" value of a choice or a chunk. */
static int logprobs_json(const ts_api_resp *r, const ts_api_delta *d, ts_text *out) {
    if (r->logprobs < 0 || !r->tok) return put(out, "null");
    int rc = 0;
    if (r->kind == TS_API_CHAT) {
        rc |= put(out, "{\"content\":[");
        for (size_t i = 0; i < d->n_lp; i++) {
            const ts_token_logprobs *t = &d->lp[i];
            rc |= put(out, i ? ",{\"token\":" : "{\"token\":");
            rc |= token_text_json(r, t->id, false, out);
            rc |= putf(out, ",\"logprob\":%.9g", (double)t->logprob);
            rc |= put(out, ",\"bytes\":[");
            size_t n = 0;
            const char *b = ts_token_bytes(r->tok, t->id, true, &n);
            for (size_t k = 0; b && k < n; k++)
                rc |= putf(out, k ? ",%u" : "%u", (unsigned)(unsigned char)b[k]);
            rc |= put(out, "],\"top_logprobs\":[");
            for (int k = 0; k < t->n_top; k++) {
                rc |= put(out, k ? ",{\"token\":" : "{\"token\":");
                rc |= token_text_json(r, t->top_id[k], true, out);
                rc |= putf(out, ",\"logprob\":%.9g}", (double)t->top_lp[k]);
            }
            rc |= put(out, "]}");
        }
        return rc | put(out, "],\"refusal\":null}");
    }
    rc |= put(out, "{\"tokens\":[");
    for (size_t i = 0; i < d->n_lp; i++)
        rc |= put(out, i ? "," : ""), rc |= token_text_json(r, d->lp[i].id, false, out);
    rc |= put(out, "],\"token_logprobs\":[");
    for (size_t i = 0; i < d->n_lp; i++) rc |= putf(out, i ? ",%.9g" : "%.9g", (double)d->lp[i].logprob);
    rc |= put(out, "],\"top_logprobs\":[");
    for (size_t i = 0; i < d->n_lp; i++) {
        rc |= put(out, i ? ",{" : "{");
        for (int k = 0; k < d->lp[i].n_top; k++) {
            rc |= put(out, k ? "," : "");
            rc |= token_text_json(r, d->lp[i].top_id[k], false, out);
            rc |= putf(out, ":%.9g", (double)d->lp[i].top_lp[k]);
        }
        rc |= put(out, "}");
    }
    rc |= put(out, "],\"text_offset\":[");
    int64_t off = d->text_offset;
    for (size_t i = 0; i < d->n_lp; i++) {
        size_t n = 0;
        ts_token_bytes(r->tok, d->lp[i].id, true, &n);
        rc |= putf(out, i ? ",%lld" : "%lld", (long long)off);
        off += (int64_t)n;
    }
    return rc | put(out, "]}");
}

int ts_api_response_json(const ts_api_resp *r, const ts_api_delta *ms, const char *const *finish_reason,
                         int n, const ts_api_usage *u, ts_text *out) {
    int rc = head(r, out, false);
    rc |= put(out, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        const ts_api_delta *m = &ms[i];
        const char *text = m->content ? m->content : "";
        if (r->kind == TS_API_CHAT) {
            rc |= putf(out, "%s{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":", i ? "," : "",
                       i);
            rc |= m->n_calls && !m->n_content ? put(out, "null") : ts_json_string(out, text, m->n_content);
            if (m->reasoning && m->n_reasoning)
                rc |= put(out, ",\"reasoning_content\":"),
                    rc |= ts_json_string(out, m->reasoning, m->n_reasoning);
            if (m->n_calls) rc |= calls_json(m, false, out);
            rc |= put(out, "},\"logprobs\":");
        } else {
            rc |= putf(out, "%s{\"index\":%d,\"text\":", i ? "," : "", i);
            rc |= ts_json_string(out, text, m->n_content);
            rc |= put(out, ",\"logprobs\":");
        }
        rc |= logprobs_json(r, m, out);
        rc |= put(out, ",\"finish_reason\":");
        rc |= ts_json_string(out, finish_reason[i], strlen(finish_reason[i]));
        rc |= put(out, "}");
    }
    rc |= put(out, "]");
    rc |= usage_json(u, out);
    rc |= put(out, "}");
    return rc ? -1 : 0;
}

int ts_api_chunk_sse(const ts_api_resp *r, bool role, const ts_api_delta *d, const char *finish_reason,
                     const ts_api_usage *u, ts_text *out) {
    static const ts_api_delta none = {0};
    if (!d) d = &none;
    int rc = put(out, "data: ");
    rc |= head(r, out, true);
    if (u) {
        rc |= put(out, ",\"choices\":[]");
        rc |= usage_json(u, out);
    } else {
        if (r->kind == TS_API_CHAT) {
            rc |= putf(out, ",\"choices\":[{\"index\":%d,\"delta\":{", d->index);
            bool any = false;
            if (role) rc |= put(out, "\"role\":\"assistant\",\"content\":\"\""), any = true;
            if (d->content && d->n_content)
                rc |= put(out, any ? ",\"content\":" : "\"content\":"),
                    rc |= ts_json_string(out, d->content, d->n_content), any = true;
            if (d->reasoning && d->n_reasoning)
                rc |= put(out, any ? ",\"reasoning_content\":" : "\"reasoning_content\":"),
                    rc |= ts_json_string(out, d->reasoning, d->n_reasoning), any = true;
            if (d->n_calls) {
                ts_text t = {0};
                rc |= calls_json(d, true, &t);
                rc |= ts_text_append(out, t.s + (any ? 0 : 1), t.n - (any ? 0 : 1)); /* no leading comma */
                ts_text_free(&t);
            }
            rc |= put(out, "},\"logprobs\":");
        } else {
            rc |= putf(out, ",\"choices\":[{\"index\":%d,\"text\":", d->index);
            rc |= ts_json_string(out, d->content ? d->content : "", d->n_content);
            rc |= put(out, ",\"logprobs\":");
        }
        rc |= d->n_lp ? logprobs_json(r, d, out) : put(out, "null");
        rc |= put(out, ",\"finish_reason\":");
        rc |= finish_reason ? ts_json_string(out, finish_reason, strlen(finish_reason)) : put(out, "null");
        rc |= put(out, "}]");
    }
    rc |= put(out, "}\n\n");
    return rc ? -1 : 0;
}

int ts_api_chunk_sse_at(const ts_api_resp *r, int index, bool role, const char *finish_reason, ts_text *out) {
    ts_api_delta d = {.index = index};
    return ts_api_chunk_sse(r, role, &d, finish_reason, NULL, out);
}
