/* JSON strings checked before cJSON reads them (include/turbospark.h, "JSON text"; the library's own
 * use: json_check.h). */
#include "common/json_check.h"

#include "common/error.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAX_DEPTH 1024 /* deeper than cJSON's CJSON_NESTING_LIMIT (1000): cJSON refuses the text */
#define PATH_DEPTH 64  /* levels whose element indices are kept for paths; deeper ones are "..." */
#define PATH_CAP sizeof(((ts_json_issue *)0)->path)

enum { ARR = 1, OBJ_KEY, OBJ_VAL }; /* a level: an array, or an object expecting a key or a value */

static int hex4(const char *s, uint32_t *v) {
    uint32_t x = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        x = x << 4 | (uint32_t)d;
    }
    *v = x;
    return 0;
}

/* The length of the well-formed UTF-8 character at s[0..n) (Unicode Table 3-7), or 0. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned char c = s[0], lo = 0x80, hi = 0xBF;
    size_t need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1;
    else if (c >= 0xE0 && c <= 0xEF)
        need = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        need = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0; /* 80..C1 (C0 and C1 only ever start overlong forms), F5..FF */
    if (need >= n) return 0;
    for (size_t k = 1; k <= need; k++, lo = 0x80, hi = 0xBF)
        if (s[k] < lo || s[k] > hi) return 0;
    return need + 1;
}

/* The token t[0..n) (between the quotes): the first problem other than NUL, with *at; *nul and
 * *nul_at say whether and where it holds \u0000. */
static ts_json_issue_kind check_token(const char *t, size_t n, size_t *at, bool *nul, size_t *nul_at) {
    *nul = false;
    for (size_t k = 0; k < n;) {
        unsigned char c = (unsigned char)t[k];
        if (c == '\\') { /* never the last byte: the end search skips the byte after a backslash */
            uint32_t u, u2;
            *at = k;
            if (t[k + 1] != 'u') {
                if (!strchr("\"\\/bfnrt", t[k + 1]) || !t[k + 1]) return TS_JSON_BAD_ESCAPE;
                k += 2;
                continue;
            }
            if (n - k < 6 || hex4(t + k + 2, &u)) return TS_JSON_BAD_ESCAPE;
            if (u >= 0xDC00 && u <= 0xDFFF) return TS_JSON_SURROGATE;
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (n - k < 12 || t[k + 6] != '\\' || t[k + 7] != 'u' || hex4(t + k + 8, &u2) ||
                    u2 < 0xDC00 || u2 > 0xDFFF)
                    return TS_JSON_SURROGATE;
                k += 12;
                continue;
            }
            if (u == 0 && !*nul) *nul = true, *nul_at = k;
            k += 6;
        } else {
            if (c == 0 && !*nul) *nul = true, *nul_at = k; /* a raw NUL byte ends cJSON's string too */
            size_t l = utf8_len((const unsigned char *)t + k, n - k);
            if (!l) return *at = k, TS_JSON_BAD_UTF8;
            k += l;
        }
    }
    return TS_JSON_OK;
}

/* The bytes of the character at t[*k] of a checked token into out (1 to 4); advances *k. */
static size_t decode_one(const char *t, size_t *k, char out[4]) {
    if (t[*k] != '\\') return out[0] = t[(*k)++], 1;
    char e = t[*k + 1];
    if (e != 'u') {
        *k += 2;
        out[0] = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
        return 1;
    }
    uint32_t u = 0, lo = 0;
    hex4(t + *k + 2, &u);
    *k += 6;
    if (u >= 0xD800 && u <= 0xDBFF) {
        hex4(t + *k + 2, &lo);
        *k += 6;
        u = 0x10000 + ((u - 0xD800) << 10 | (lo - 0xDC00));
    }
    unsigned char *o = (unsigned char *)out;
    if (u < 0x80) return o[0] = (unsigned char)u, 1;
    if (u < 0x800) return o[0] = (unsigned char)(0xC0 | u >> 6), o[1] = (unsigned char)(0x80 | (u & 0x3F)), 2;
    if (u < 0x10000)
        return o[0] = (unsigned char)(0xE0 | u >> 12), o[1] = (unsigned char)(0x80 | (u >> 6 & 0x3F)),
               o[2] = (unsigned char)(0x80 | (u & 0x3F)), 3;
    o[0] = (unsigned char)(0xF0 | u >> 18), o[1] = (unsigned char)(0x80 | (u >> 12 & 0x3F)),
    o[2] = (unsigned char)(0x80 | (u >> 6 & 0x3F)), o[3] = (unsigned char)(0x80 | (u & 0x3F));
    return 4;
}

