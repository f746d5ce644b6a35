/* The Jinja parser: template text → syntax tree (jinja_internal.h).
 *
 * The lexer follows Jinja2's with transformers' settings: text runs up to the next "{{", "{%" or
 * "{#"; "{{-"/"{%-"/"{#-" strip the whitespace before a tag and "-}}"/"-%}"/"-#}" the whitespace
 * after it; trim_blocks drops the newline right after "%}" and "#}"; lstrip_blocks drops the
 * spaces and tabs between the start of a line and "{%" or "{#" (unless written "{%+"). Newlines
 * (\r\n, \r) in text and string literals become \n, and one trailing newline of the template is
 * dropped (keep_trailing_newline off). Inside a tag, an end marker counts only outside brackets.
 * The grammar and its precedences are Jinja2's (parser.py): conditional < or < and < not <
 * comparison < + - < ~ < * / // % < ** < unary minus < postfix (. [] ()) and filters/tests. */
#include "tokenizer/jinja_internal.h"

#include "common/error.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { T_EOF, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_END } ttype;

typedef struct parser {
    jarena *a;
    const char *src;
    size_t len, pos;
    int line;           /* line of pos */
    bool line_starting; /* the last tag ended a line (for lstrip_blocks) */
    char tag;           /* '{' or '%' while inside a tag, 0 in text */
    int brackets;       /* open ( [ { inside the tag */
    int nest;           /* nesting of blocks and expressions */
    /* the current token */
    ttype t;
    jstr tok; /* its text (T_STR: the unescaped value) */
    int64_t ival;
    double fval;
    int tline;
    char found[80]; /* the current token, described for error messages */
} parser;

#define FAIL(p, ...) jfail((p)->a, (p)->tline, __VA_ARGS__)

static bool tok_is(const parser *p, ttype t, const char *s) {
    return p->t == t && jstr_eq(p->tok, s);
}
static bool op_is(const parser *p, const char *s) {
    return tok_is(p, T_OP, s);
}
static bool name_is(const parser *p, const char *s) {
    return tok_is(p, T_NAME, s);
}

static void advance_char(parser *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p->src[p->pos++] == '\n') p->line++;
}

/* Consumes whitespace after a '-' end marker (Python's \s*). */
static void skip_all_space(parser *p) {
    size_t k;
    while (p->pos < p->len && (k = py_space_len(p->src + p->pos, p->len - p->pos))) advance_char(p, k);
}

/* Copies s[0..n) with \r\n and \r turned into \n. */
static jstr normalize_newlines(parser *p, const char *s, size_t n) {
    char *o = jalloc(p->a, n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\r') {
            o[k++] = '\n';
            if (i + 1 < n && s[i + 1] == '\n') i++;
        } else
            o[k++] = s[i];
    }
    return (jstr){o, k};
}

static void append_utf8(char *o, size_t *k, uint32_t c) {
    if (c < 0x80)
        o[(*k)++] = (char)c;
    else if (c < 0x800)
        o[(*k)++] = (char)(0xC0 | c >> 6), o[(*k)++] = (char)(0x80 | (c & 63));
    else if (c < 0x10000)
        o[(*k)++] = (char)(0xE0 | c >> 12), o[(*k)++] = (char)(0x80 | (c >> 6 & 63)),
        o[(*k)++] = (char)(0x80 | (c & 63));
    else
        o[(*k)++] = (char)(0xF0 | c >> 18), o[(*k)++] = (char)(0x80 | (c >> 12 & 63)),
        o[(*k)++] = (char)(0x80 | (c >> 6 & 63)), o[(*k)++] = (char)(0x80 | (c & 63));
}

