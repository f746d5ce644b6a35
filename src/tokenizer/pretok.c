/* Pre-tokenizer regexes (tokenizer.ggml.pre), run with PCRE2 in UTF + UCP mode.
 *
 * The patterns are the ones of the Hugging Face tokenizer.json files (llama.cpp keeps them as
 * comments next to its hand-expanded versions). HF runs them with Oniguruma, where \s is the
 * Unicode White_Space property; PCRE2's UCP \s also matches U+180E (MONGOLIAN VOWEL SEPARATOR,
 * not White_Space since Unicode 6.3), so \s and \S are rewritten to the explicit White_Space set
 * before compiling. (?i:...) folds case the Unicode way in both engines ('ſ matches 's). */
#include "tokenizer/internal.h"

#include "common/error.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

struct ts_pretok {
    pcre2_code *re;
};

static const struct {
    const char *name, *pattern;
} k_pre[] = {
    {"qwen35", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}"
               "| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
              "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

/* Unicode White_Space: what Oniguruma's \s matches. */
#define TS_WHITE_SPACE                                                                                       \
    "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{"    \
    "205F}\\x{3000}"

const char *ts_pretok_pattern(const char *pre) {
    for (size_t i = 0; i < sizeof k_pre / sizeof *k_pre; i++)
        if (!strcmp(pre, k_pre[i].name)) return k_pre[i].pattern;
    return NULL;
}

/* Rewrites \s / \S (outside or inside a class; \S inside a class is refused). */
static char *rewrite_spaces(const char *p, char *err, size_t errlen) {
    ts_text out = {0};
    bool in_class = false;
    for (size_t i = 0; p[i]; i++) {
        int rc = 0;
        if (p[i] == '\\' && p[i + 1]) {
            char c = p[i + 1];
            if (c == 's')
                rc = in_class ? ts_text_append(&out, TS_WHITE_SPACE, strlen(TS_WHITE_SPACE))
                              : ts_text_append(&out, "[" TS_WHITE_SPACE "]", strlen(TS_WHITE_SPACE) + 2);
            else if (c == 'S' && !in_class)
                rc = ts_text_append(&out, "[^" TS_WHITE_SPACE "]", strlen(TS_WHITE_SPACE) + 3);
            else if (c == 'S') {
                ts_text_free(&out);
                ts_errf(err, errlen,
                        "pre-tokenizer pattern has \\S inside a character class, which is not supported");
                return NULL;
            } else
                rc = ts_text_append(&out, p + i, 2);
            i++;
        } else {
            if (p[i] == '[' && !in_class) {
                in_class = true;
                rc = ts_text_append(&out, p + i, 1);
                if (p[i + 1] == '^') rc |= ts_text_append(&out, p + ++i, 1);
                if (p[i + 1] == ']') rc |= ts_text_append(&out, p + ++i, 1); /* a literal ] first */
            } else {
                if (p[i] == ']' && in_class) in_class = false;
                rc = ts_text_append(&out, p + i, 1);
            }
        }
        if (rc) {
            ts_text_free(&out);
            ts_errf(err, errlen, "out of memory compiling the pre-tokenizer");
            return NULL;
        }
    }
    return out.s;
}

int ts_pretok_new(const char *pre, ts_pretok **out, char *err, size_t errlen) {
    *out = NULL;
    const char *pattern = ts_pretok_pattern(pre);
    if (!pattern)
        return ts_errf(
            err, errlen,
            "tokenizer.ggml.pre is '%s'; this runtime knows the pre-tokenizers 'qwen35' and 'qwen2'", pre);
    char *p = rewrite_spaces(pattern, err, errlen);
    if (!p) return -1;
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)p, PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &off, NULL);
    free(p);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return ts_errf(err, errlen, "cannot compile the '%s' pre-tokenizer regex (offset %zu): %s", pre,
                       (size_t)off, (const char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is used without it */
    ts_pretok *t = calloc(1, sizeof *t);
    if (!t) {
        pcre2_code_free(re);
        return ts_errf(err, errlen, "out of memory");
    }
    t->re = re;
    *out = t;
    return 0;
}

void ts_pretok_free(ts_pretok *p) {
    if (!p) return;
    pcre2_code_free(p->re);
    free(p);
}

int ts_pretok_split(const ts_pretok *p, const char *s, size_t n,
                    void (*piece)(void *ctx, size_t start, size_t len), void *ctx, char *err, size_t errlen) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(p->re, NULL);
    if (!md) return ts_errf(err, errlen, "out of memory in the pre-tokenizer");
    size_t gap = 0, from = 0; /* s[gap..) not yet emitted; the next search starts at from */
    int rc = 0;
    while (from < n) {
        int r = pcre2_match(p->re, (PCRE2_SPTR)s, n, from, PCRE2_NO_UTF_CHECK, md, NULL);
        if (r == PCRE2_ERROR_NOMATCH) break;
        if (r < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(r, msg, sizeof msg);
            rc = ts_errf(err, errlen, "pre-tokenizer regex failed at byte %zu: %s", from, (const char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (b == a) { /* no pattern here matches empty text; be safe: step over one character */
            uint32_t cp;
            int l = ts_utf8_char((const unsigned char *)s + a, n - a, &cp);
            from = a + (l > 0 ? (size_t)l : 1);
            continue;
        }
        if (a > gap) piece(ctx, gap, a - gap);
        piece(ctx, a, b - a);
        gap = from = b;
    }
    if (!rc && gap < n) piece(ctx, gap, n - gap);
    pcre2_match_data_free(md);
    return rc;
}

int ts_pretokenize(const char *pre, const char *s, size_t n,
                   void (*piece)(void *ctx, size_t start, size_t len), void *ctx, char *err, size_t errlen) {
    ts_pretok *p;
    if (ts_pretok_new(pre, &p, err, errlen)) return -1;
    int rc = ts_pretok_split(p, s, n, piece, ctx, err, errlen);
    ts_pretok_free(p);
    return rc;
}
