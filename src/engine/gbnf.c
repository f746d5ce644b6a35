/* GBNF text to a byte grammar (see gbnf.h): a recursive-descent parser over the text. */
#include "engine/gbnf.h"

#include "common/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RULES 4096
#define MAX_NEST 64

typedef struct named {
    char name[64];
    int rule;
    bool defined;
} named;

typedef struct px {
    const char *s, *e, *p;
    ts_grammar *g;
    named *names;
    int n_names;
    char *err;
    size_t errlen;
    bool failed;
} px;

static int line_of(const px *x) {
    int l = 1;
    for (const char *q = x->s; q < x->p && q < x->e; q++) l += *q == '\n';
    return l;
}

static int fail(px *x, const char *what) {
    if (!x->failed) {
        char near[24] = "";
        size_t k = 0;
        for (const char *q = x->p; q < x->e && k < 16 && *q != '\n'; q++) near[k++] = *q;
        near[k] = 0;
        ts_errf(x->err, x->errlen, "grammar line %d: %s (near \"%s\")", line_of(x), what, near);
    }
    x->failed = true;
    return -1;
}

static bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks, newlines and comments. */
static void space(px *x) {
    while (x->p < x->e) {
        if (*x->p == '#')
            while (x->p < x->e && *x->p != '\n') x->p++;
        else if (*x->p == ' ' || *x->p == '\t' || *x->p == '\n' || *x->p == '\r')
            x->p++;
        else
            break;
    }
}

/* Whether a new rule ("name ::=") starts here. */
static bool rule_starts(const px *x) {
    const char *q = x->p;
    while (q < x->e && is_name_char(*q)) q++;
    if (q == x->p) return false;
    while (q < x->e && (*q == ' ' || *q == '\t')) q++;
    return x->e - q >= 3 && !memcmp(q, "::=", 3);
}