static int hexval(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A string literal's value: Python's unicode-escape decoding of its body (unknown escapes stay). */
static jstr unescape(parser *p, jstr body) {
    jstr s = normalize_newlines(p, body.s, body.n);
    char *o = jalloc(p->a, s.n + 1);
    size_t k = 0;
    for (size_t i = 0; i < s.n; i++) {
        if (s.s[i] != '\\' || i + 1 == s.n) {
            o[k++] = s.s[i];
            continue;
        }
        char c = s.s[++i];
        const char *simple = strchr("n\nt\tr\r\\\\''\"\"a\ab\bf\fv\v", c);
        if (c && simple && (simple - "n\nt\tr\r\\\\''\"\"a\ab\bf\fv\v") % 2 == 0) {
            o[k++] = simple[1];
        } else if (c == '\n') {
            /* a backslash-newline continues the line */
        } else if (c == 'x' || c == 'u' || c == 'U') {
            size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (size_t j = 0; j < digits; j++) {
                int h = i + 1 + j < s.n ? hexval(s.s[i + 1 + j]) : -1;
                if (h < 0) FAIL(p, "a string literal has a truncated \\%c escape", c);
                v = v * 16 + (uint32_t)h;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v < 0xE000))
                FAIL(p, "a string literal has an escape (\\%c) outside Unicode's scalar values", c);
            i += digits;
            append_utf8(o, &k, v);
        } else if (c >= '0' && c <= '7') {
            uint32_t v = (uint32_t)(c - '0');
            for (int j = 0; j < 2 && i + 1 < s.n && s.s[i + 1] >= '0' && s.s[i + 1] <= '7'; j++)
                v = v * 8 + (uint32_t)(s.s[++i] - '0');
            append_utf8(o, &k, v);
        } else {
            o[k++] = '\\', o[k++] = c;
        }
    }
    return (jstr){o, k};
}

/* Reads the next token inside a tag into p->t. */
static void next(parser *p) {
    while (p->pos < p->len && strchr(" \t\r\n\f\v", p->src[p->pos])) advance_char(p, 1);
    p->tline = p->line;
    const char *s = p->src + p->pos;
    size_t left = p->len - p->pos;
    if (!left) {
        p->t = T_EOF;
        return;
    }
    char close = p->tag == '{' ? '}' : '%';
    /* the end marker, with its whitespace control, outside brackets */
    if (p->brackets == 0) {
        bool minus = left >= 3 && s[0] == '-' && s[1] == close && s[2] == '}';
        if (minus || (left >= 2 && s[0] == close && s[1] == '}')) {
            advance_char(p, minus ? 3 : 2);
            if (minus)
                skip_all_space(p);
            else if (p->tag == '%' && p->pos < p->len && (p->src[p->pos] == '\n' || p->src[p->pos] == '\r'))
                advance_char(
                    p, p->src[p->pos] == '\r' && p->pos + 1 < p->len && p->src[p->pos + 1] == '\n' ? 2 : 1);
            p->line_starting = p->pos > 0 && p->src[p->pos - 1] == '\n';
            p->t = T_END;
            return;
        }
    }
    if (isalpha((unsigned char)s[0]) || s[0] == '_') {
        size_t n = 1;
        while (n < left && (isalnum((unsigned char)s[n]) || s[n] == '_')) n++;
        p->t = T_NAME, p->tok = (jstr){s, n};
        advance_char(p, n);
        return;
    }
    if (isdigit((unsigned char)s[0])) {
        size_t n = 0;
        bool is_float = false;
        char buf[64];
        size_t k = 0;
        while (n < left &&
               (isdigit((unsigned char)s[n]) || s[n] == '_' || s[n] == '.' || s[n] == 'e' || s[n] == 'E' ||
                ((s[n] == '+' || s[n] == '-') && (s[n - 1] == 'e' || s[n - 1] == 'E')))) {
            if (s[n] == '.' && (is_float || n + 1 >= left || !isdigit((unsigned char)s[n + 1]))) break;
            if (s[n] == '.' || s[n] == 'e' || s[n] == 'E') is_float = true;
            if (s[n] != '_' && k + 1 < sizeof buf) buf[k++] = s[n];
            n++;
        }
        buf[k] = 0;
        char *end;
        if (is_float)
            p->t = T_FLOAT, p->fval = strtod(buf, &end);
        else
            p->t = T_INT, p->ival = strtoll(buf, &end, 10);
        if (*end || k + 1 >= sizeof buf) FAIL(p, "the number '%.*s' is malformed or too long", (int)n, s);
        p->tok = (jstr){s, n};
        advance_char(p, n);
        return;
    }
    if (s[0] == '\'' || s[0] == '"') {
        size_t n = 1;
        while (n < left && s[n] != s[0]) n += s[n] == '\\' && n + 1 < left ? 2 : 1;
        if (n >= left) FAIL(p, "a string literal is not closed");
        p->t = T_STR, p->tok = unescape(p, (jstr){s + 1, n - 1});
        advance_char(p, n + 1);
        return;
    }
    static const char *const ops[] = {"==", "!=", ">=", "<=", "//", "**", "+", "-", "*", "/", "%", "~", "<",
                                      ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        size_t n = strlen(ops[i]);
        if (left >= n && !memcmp(s, ops[i], n)) {
            p->t = T_OP, p->tok = (jstr){ops[i], n};
            if (n == 1 && strchr("([{", s[0])) p->brackets++;
            if (n == 1 && strchr(")]}", s[0]) && p->brackets > 0) p->brackets--;
            advance_char(p, n);
            return;
        }
    }
    FAIL(p, "unexpected character '%c' in a tag", s[0]);
}