int ts_json_decode(const char *tok, size_t n, ts_text *out) {
    char b[4];
    for (size_t k = 0; k < n;) {
        size_t run = k;
        while (k < n && tok[k] != '\\') k++;
        if (k > run && ts_text_append(out, tok + run, k - run)) return -1;
        if (k < n && ts_text_append(out, b, decode_one(tok, &k, b))) return -1;
    }
    return out->s ? 0 : ts_text_append(out, "", 0); /* an empty string still has a buffer */
}

/* Appends str[0..k) to the path p[0..len); a path that no longer fits ends in "..." (and stays so). */
static size_t put(char *p, size_t len, const char *str, size_t k) {
    if (len == PATH_CAP - 1) return len; /* already cut */
    if (len + k <= PATH_CAP - 4) {
        memcpy(p + len, str, k);
        p[len + k] = 0;
        return len + k;
    }
    size_t m = PATH_CAP - 4 - len; /* what still fits (less than k) */
    memcpy(p + len, str, m < k ? m : k);
    memcpy(p + PATH_CAP - 4, "...", 4);
    return PATH_CAP - 1;
}

/* The path of the container p[0..len) followed by key tok[0..n) (checked): .key, or ["key"]. */
static size_t put_key(char *p, size_t len, const char *tok, size_t n) {
    char key[PATH_CAP], b[4];
    size_t m = 0;
    bool plain = n > 0;
    for (size_t k = 0; k < n && m < sizeof key - 4;) {
        size_t l = decode_one(tok, &k, b);
        for (size_t i = 0; i < l; i++)
            if (b[i] == '.' || b[i] == '[' || b[i] == ']' || b[i] == '"' || (unsigned char)b[i] < 0x20 ||
                b[i] == 0x7F)
                plain = false;
        memcpy(key + m, b, l), m += l;
    }
    if (plain) return put(p, len ? put(p, len, ".", 1) : len, key, m);
    len = put(p, len, "[\"", 2);
    return put(p, put(p, len, key, m), "\"]", 2);
}

