/* Tool-call blocks parsed out of the content (see toolcall.h). */
#include "engine/toolcall.h"

#include "common/error.h"
#include "common/json_check.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

int ts_toolcall_init(ts_toolcall_parser *p, const char *tools_json, char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (tools_json &&
        ts_json_check_text("the tools", tools_json, strlen(tools_json), "the tool-call parser", err, errlen))
        return -1;
    if (tools_json && !(p->tools = cJSON_Parse(tools_json)))
        return ts_errf(err, errlen, "the tools are not valid JSON");
    return 0;
}

void ts_toolcall_free(ts_toolcall_parser *p) {
    cJSON_Delete(p->tools);
    for (int i = 0; i < p->n_calls; i++) free(p->calls[i].name), free(p->calls[i].arguments);
    free(p->calls);
    ts_text_free(&p->hold);
    memset(p, 0, sizeof *p);
}

static bool is_ws(char c) {
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* The declared JSON type of a tool's parameter ("string", ...), or NULL. */
static const char *param_type(const cJSON *tools, const char *fn, const char *param) {
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, fn) != 0) continue;
        const cJSON *props =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(f, "parameters"), "properties");
        const cJSON *ty =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(props, param), "type");
        return cJSON_IsString(ty) ? ty->valuestring : NULL;
    }
    return NULL;
}

/* Whether JSON text s[0..n) holds a string cJSON would read wrongly (ts_json_check): a NUL would cut a
 * name or an argument short, so such a block is no call and stays in the content as written. */
static bool json_unsafe(const char *s, size_t n) {
    ts_json_issue is;
    return ts_json_check(s, n, NULL, 0, &is) != 0;
}

/* <function=NAME> (<parameter=P>\nVALUE\n</parameter>)* </function> */
static int parse_xml(const cJSON *tools, const char *s, size_t n, char **name, char **arguments) {
    const char *e = s + n, *p = s + 10; /* past "<function=" */
    if (memchr(s, 0, n)) return -1;     /* a NUL byte: names and values are C strings below */
    const char *gt = memchr(p, '>', (size_t)(e - p));
    if (!gt || gt == p) return -1;
    char *fn = dup_n(p, (size_t)(gt - p));
    cJSON *args = cJSON_CreateObject();
    if (!fn || !args) goto fail;
    for (p = gt + 1;;) {
        while (p < e && is_ws(*p)) p++;
        if ((size_t)(e - p) >= 11 && !memcmp(p, "</function>", 11)) {
            for (p += 11; p < e && is_ws(*p); p++) {
            }
            if (p != e) goto fail;
            break;
        }
        if (p == e) break; /* </function> cut off */
        if ((size_t)(e - p) < 11 || memcmp(p, "<parameter=", 11)) goto fail;
        p += 11;
        gt = memchr(p, '>', (size_t)(e - p));
        if (!gt || gt == p) goto fail;
        char *pn = dup_n(p, (size_t)(gt - p));
        const char *v = gt + 1, *ve = memmem(v, (size_t)(e - v), "</parameter>", 12);
        if (!pn) goto fail;
        p = ve ? ve + 12 : e;
        if (!ve) ve = e;
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        char *val = dup_n(v, (size_t)(ve - v));
        const char *ty = param_type(tools, fn, pn);
        cJSON *j = NULL;
        if (val && !(ty && !strcmp(ty, "string")) && !json_unsafe(val, strlen(val))) {
            j = cJSON_Parse(val);
            if (j && cJSON_IsString(j) && !ty) cJSON_Delete(j), j = NULL; /* quoted text stays text */
        }
        if (!j && val) j = cJSON_CreateString(val);
        free(val);
        if (!j || cJSON_GetObjectItemCaseSensitive(args, pn)) { /* a parameter given twice */
            cJSON_Delete(j), free(pn);
            goto fail;
        }
        cJSON_AddItemToObject(args, pn, j);
        free(pn);
    }
    if (!(*arguments = cJSON_PrintUnformatted(args))) goto fail;
    *name = fn;
    cJSON_Delete(args);
    return 0;
fail:
    free(fn);
    cJSON_Delete(args);
    return -1;
}