static const char *found(parser *p) {
    if (p->t == T_EOF) return "the end of the template (a tag is not closed)";
    if (p->t == T_END) return "the end of the tag";
    snprintf(p->found, sizeof p->found, "'%.*s'", (int)(p->tok.n > 40 ? 40 : p->tok.n), p->tok.s);
    return p->found;
}

static void expect_op(parser *p, const char *op) {
    if (!op_is(p, op)) FAIL(p, "expected '%s' but found %s", op, found(p));
    next(p);
}

static jstr expect_name(parser *p, const char *what) {
    if (p->t != T_NAME) FAIL(p, "expected %s but found %s", what, found(p));
    jstr n = p->tok;
    next(p);
    return n;
}

static void expect_end(parser *p) {
    if (p->t != T_END) FAIL(p, "expected the end of the tag but found %s", found(p));
}

static jnode *node(parser *p, jnkind k) {
    jnode *n = jalloc(p->a, sizeof *n);
    n->kind = (uint8_t)k, n->line = p->tline;
    return n;
}

/* A growable list of nodes (copied into the arena when done). */
typedef struct nlist {
    const jnode **v;
    jstr *kw;
    size_t n, cap;
} nlist;

static void nlist_add(parser *p, nlist *l, const jnode *x, jstr kw) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 8;
        const jnode **v = jalloc(p->a, cap * sizeof *v);
        jstr *k = jalloc(p->a, cap * sizeof *k);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v), memcpy(k, l->kw, l->n * sizeof *k);
        l->v = v, l->kw = k, l->cap = cap;
    }
    l->kw[l->n] = kw;
    l->v[l->n++] = x;
}

static void enter(parser *p) {
    if (++p->nest > TS_JINJA_MAX_NEST)
        FAIL(p, "the template nests blocks or expressions more than %d deep", TS_JINJA_MAX_NEST);
}

/* ---- expressions --------------------------------------------------------------------------- */

static const jnode *parse_expr(parser *p);
static const jnode *parse_unary(parser *p, bool with_filter);
static const jnode *parse_or(parser *p);

/* Arguments of a call, filter or test, after its '(' up to and including ')'. */
static void parse_args(parser *p, jnode *n) {
    nlist l = {0};
    while (!op_is(p, ")")) {
        if (l.n) expect_op(p, ",");
        if (op_is(p, ")")) break;
        jstr kw = {0};
        if (p->t == T_NAME) {
            /* a keyword argument: name '=' (peek by saving the lexer state) */
            parser save = *p;
            jstr name = p->tok;
            next(p);
            if (op_is(p, "=")) {
                next(p);
                kw = name;
            } else
                *p = save;
        }
        if (!kw.s && l.n && l.kw[l.n - 1].s) FAIL(p, "a positional argument follows a keyword argument");
        nlist_add(p, &l, parse_expr(p), kw);
    }
    next(p);
    n->list = l.v, n->kw = l.kw, n->n = l.n;
}

