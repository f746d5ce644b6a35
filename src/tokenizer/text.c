/* Byte strings, id lists, UTF-8 validation with Python's replacement rule, NFC, the GPT-2 byte map. */
#include "tokenizer/internal.h"

#include "common/error.h"

#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

int ts_text_append(ts_text *t, const void *data, size_t n) {
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64;
        while (cap < t->n + n + 1) {
            if (cap > SIZE_MAX / 2) return -1;
            cap *= 2;
        }
        char *s = realloc(t->s, cap);
        if (!s) return -1;
        t->s = s;
        t->cap = cap;
    }
    if (n) memcpy(t->s + t->n, data, n);
    t->n += n;
    t->s[t->n] = 0;
    return 0;
}

void ts_text_free(ts_text *t) {
    free(t->s);
    *t = (ts_text){0};
}

int ts_tokens_push(ts_tokens *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof(int32_t)) return -1;
        int32_t *ids = realloc(v->ids, cap * sizeof(int32_t));
        if (!ids) return -1;
        v->ids = ids;
        v->cap = cap;
    }
    v->ids[v->n++] = id;
    return 0;
}

void ts_tokens_free(ts_tokens *v) {
    free(v->ids);
    *v = (ts_tokens){0};
}

uint32_t ts_hash_bytes(const void *p, size_t n) {
    const unsigned char *s = p;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 16777619u;
    return h;
}

/* Unicode Table 3-7 (well-formed UTF-8): the range of the second byte depends on the first. */
int ts_utf8_char(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned char c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int need;
    unsigned char lo = 0x80, hi = 0xBF;
    uint32_t v;
    if (c >= 0xC2 && c <= 0xDF)
        need = 1, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 2, v = c & 0x0F;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 3, v = c & 0x07;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return -1; /* 80..C1, F5..FF can never start a character */
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return 0; /* valid so far, cut short */
        unsigned char b = s[k];
        if (b < lo || b > hi) return -k; /* the maximal subpart is s[0..k) */
        lo = 0x80, hi = 0xBF;
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return need + 1;
}

size_t ts_utf8_put(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) return o[0] = (unsigned char)cp, 1;
    if (cp < 0x800) return o[0] = 0xC0 | (cp >> 6), o[1] = 0x80 | (cp & 0x3F), 2;
    if (cp < 0x10000)
        return o[0] = 0xE0 | (cp >> 12), o[1] = 0x80 | ((cp >> 6) & 0x3F), o[2] = 0x80 | (cp & 0x3F), 3;
    o[0] = 0xF0 | (cp >> 18), o[1] = 0x80 | ((cp >> 12) & 0x3F), o[2] = 0x80 | ((cp >> 6) & 0x3F),
    o[3] = 0x80 | (cp & 0x3F);
    return 4;
}

static const char k_replacement[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

long ts_utf8_sanitize(const char *str, size_t n, ts_text *out) {
    const unsigned char *s = (const unsigned char *)str;
    long bad = 0;
    size_t i = 0, run = 0; /* s[run..i) is valid and not yet copied */
    while (i < n) {
        uint32_t cp;
        int l = s[i] < 0x80 ? 1 : ts_utf8_char(s + i, n - i, &cp);
        if (l > 0) {
            i += (size_t)l;
            continue;
        }
        if (ts_text_append(out, s + run, i - run) || ts_text_append(out, k_replacement, 3)) return -1;
        i += l == 0 ? n - i : (size_t)-l; /* an incomplete tail is one maximal subpart */
        run = i;
        bad++;
    }
    if (ts_text_append(out, s + run, n - run)) return -1;
    return bad;
}

int ts_utf8_nfc(const char *s, size_t n, ts_text *out, char *err, size_t errlen) {
    size_t i = 0;
    while (i < n && (unsigned char)s[i] < 0x80) i++;
    if (i == n) return ts_text_append(out, s, n) ? ts_errf(err, errlen, "out of memory normalizing text") : 0;
    utf8proc_uint8_t *dst = NULL;
    utf8proc_ssize_t r = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &dst,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    if (r < 0) return ts_errf(err, errlen, "NFC normalization failed: %s", utf8proc_errmsg(r));
    int rc = ts_text_append(out, dst, (size_t)r) ? ts_errf(err, errlen, "out of memory normalizing text") : 0;
    free(dst);
    return rc;
}

/* bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 to 256 + k in order. */
uint32_t ts_byte_to_cp(uint8_t b) {
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
    uint32_t k = 0;
    for (int x = 0; x < b; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) k++;
    return 256 + k;
}

int ts_cp_to_byte(uint32_t cp) {
    if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return (int)cp;
    if (cp < 256 || cp >= 256 + 68) return -1;
    uint32_t k = 0;
    for (int x = 0; x < 256; x++)
        if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) {
            if (k == cp - 256) return x;
            k++;
        }
    return -1;
}