int ts_json_check(const char *s, size_t n, ts_json_carry *carry, int n_carry, ts_json_issue *is) {
    memset(is, 0, sizeof *is);
    for (int c = 0; c < n_carry; c++) carry[c].tok = NULL, carry[c].n = 0, carry[c].nul = false;
    unsigned char kind[MAX_DEPTH + 1];
    uint32_t idx[PATH_DEPTH + 1];
    size_t plen[PATH_DEPTH + 1];
    char path[PATH_CAP];
    size_t len = 0; /* path[0..len): the value being read (a container's, plus its key in an object) */
    int d = 0;      /* nesting level: 0 is the top-level value */
    path[0] = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool is_key = d > 0 && kind[d] == OBJ_KEY;
        if (c == '{' || c == '[' || c == '"') { /* a value (or a key) starts: its path */
            if (d == 0) len = 0, path[0] = 0;   /* a top-level value (more than one: cJSON refuses) */
            if (d > 0 && !is_key) {
                size_t at = d <= PATH_DEPTH ? plen[d] : plen[PATH_DEPTH];
                if (d > PATH_DEPTH) {
                    len = put(path, at, "...", 3);
                } else if (kind[d] == ARR) {
                    char b[16];
                    len = put(path, at, b, (size_t)snprintf(b, sizeof b, "[%u]", idx[d]));
                } /* OBJ_VAL: the key is on the path already */
            }
        }
        if (c == '{' || c == '[') {
            if (d == MAX_DEPTH) return 0;
            kind[++d] = c == '[' ? ARR : OBJ_KEY;
            if (d <= PATH_DEPTH) plen[d] = len, idx[d] = 0;
        } else if (c == '}' || c == ']') {
            if (d > 0) d--;
        } else if (c == ',') {
            if (d > 0 && kind[d] == ARR && d <= PATH_DEPTH) idx[d]++;
            if (d > 0 && kind[d] != ARR) kind[d] = OBJ_KEY;
        } else if (c == ':') {
            if (is_key) kind[d] = OBJ_VAL;
        } else if (c == '"') {
            size_t j = i + 1;
            while (j < n && s[j] != '"') j += s[j] == '\\' ? 2 : 1;
            if (j >= n) return 0; /* not closed: cJSON refuses it */
            const char *tok = s + i + 1;
            size_t tn = j - i - 1, at = 0, nul_at = 0;
            bool nul;
            ts_json_issue_kind k = check_token(tok, tn, &at, &nul, &nul_at);
            if (is_key) { /* the object's own path */
                len = d <= PATH_DEPTH ? plen[d] : put(path, plen[PATH_DEPTH], "...", 3);
                path[len] = 0;
            }
            int carried = -1;
            for (int q = 0; !is_key && q < n_carry && carried < 0; q++)
                if (!strcmp(carry[q].path, path)) carried = q;
            if (!k && nul && carried < 0) k = TS_JSON_NUL, at = nul_at;
            if (k) {
                is->kind = k, is->in_key = is_key, is->at = (size_t)(tok - s) + at;
                if (k == TS_JSON_SURROGATE || k == TS_JSON_BAD_ESCAPE)
                    snprintf(is->esc, sizeof is->esc, "%.*s", (int)(tn - at < 6 ? tn - at : 6), tok + at);
                memcpy(is->path, path, len + 1);
                return 1;
            }
            if (carried >= 0 && !carry[carried].tok)
                carry[carried].tok = tok, carry[carried].n = tn, carry[carried].nul = nul;
            if (is_key) len = put_key(path, len, tok, tn);
            i = j;
        }
    }
    return 0;
}

const char *ts_json_issue_text(const ts_json_issue *is, const char *who, char *buf, size_t len) {
    char where[sizeof is->path + 32];
    if (is->in_key)
        snprintf(where, sizeof where, is->path[0] ? "a key of '%s'" : "a key of the top-level object%s",
                 is->path);
    else
        snprintf(where, sizeof where, is->path[0] ? "'%s'" : "the top-level string%s", is->path);
    switch (is->kind) {
    case TS_JSON_NUL:
        snprintf(buf, len, "%s contains a NUL character (\\u0000), which %s cannot carry", where, who);
        break;
    case TS_JSON_BAD_ESCAPE:
        snprintf(buf, len, "%s holds the invalid escape %s (byte %zu): not JSON", where, is->esc, is->at);
        break;
    case TS_JSON_SURROGATE:
        snprintf(buf, len,
                 "%s holds the lone surrogate escape %s (byte %zu), which stands for no Unicode character",
                 where, is->esc, is->at);
        break;
    case TS_JSON_BAD_UTF8:
        snprintf(buf, len, "%s is not valid UTF-8 (byte %zu): JSON text must be UTF-8", where, is->at);
        break;
    default:
        snprintf(buf, len, "%s is fine", where);
    }
    return buf;
}

int ts_json_check_text(const char *what, const char *text, size_t n, const char *who, char *err,
                       size_t errlen) {
    ts_json_issue is;
    if (!text || !ts_json_check(text, n, NULL, 0, &is)) return 0;
    char msg[sizeof is.path + 160];
    return ts_errf(err, errlen, "%s: %s", what, ts_json_issue_text(&is, who, msg, sizeof msg));
}