static const jnode *parse_primary(parser *p) {
    jnode *n;
    if (p->t == T_NAME) {
        if (name_is(p, "true") || name_is(p, "True") || name_is(p, "false") || name_is(p, "False")) {
            n = node(p, JE_LITERAL);
            n->lit = (jv){.kind = JV_BOOL, .u.b = p->tok.s[0] == 't' || p->tok.s[0] == 'T'};
        } else if (name_is(p, "none") || name_is(p, "None")) {
            n = node(p, JE_LITERAL);
            n->lit = (jv){.kind = JV_NONE};
        } else {
            n = node(p, JE_NAME);
            n->name = p->tok;
        }
        next(p);
        return n;
    }
    if (p->t == T_STR) {
        /* adjacent literals join, as in Python */
        n = node(p, JE_LITERAL);
        jstr s = p->tok;
        next(p);
        while (p->t == T_STR) {
            char *j = jalloc(p->a, s.n + p->tok.n + 1);
            memcpy(j, s.s, s.n), memcpy(j + s.n, p->tok.s, p->tok.n);
            s = (jstr){j, s.n + p->tok.n};
            next(p);
        }
        n->lit = jv_str(s);
        return n;
    }
    if (p->t == T_INT || p->t == T_FLOAT) {
        n = node(p, JE_LITERAL);
        n->lit =
            p->t == T_INT ? (jv){.kind = JV_INT, .u.i = p->ival} : (jv){.kind = JV_FLOAT, .u.f = p->fval};
        next(p);
        return n;
    }
    if (op_is(p, "(")) {
        next(p);
        if (op_is(p, ")")) {
            next(p);
            return node(p, JE_TUPLE);
        }
        const jnode *first = parse_expr(p);
        if (!op_is(p, ",")) {
            expect_op(p, ")");
            return first;
        }
        n = node(p, JE_TUPLE);
        nlist l = {0};
        nlist_add(p, &l, first, (jstr){0});
        while (op_is(p, ",")) {
            next(p);
            if (op_is(p, ")")) break;
            nlist_add(p, &l, parse_expr(p), (jstr){0});
        }
        expect_op(p, ")");
        n->list = l.v, n->n = l.n;
        return n;
    }
    if (op_is(p, "[") || op_is(p, "{")) {
        bool dict = op_is(p, "{");
        n = node(p, dict ? JE_DICT : JE_LIST);
        next(p);
        nlist l = {0};
        while (!op_is(p, dict ? "}" : "]")) {
            if (l.n) expect_op(p, ",");
            if (op_is(p, dict ? "}" : "]")) break;
            nlist_add(p, &l, parse_expr(p), (jstr){0});
            if (dict) {
                expect_op(p, ":");
                nlist_add(p, &l, parse_expr(p), (jstr){0});
            }
        }
        next(p);
        n->list = l.v, n->n = l.n;
        return n;
    }
    if (p->t == T_END || p->t == T_EOF) FAIL(p, "an expression is missing before %s", found(p));
    FAIL(p, "unexpected %s in an expression", found(p));
}

static const jnode *parse_postfix(parser *p, const jnode *x) {
    for (;;) {
        jnode *n;
        if (op_is(p, ".")) {
            next(p);
            n = node(p, JE_ATTR);
            n->a = x;
            if (p->t == T_INT) { /* x.0 is x[0] */
                n->kind = JE_ITEM;
                jnode *i = node(p, JE_LITERAL);
                i->lit = (jv){.kind = JV_INT, .u.i = p->ival};
                n->b = i;
                next(p);
            } else
                n->attr = expect_name(p, "an attribute name after '.'");
        } else if (op_is(p, "[")) {
            next(p);
            const jnode *parts[3] = {0};
            int k = 0;
            bool slice = false;
            for (;;) {
                if (!op_is(p, ":") && !op_is(p, "]")) parts[k] = parse_expr(p);
                if (op_is(p, ":") && k < 2) {
                    slice = true, k++;
                    next(p);
                    continue;
                }
                break;
            }
            expect_op(p, "]");
            n = node(p, slice ? JE_SLICE : JE_ITEM);
            if (!slice && !parts[0]) FAIL(p, "a subscript [] is empty");
            n->a = x, n->b = parts[0], n->c = parts[1], n->d = parts[2];
        } else if (op_is(p, "(")) {
            next(p);
            n = node(p, JE_CALL);
            n->a = x;
            parse_args(p, n);
        } else
            return x;
        x = n;
    }
}