int ts_toolcall_parse_body(const void *tools, const char *s, size_t n, char **name, char **arguments) {
    while (n && is_ws(*s)) s++, n--;
    while (n && is_ws(s[n - 1])) n--;
    *name = *arguments = NULL;
    if (n >= 10 && !memcmp(s, "<function=", 10)) return parse_xml(tools, s, n, name, arguments);
    if (!n || *s != '{' || memchr(s, 0, n) || json_unsafe(s, n)) return -1;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, false);
    if (!o || end != s + n) return cJSON_Delete(o), -1;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(o, "parameters");
    int rc = -1;
    if (cJSON_IsString(nm) && *nm->valuestring && (!args || cJSON_IsObject(args) || cJSON_IsString(args))) {
        *name = strdup(nm->valuestring);
        *arguments = !args                  ? strdup("{}")
                     : cJSON_IsString(args) ? strdup(args->valuestring)
                                            : cJSON_PrintUnformatted(args);
        rc = *name && *arguments ? 0 : -1;
        if (rc) free(*name), free(*arguments), *name = *arguments = NULL;
    }
    cJSON_Delete(o);
    return rc;
}

static int add_call(ts_toolcall_parser *p, char *name, char *args) {
    if (p->n_calls == p->cap) {
        int cap = p->cap ? 2 * p->cap : 4;
        ts_tool_call *c = realloc(p->calls, (size_t)cap * sizeof *c);
        if (!c) return free(name), free(args), -1;
        p->calls = c, p->cap = cap;
    }
    p->calls[p->n_calls++] = (ts_tool_call){name, args};
    return 0;
}

/* A block's body is over: a call, or back into the content as written. */
static int close_block(ts_toolcall_parser *p, const char *body, size_t n, bool closed, ts_text *content) {
    char *name, *args;
    if (!ts_toolcall_parse_body(p->tools, body, n, &name, &args)) return add_call(p, name, args);
    int rc = ts_text_append(content, OPEN, sizeof OPEN - 1) | ts_text_append(content, body, n);
    if (closed) rc |= ts_text_append(content, CLOSE, sizeof CLOSE - 1);
    return rc ? -1 : 0;
}

static size_t tag_prefix_tail(const char *s, size_t n, const char *tag) {
    size_t L = strlen(tag);
    for (size_t m = L - 1 < n ? L - 1 : n; m > 0; m--)
        if (!memcmp(s + n - m, tag, m)) return m;
    return 0;
}

static int drain(ts_toolcall_parser *p, ts_text *content, bool final) {
    ts_text *h = &p->hold;
    size_t used = 0;
    int rc = 0;
    while (used < h->n && !rc) {
        const char *s = h->s + used;
        size_t n = h->n - used;
        if (p->inside) {
            const char *c = memmem(s, n, CLOSE, sizeof CLOSE - 1);
            if (!c && !final) break;
            rc = close_block(p, s, c ? (size_t)(c - s) : n, c != NULL, content);
            p->inside = false;
            used += c ? (size_t)(c - s) + sizeof CLOSE - 1 : n;
            continue;
        }
        const char *o = memmem(s, n, OPEN, sizeof OPEN - 1);
        size_t text = o ? (size_t)(o - s) : final ? n : n - tag_prefix_tail(s, n, OPEN), t = text;
        if (o || !final || p->n_calls) /* whitespace before a block or a possible one; after calls */
            while (t && is_ws(s[t - 1])) t--;
        if (t) rc = ts_text_append(content, s, t);
        if (o) {
            p->inside = true, used += text + sizeof OPEN - 1;
        } else {
            used += final ? n : t;
            break;
        }
    }
    if (used) {
        memmove(h->s, h->s + used, h->n - used);
        h->n -= used;
    }
    return rc;
}

int ts_toolcall_push(ts_toolcall_parser *p, const char *s, size_t n, ts_text *content) {
    if (ts_text_append(&p->hold, s, n)) return -1;
    return drain(p, content, false);
}

int ts_toolcall_finish(ts_toolcall_parser *p, ts_text *content) {
    return drain(p, content, true);
}