static int rule_named(px *x, const char *s, size_t n, bool define) {
    if (n >= sizeof x->names[0].name) return fail(x, "a rule name longer than 63 characters");
    for (int i = 0; i < x->n_names; i++)
        if (strlen(x->names[i].name) == n && !memcmp(x->names[i].name, s, n)) {
            if (define && x->names[i].defined) return fail(x, "a rule defined twice");
            x->names[i].defined |= define;
            return x->names[i].rule;
        }
    if (x->n_names == MAX_RULES) return fail(x, "more than 4096 named rules");
    named *nm = &x->names[x->n_names++];
    memcpy(nm->name, s, n), nm->name[n] = 0;
    nm->defined = define;
    if ((nm->rule = ts_grammar_rule(x->g)) < 0) return fail(x, "more than 100000 rules, or out of memory");
    return nm->rule;
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* One character of a literal or class: its code point (escapes decoded), or −1. */
static long char_at(px *x) {
    if (x->p >= x->e) return fail(x, "the text ends inside a literal or a class"), -1;
    unsigned char c = (unsigned char)*x->p++;
    if (c != '\\') {
        if (c < 0x80) return c;
        int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1; /* UTF-8 in the grammar text */
        long cp = len == 1 ? c : c & (0x3f >> (len - 1));
        for (int i = 1; i < len && x->p < x->e; i++) cp = (cp << 6) | (*x->p++ & 0x3f);
        return cp;
    }
    if (x->p >= x->e) return fail(x, "an escape at the end of the text"), -1;
    char k = *x->p++;
    int digits = k == 'x' ? 2 : k == 'u' ? 4 : k == 'U' ? 8 : 0;
    if (digits) {
        long v = 0;
        for (int i = 0; i < digits; i++) {
            int h = x->p < x->e ? hexval(*x->p) : -1;
            if (h < 0) return fail(x, "a bad hexadecimal escape"), -1;
            v = v * 16 + h, x->p++;
        }
        return v;
    }
    switch (k) {
    case 'n':
        return '\n';
    case 'r':
        return '\r';
    case 't':
        return '\t';
    case '\\':
    case '"':
    case '[':
    case ']':
    case '-':
    case '^':
    case '\'':
        return k;
    }
    return fail(x, "an unknown escape"), -1;
}

static int parse_alternates(px *x, int rule, int nest);

/* X{min,max} as a rule (max < 0: unbounded). */
static int repeat(px *x, int item, int min, int max) {
    ts_gseq s = {0};
    int tail = ts_grammar_rule(x->g), r;
    ts_grammar_alt(x->g, tail, &s);
    if (max < 0) {
        ts_gseq_ref(&s, item), ts_gseq_ref(&s, tail), ts_grammar_alt(x->g, tail, &s);
    } else {
        for (int k = 1; k <= max - min; k++) {
            int t = ts_grammar_rule(x->g);
            ts_grammar_alt(x->g, t, &s);
            ts_gseq_ref(&s, item), ts_gseq_ref(&s, tail), ts_grammar_alt(x->g, t, &s);
            tail = t;
        }
    }
    r = ts_grammar_rule(x->g);
    for (int i = 0; i < min; i++) ts_gseq_ref(&s, item);
    ts_gseq_ref(&s, tail);
    if (ts_grammar_alt(x->g, r, &s)) fail(x, "more than 100000 rules, or out of memory");
    ts_gseq_free(&s);
    return r;
}

static int number(px *x) {
    int v = 0;
    if (x->p >= x->e || *x->p < '0' || *x->p > '9') return fail(x, "a number was expected");
    while (x->p < x->e && *x->p >= '0' && *x->p <= '9' && v < 100000) v = v * 10 + (*x->p++ - '0');
    if (v >= 100000) return fail(x, "a repetition count above 99999");
    return v;
}

/* One element into a one-element rule (so postfix operators can repeat it). */
static int element(px *x, int nest) {
    ts_gseq s = {0};
    int r = ts_grammar_rule(x->g);
    char c = *x->p;
    if (c == '"') {
        x->p++;
        while (!x->failed && x->p < x->e && *x->p != '"') {
            long cp = char_at(x);
            char b[4];
            size_t k = cp < 0x80    ? (b[0] = (char)cp, 1)
                       : cp < 0x800 ? (b[0] = (char)(0xc0 | (cp >> 6)), b[1] = (char)(0x80 | (cp & 63)), 2)
                       : cp < 0x10000
                           ? (b[0] = (char)(0xe0 | (cp >> 12)), b[1] = (char)(0x80 | ((cp >> 6) & 63)),
                              b[2] = (char)(0x80 | (cp & 63)), 3)
                           : (b[0] = (char)(0xf0 | (cp >> 18)), b[1] = (char)(0x80 | ((cp >> 12) & 63)),
                              b[2] = (char)(0x80 | ((cp >> 6) & 63)), b[3] = (char)(0x80 | (cp & 63)), 4);
            if (cp >= 0) ts_gseq_lit(x->g, &s, b, k);
        }
        if (x->p >= x->e) fail(x, "a literal is not closed");
        x->p++;
    } else if (c == '[') {
        x->p++;
        bool neg = x->p < x->e && *x->p == '^';
        if (neg) x->p++;
        uint64_t bits[4] = {0};
        while (!x->failed && x->p < x->e && *x->p != ']') {
            long lo = char_at(x), hi = lo;
            if (x->p + 1 < x->e && *x->p == '-' && x->p[1] != ']') x->p++, hi = char_at(x);
            if (lo < 0 || hi < 0) break;
            if (hi > 0x7f) {
                fail(
                    x,
                    "a character class with non-ASCII characters (not supported: the grammar runs on bytes)");
                break;
            }
            for (long b = lo; b <= hi; b++) bits[b >> 6] |= 1ull << (b & 63);
        }
        if (x->p >= x->e) fail(x, "a character class is not closed");
        x->p++;
        if (neg)
            for (int i = 0; i < 4; i++) bits[i] = ~bits[i];
        ts_gseq_class(&s, ts_grammar_class(x->g, bits));
    } else if (c == '.') {
        x->p++;
        ts_gseq_class(&s, ts_grammar_range(x->g, 0, 255));
    } else if (c == '(') {
        x->p++;
        if (nest >= MAX_NEST) return ts_gseq_free(&s), fail(x, "groups nested more than 64 deep");
        int sub = ts_grammar_rule(x->g);
        parse_alternates(x, sub, nest + 1);
        space(x);
        if (!x->failed && (x->p >= x->e || *x->p != ')')) fail(x, "')' was expected");
        x->p++;
        ts_gseq_ref(&s, sub);
    } else if (is_name_char(c)) {
        const char *b = x->p;
        while (x->p < x->e && is_name_char(*x->p)) x->p++;
        ts_gseq_ref(&s, rule_named(x, b, (size_t)(x->p - b), false));
    } else {
        ts_gseq_free(&s);
        return fail(x, "a literal, a class, a rule name or '(' was expected");
    }
    if (ts_grammar_alt(x->g, r, &s)) fail(x, "more than 100000 rules, or out of memory");
    ts_gseq_free(&s);
    /* postfix operators */
    for (;;) {
        if (x->p >= x->e) break;
        char o = *x->p;
        if (o == '*')
            x->p++, r = repeat(x, r, 0, -1);
        else if (o == '+')
            x->p++, r = repeat(x, r, 1, -1);
        else if (o == '?')
            x->p++, r = repeat(x, r, 0, 1);
        else if (o == '{') {
            x->p++;
            space(x);
            int min = number(x), max = min;
            space(x);
            if (x->p < x->e && *x->p == ',') {
                x->p++;
                space(x);
                max = x->p < x->e && *x->p == '}' ? -1 : number(x);
                space(x);
            }
            if (x->p >= x->e || *x->p != '}' || (max >= 0 && max < min))
                return fail(x, "a bad {m,n} repetition");
            x->p++;
            r = repeat(x, r, min, max);
        } else
            break;
    }
    return x->failed ? -1 : r;
}

/* alternatives of sequences into rule, up to ')' (nested) or the next rule / the end (top level). */
static int parse_alternates(px *x, int rule, int nest) {
    ts_gseq s = {0};
    for (;;) {
        space(x);
        bool end = x->p >= x->e || (nest == 0 && rule_starts(x)) || (nest > 0 && *x->p == ')');
        if (end || *x->p == '|') {
            if (ts_grammar_alt(x->g, rule, &s)) fail(x, "more than 100000 rules, or out of memory");
            if (end || x->failed) break;
            x->p++;
            continue;
        }
        int e = element(x, nest);
        if (e < 0) break;
        ts_gseq_ref(&s, e);
    }
    ts_gseq_free(&s);
    return x->failed ? -1 : 0;
}

int ts_gbnf_grammar(const char *text, size_t n, ts_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    px x = {.s = text, .e = text + n, .p = text, .g = ts_grammar_new(), .err = err, .errlen = errlen};
    x.names = calloc(MAX_RULES, sizeof *x.names);
    if (!x.g || !x.names) {
        ts_grammar_free(x.g), free(x.names);
        return ts_errf(err, errlen, "out of memory for a grammar");
    }
    if (memchr(text, 0, n)) fail(&x, "the grammar holds a NUL byte");
    for (space(&x); !x.failed && x.p < x.e; space(&x)) {
        const char *b = x.p;
        while (x.p < x.e && is_name_char(*x.p)) x.p++;
        if (x.p == b || !rule_starts(&(px){.p = b, .e = x.e})) {
            x.p = b;
            fail(&x, "a rule 'name ::= ...' was expected");
            break;
        }
        int r = rule_named(&x, b, (size_t)(x.p - b), true);
        while (x.p < x.e && *x.p != ':') x.p++;
        x.p += 3;
        if (r >= 0) parse_alternates(&x, r, 0);
    }
    int root = -1;
    for (int i = 0; i < x.n_names && !x.failed; i++) {
        if (!x.names[i].defined) {
            ts_errf(err, errlen, "the grammar uses the rule '%s' but does not define it", x.names[i].name);
            x.failed = true;
        }
        if (!strcmp(x.names[i].name, "root")) root = x.names[i].rule;
    }
    if (!x.failed && root < 0) ts_errf(err, errlen, "the grammar has no 'root' rule"), x.failed = true;
    if (!x.failed && ts_grammar_finish(x.g, root, err, errlen)) x.failed = true;
    free(x.names);
    if (x.failed) {
        ts_grammar_free(x.g);
        return -1;
    }
    *out = x.g;
    return 0;
}