static const jnode *parse_filters_and_tests(parser *p, const jnode *x) {
    for (;;) {
        jnode *n;
        if (op_is(p, "|")) {
            next(p);
            n = node(p, JE_FILTER);
            n->a = x;
            n->name = expect_name(p, "a filter name after '|'");
            if (!jinja_has_filter(n->name))
                FAIL(p, "the filter '%.*s' is not supported by turbospark's Jinja engine", (int)n->name.n,
                     n->name.s);
            if (op_is(p, "(")) {
                next(p);
                parse_args(p, n);
            }
        } else if (name_is(p, "is")) {
            next(p);
            n = node(p, JE_TEST);
            n->a = x;
            if (name_is(p, "not")) n->op = 1, next(p);
            n->name = expect_name(p, "a test name after 'is'");
            if (!jinja_has_test(n->name))
                FAIL(p, "the test '%.*s' is not supported by turbospark's Jinja engine", (int)n->name.n,
                     n->name.s);
            if (op_is(p, "(")) {
                next(p);
                parse_args(p, n);
            } else if ((p->t == T_NAME && !name_is(p, "else") && !name_is(p, "or") && !name_is(p, "and") &&
                        !name_is(p, "if") && !name_is(p, "is") && !name_is(p, "in") && !name_is(p, "not")) ||
                       p->t == T_STR || p->t == T_INT || p->t == T_FLOAT || op_is(p, "[") || op_is(p, "{")) {
                /* one argument without parentheses: `x is divisibleby 3`, `x is sameas false` */
                nlist l = {0};
                nlist_add(p, &l, parse_postfix(p, parse_primary(p)), (jstr){0});
                n->list = l.v, n->kw = l.kw, n->n = l.n;
            }
        } else
            return x;
        x = n;
    }
}

static const jnode *parse_unary(parser *p, bool with_filter) {
    enter(p);
    const jnode *x;
    if (op_is(p, "-") || op_is(p, "+")) {
        jnode *n = node(p, op_is(p, "-") ? JE_NEG : JE_POS);
        next(p);
        n->a = parse_unary(p, false);
        x = n;
    } else
        x = parse_primary(p);
    x = parse_postfix(p, x);
    if (with_filter) x = parse_filters_and_tests(p, x);
    p->nest--;
    return x;
}

static const jnode *binary(parser *p, int op, const jnode *l, const jnode *r) {
    jnode *n = node(p, JE_BINARY);
    n->op = (uint8_t)op, n->a = l, n->b = r;
    return n;
}

static const jnode *parse_pow(parser *p) {
    const jnode *x = parse_unary(p, true);
    while (op_is(p, "**")) {
        next(p);
        x = binary(p, JOP_POW, x, parse_unary(p, true));
    }
    return x;
}

static const jnode *parse_math2(parser *p) {
    const jnode *x = parse_pow(p);
    for (;;) {
        int op = op_is(p, "*")    ? JOP_MUL
                 : op_is(p, "/")  ? JOP_DIV
                 : op_is(p, "//") ? JOP_FLOORDIV
                 : op_is(p, "%")  ? JOP_MOD
                                  : 0;
        if (!op) return x;
        next(p);
        x = binary(p, op, x, parse_pow(p));
    }
}

static const jnode *parse_concat(parser *p) {
    const jnode *x = parse_math2(p);
    while (op_is(p, "~")) {
        next(p);
        x = binary(p, JOP_CONCAT, x, parse_math2(p));
    }
    return x;
}

static const jnode *parse_math1(parser *p) {
    const jnode *x = parse_concat(p);
    for (;;) {
        int op = op_is(p, "+") ? JOP_ADD : op_is(p, "-") ? JOP_SUB : 0;
        if (!op) return x;
        next(p);
        x = binary(p, op, x, parse_concat(p));
    }
}

static const jnode *parse_compare(parser *p) {
    const jnode *x = parse_math1(p);
    for (;;) {
        int op = op_is(p, "==")     ? JOP_EQ
                 : op_is(p, "!=")   ? JOP_NE
                 : op_is(p, "<")    ? JOP_LT
                 : op_is(p, "<=")   ? JOP_LE
                 : op_is(p, ">")    ? JOP_GT
                 : op_is(p, ">=")   ? JOP_GE
                 : name_is(p, "in") ? JOP_IN
                                    : 0;
        if (!op && name_is(p, "not")) {
            parser save = *p;
            next(p);
            if (!name_is(p, "in")) {
                *p = save;
                return x;
            }
            op = JOP_NOT_IN;
        }
        if (!op) return x;
        next(p);
        /* Jinja chains comparisons (a < b < c); one comparison is all templates use */
        x = binary(p, op, x, parse_math1(p));
    }
}

static const jnode *parse_not(parser *p) {
    if (name_is(p, "not")) {
        enter(p);
        jnode *n = node(p, JE_NOT);
        next(p);
        n->a = parse_not(p);
        p->nest--;
        return n;
    }
    return parse_compare(p);
}

static const jnode *parse_and(parser *p) {
    const jnode *x = parse_not(p);
    while (name_is(p, "and")) {
        jnode *n = node(p, JE_AND);
        next(p);
        n->a = x, n->b = parse_not(p);
        x = n;
    }
    return x;
}

static const jnode *parse_or(parser *p) {
    const jnode *x = parse_and(p);
    while (name_is(p, "or")) {
        jnode *n = node(p, JE_OR);
        next(p);
        n->a = x, n->b = parse_and(p);
        x = n;
    }
    return x;
}

static const jnode *parse_expr(parser *p) {
    enter(p);
    const jnode *x = parse_or(p);
    while (name_is(p, "if")) {
        jnode *n = node(p, JE_COND);
        next(p);
        n->b = x, n->a = parse_or(p);
        if (name_is(p, "else")) {
            next(p);
            n->c = parse_expr(p);
        }
        x = n;
    }
    p->nest--;
    return x;
}

/* ---- statements ---------------------------------------------------------------------------- */

static const jnode *parse_body(parser *p, const char *const *stops, jstr *stopped);

/* Text up to the next tag; reads the tag's opening and returns its kind ('{', '%', '#') or 0 at
 * the end of the template. */
static char scan_text(parser *p, nlist *out) {
    const char *s = p->src;
    size_t start = p->pos, i = start;
    char kind = 0;
    for (; i + 1 < p->len; i++)
        if (s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')) {
            kind = s[i + 1];
            break;
        }
    if (!kind) i = p->len;
    size_t end = i; /* the text is s[start..end) */
    char sign = kind && i + 2 < p->len && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
    if (sign == '-') {
        size_t k;
        while (end > start && (k = py_space_before(s + start, end - start))) end -= k;
    } else if (sign != '+' && (kind == '%' || kind == '#')) {
        size_t l_pos = end;
        while (l_pos > start && s[l_pos - 1] != '\n') l_pos--;
        if (l_pos > start || p->line_starting) {
            size_t j = l_pos, k;
            while (j < end && s[j] != '\n' && (k = py_space_len(s + j, end - j))) j += k;
            if (j == end && end > l_pos) end = l_pos;
        }
    }
    if (end > start) {
        jnode *t = node(p, JN_TEXT);
        t->name = normalize_newlines(p, s + start, end - start);
        nlist_add(p, out, t, (jstr){0});
    }
    advance_char(p, i - start);
    if (!kind) return 0;
    p->tline = p->line;
    advance_char(p, sign ? 3 : 2);
    p->line_starting = false;
    return kind;
}

static void skip_comment(parser *p) {
    int line = p->line;
    const char *e = NULL;
    for (size_t i = p->pos; i + 1 < p->len; i++)
        if (p->src[i] == '#' && p->src[i + 1] == '}') {
            e = p->src + i;
            break;
        }
    if (!e) jfail(p->a, line, "a comment {# is not closed");
    bool minus = e > p->src + p->pos && e[-1] == '-';
    advance_char(p, (size_t)(e - (p->src + p->pos)) + 2);
    if (minus)
        skip_all_space(p);
    else if (p->pos < p->len && (p->src[p->pos] == '\n' || p->src[p->pos] == '\r'))
        advance_char(p, p->src[p->pos] == '\r' && p->pos + 1 < p->len && p->src[p->pos + 1] == '\n' ? 2 : 1);
    p->line_starting = p->pos > 0 && p->src[p->pos - 1] == '\n';
}

static const char *const k_if_stops[] = {"elif", "else", "endif", NULL};

static const jnode *parse_if(parser *p) {
    jnode *n = node(p, JN_IF);
    n->a = parse_expr(p);
    expect_end(p);
    jstr stop;
    n->b = parse_body(p, k_if_stops, &stop);
    if (jstr_eq(stop, "elif")) {
        n->c = parse_if(p);
    } else if (jstr_eq(stop, "else")) {
        expect_end(p);
        static const char *const endif[] = {"endif", NULL};
        n->c = parse_body(p, endif, &stop);
        expect_end(p);
    } else
        expect_end(p);
    return n;
}

static const jnode *parse_for(parser *p) {
    jnode *n = node(p, JN_FOR);
    nlist targets = {0};
    do {
        if (targets.n) next(p);
        jnode *t = node(p, JE_NAME);
        t->name = expect_name(p, "a loop variable after 'for'");
        nlist_add(p, &targets, t, (jstr){0});
    } while (op_is(p, ","));
    n->list = targets.v, n->n = targets.n;
    if (!name_is(p, "in")) FAIL(p, "expected 'in' after the loop variables of 'for'");
    next(p);
    n->a = parse_or(p); /* not parse_expr: `if` here filters the loop */
    if (name_is(p, "if")) {
        next(p);
        n->d = parse_expr(p);
    }
    if (name_is(p, "recursive")) FAIL(p, "recursive for loops are not supported");
    expect_end(p);
    static const char *const stops[] = {"else", "endfor", NULL};
    jstr stop;
    n->b = parse_body(p, stops, &stop);
    if (jstr_eq(stop, "else")) {
        expect_end(p);
        static const char *const endfor[] = {"endfor", NULL};
        n->c = parse_body(p, endfor, &stop);
    }
    expect_end(p);
    return n;
}

static const jnode *parse_set(parser *p) {
    jnode *n = node(p, JN_SET);
    n->name = expect_name(p, "a variable name after 'set'");
    if (op_is(p, ".")) {
        next(p);
        n->kind = JN_SET_ATTR;
        n->attr = expect_name(p, "an attribute name");
    }
    if (op_is(p, ",")) FAIL(p, "'set' with several targets is not supported");
    if (p->t == T_END) FAIL(p, "block 'set' (set ... endset) is not supported");
    expect_op(p, "=");
    n->a = parse_expr(p);
    expect_end(p);
    return n;
}

static const jnode *parse_macro(parser *p) {
    jnode *n = node(p, JN_MACRO);
    n->name = expect_name(p, "a macro name");
    expect_op(p, "(");
    nlist params = {0};
    while (!op_is(p, ")")) {
        if (params.n) expect_op(p, ",");
        jnode *prm = node(p, JE_NAME);
        prm->name = expect_name(p, "a parameter name");
        if (op_is(p, "=")) {
            next(p);
            prm->a = parse_expr(p);
        } else if (params.n && params.v[params.n - 1]->a)
            FAIL(p, "macro '%.*s': a parameter without a default follows one with a default", (int)n->name.n,
                 n->name.s);
        nlist_add(p, &params, prm, (jstr){0});
    }
    next(p);
    expect_end(p);
    n->list = params.v, n->n = params.n;
    static const char *const stops[] = {"endmacro", NULL};
    jstr stop;
    n->b = parse_body(p, stops, &stop);
    if (p->t == T_NAME) next(p); /* {% endmacro name %} */
    expect_end(p);
    return n;
}

/* Statements up to a tag {% w %} with w in stops (then *stopped = w and the lexer is on the token
 * after w) or to the end of the template (stops NULL). */
static const jnode *parse_body(parser *p, const char *const *stops, jstr *stopped) {
    enter(p);
    int line = p->line;
    jnode *body = node(p, JN_BODY);
    nlist l = {0};
    for (;;) {
        p->tag = 0;
        char kind = scan_text(p, &l);
        if (!kind) {
            if (stops) {
                size_t last = 0;
                while (stops[last + 1]) last++;
                jfail(p->a, line, "a block is not closed: {%% %s %%} is missing", stops[last]);
            }
            break;
        }
        if (kind == '#') {
            skip_comment(p);
            continue;
        }
        p->tag = kind == '{' ? '{' : '%', p->brackets = 0;
        next(p);
        if (kind == '{') {
            jnode *o = node(p, JN_OUTPUT);
            o->a = parse_expr(p);
            expect_end(p);
            nlist_add(p, &l, o, (jstr){0});
            continue;
        }
        jstr w = expect_name(p, "a statement name after '{%'");
        bool stop = false;
        for (size_t i = 0; stops && stops[i]; i++) stop |= jstr_eq(w, stops[i]);
        if (stop) {
            *stopped = w;
            break;
        }
        const jnode *st;
        if (jstr_eq(w, "if"))
            st = parse_if(p);
        else if (jstr_eq(w, "for"))
            st = parse_for(p);
        else if (jstr_eq(w, "set"))
            st = parse_set(p);
        else if (jstr_eq(w, "macro"))
            st = parse_macro(p);
        else if (jstr_eq(w, "break") || jstr_eq(w, "continue")) {
            st = node(p, jstr_eq(w, "break") ? JN_BREAK : JN_CONTINUE);
            expect_end(p);
        } else if (jstr_eq(w, "generation")) { /* transformers' assistant-mask block: its body as is */
            expect_end(p);
            static const char *const end[] = {"endgeneration", NULL};
            jstr s;
            st = parse_body(p, end, &s);
            expect_end(p);
        } else if (jstr_eq(w, "elif") || jstr_eq(w, "else") || !strncmp(w.s, "end", 3))
            FAIL(p, "{%% %.*s %%} does not close any open block", (int)w.n, w.s);
        else
            FAIL(p, "the statement {%% %.*s %%} is not supported by turbospark's Jinja engine", (int)w.n,
                 w.s);
        nlist_add(p, &l, st, (jstr){0});
    }
    body->list = l.v, body->n = l.n;
    p->nest--;
    return body;
}

static void parse_template(ts_jinja *t, const char *src, size_t len) {
    if (memchr(src, 0, len)) jfail(&t->arena, 0, "the template contains a NUL byte");
    char *copy = jalloc(&t->arena, len + 1); /* the tree points into its own copy of the text */
    memcpy(copy, src, len);
    parser p = {.a = &t->arena, .src = copy, .len = len, .line = 1, .line_starting = true};
    t->root = parse_body(&p, NULL, NULL);
}

int ts_jinja_parse(const char *src, size_t len, ts_jinja **out, char *err, size_t errlen) {
    *out = NULL;
    /* keep_trailing_newline off: one final newline is not part of the template */
    size_t trailing = len && src[len - 1] == '\n';
    trailing += len > trailing && src[len - 1 - trailing] == '\r';
    volatile size_t n = len - trailing; /* volatile: read after setjmp */
    ts_jinja *t = calloc(1, sizeof *t);
    if (!t) return ts_errf(err, errlen, "out of memory parsing a chat template"), -1;
    jmp_buf fail;
    t->arena = (jarena){.limit = TS_JINJA_MAX_BYTES, .fail = &fail, .err = err, .errlen = errlen};
    if (setjmp(fail)) {
        jarena_free(&t->arena);
        free(t);
        return -1;
    }
    parse_template(t, src, n);
    t->arena.fail = NULL;
    *out = t;
    return 0;
}

void ts_jinja_free(ts_jinja *t) {
    if (!t) return;
    jarena_free(&t->arena);
    free(t);
}
