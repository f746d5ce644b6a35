/* JSON schemas and tool calls to byte grammars (see json_schema.h). Rules are made on demand and
 * shared (ws, string, number, any value...); a schema node becomes one rule. */
#include "engine/json_schema.h"

#include "common/error.h"
#include "common/json_check.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NESTING 32

typedef struct cx {
    ts_grammar *g;
    char *err;
    size_t errlen;
    bool failed;
    int ws, value, str, num, integer, obj_any, arr_any, chr, chr_u8; /* shared rules, 0: not yet */
    char path[256];
} cx;

static int fail(cx *c, const char *fmt, const char *a, const char *b) {
    if (!c->failed) ts_errf(c->err, c->errlen, fmt, a, b);
    c->failed = true;
    return -1;
}

static int new_rule(cx *c) {
    int r = ts_grammar_rule(c->g);
    if (r < 0 && ts_grammar_n_rules(c->g) >= TS_GRAMMAR_MAX_RULES)
        fail(c, "the schema needs more than 100000 grammar rules%s%s (lower maxLength / maxItems)", "", "");
    else if (r < 0)
        fail(c, "out of memory building a grammar%s%s", "", "");
    return r;
}

static void alt(cx *c, int rule, ts_gseq *s) {
    if (rule < 0 || s->oom || ts_grammar_alt(c->g, rule, s))
        fail(c, "out of memory building a grammar%s%s", "", "");
    s->n = 0, s->oom = false;
}

static void lit(cx *c, ts_gseq *s, const char *t) {
    ts_gseq_lit(c->g, s, t, strlen(t));
}

static int cls(cx *c, int lo, int hi) {
    return ts_grammar_range(c->g, lo, hi);
}

/* X repeated min..max times (max < 0: no bound). */
static int rep(cx *c, int x, int min, int max) {
    ts_gseq s = {0};
    int tail = new_rule(c);
    if (max < 0) { /* tail ::= ε | x tail */
        alt(c, tail, &s);
        ts_gseq_ref(&s, x), ts_gseq_ref(&s, tail), alt(c, tail, &s);
    } else { /* t_k ::= ε | x t_{k-1}, t_0 ::= ε */
        alt(c, tail, &s);
        for (int k = 1; k <= max - min; k++) {
            int t = new_rule(c);
            alt(c, t, &s);
            ts_gseq_ref(&s, x), ts_gseq_ref(&s, tail), alt(c, t, &s);
            tail = t;
        }
    }
    int r = new_rule(c);
    for (int i = 0; i < min; i++) ts_gseq_ref(&s, x);
    ts_gseq_ref(&s, tail);
    alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

static int rule_of_class(cx *c, int k) {
    ts_gseq s = {0};
    int r = new_rule(c);
    ts_gseq_class(&s, k), alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

/* ws ::= ε | " " | "\n" [ \t]{0,20} */
static int ws(cx *c) {
    if (c->ws) return c->ws;
    ts_gseq s = {0};
    uint64_t blank[4] = {0};
    blank[0] = (1ull << ' ') | (1ull << '\t');
    int ind = rep(c, rule_of_class(c, ts_grammar_class(c->g, blank)), 0, 20);
    int r = new_rule(c);
    alt(c, r, &s);
    lit(c, &s, " "), alt(c, r, &s);
    lit(c, &s, "\n"), ts_gseq_ref(&s, ind), alt(c, r, &s);
    ts_gseq_free(&s);
    return c->ws = r;
}

/* The class of the bytes of chars. */
static int cls_of(cx *c, const char *chars) {
    uint64_t b[4] = {0};
    for (const char *p = chars; *p; p++) b[(unsigned char)*p >> 6] |= 1ull << (*p & 63);
    return ts_grammar_class(c->g, b);
}

/* One character of a string: plain bytes (any byte >= 0x80 counts as one: fast, for free strings),
 * or escapes; utf8: a whole UTF-8 character (for minLength / maxLength). A \u escape stands for a
 * Unicode character other than NUL: \u0000 and lone surrogates are left out (a reader that makes C
 * strings, cJSON's tool-call parsing among them, would cut the string there or refuse it), and a
 * surrogate pair is one character. */
static int chr(cx *c, bool utf8) {
    int *slot = utf8 ? &c->chr_u8 : &c->chr;
    if (*slot) return *slot;
    ts_gseq s = {0};
    uint64_t plain[4] = {0};
    for (int b = 0x20; b < (utf8 ? 0x80 : 0x100); b++)
        if (b != '"' && b != '\\') plain[b >> 6] |= 1ull << (b & 63);
    /* factored so that the matcher's stacks part only after the bytes they share (as fast as one
     * escape rule): chr ::= plain | "\\" esc;  esc ::= ["\\/bfnrt] | "u" u4;
     * u4 ::= [1-9a-cA-Ce-fE-F] h h h | [dD] d3 | "0" z3  (1000-CFFF, E000-FFFF; D...; 0...)
     * d3 ::= [0-7] h h | [89abAB] h h "\\u" [dD] [c-fC-F] h h  (D000-D7FF; a pair)
     * z3 ::= nz h h | "0" nz h | "00" nz  (0100-0FFF, 0010-00FF, 0001-000F) */
    int r = new_rule(c), esc = new_rule(c), u4 = new_rule(c), d3 = new_rule(c), z3 = new_rule(c);
    int cont = cls(c, 0x80, 0xbf), h = cls_of(c, "0123456789abcdefABCDEF");
    int nz = cls_of(c, "123456789abcdefABCDEF"), d = cls_of(c, "dD");
    ts_gseq_class(&s, ts_grammar_class(c->g, plain)), alt(c, r, &s);
    lit(c, &s, "\\"), ts_gseq_ref(&s, esc), alt(c, r, &s);
    ts_gseq_class(&s, cls_of(c, "\"\\/bfnrt")), alt(c, esc, &s);
    lit(c, &s, "u"), ts_gseq_ref(&s, u4), alt(c, esc, &s);
    ts_gseq_class(&s, cls_of(c, "123456789abcABCefEF"));
    for (int i = 0; i < 3; i++) ts_gseq_class(&s, h);
    alt(c, u4, &s);
    ts_gseq_class(&s, d), ts_gseq_ref(&s, d3), alt(c, u4, &s);
    lit(c, &s, "0"), ts_gseq_ref(&s, z3), alt(c, u4, &s);
    ts_gseq_class(&s, cls_of(c, "01234567")), ts_gseq_class(&s, h), ts_gseq_class(&s, h), alt(c, d3, &s);
    ts_gseq_class(&s, cls_of(c, "89abAB")), ts_gseq_class(&s, h), ts_gseq_class(&s, h), lit(c, &s, "\\u");
    ts_gseq_class(&s, d), ts_gseq_class(&s, cls_of(c, "cdefCDEF")), ts_gseq_class(&s, h),
        ts_gseq_class(&s, h);
    alt(c, d3, &s);
    ts_gseq_class(&s, nz), ts_gseq_class(&s, h), ts_gseq_class(&s, h), alt(c, z3, &s);
    lit(c, &s, "0"), ts_gseq_class(&s, nz), ts_gseq_class(&s, h), alt(c, z3, &s);
    lit(c, &s, "00"), ts_gseq_class(&s, nz), alt(c, z3, &s);
    if (utf8) {
        ts_gseq_class(&s, cls(c, 0xc2, 0xdf)), ts_gseq_class(&s, cont), alt(c, r, &s);
        ts_gseq_class(&s, cls(c, 0xe0, 0xef)), ts_gseq_class(&s, cont), ts_gseq_class(&s, cont),
            alt(c, r, &s);
        ts_gseq_class(&s, cls(c, 0xf0, 0xf4));
        for (int i = 0; i < 3; i++) ts_gseq_class(&s, cont);
        alt(c, r, &s);
    }
    ts_gseq_free(&s);
    return *slot = r;
}

static int string_rule(cx *c, int min, int max) {
    bool free_ = min <= 0 && max < 0;
    if (free_ && c->str) return c->str;
    ts_gseq s = {0};
    int body = rep(c, chr(c, !free_), min < 0 ? 0 : min, max), r = new_rule(c);
    lit(c, &s, "\""), ts_gseq_ref(&s, body), lit(c, &s, "\""), alt(c, r, &s);
    ts_gseq_free(&s);
    if (free_) c->str = r;
    return r;
}

/* integer ::= "-"? ("0" | [1-9] [0-9]{0,15}); number adds ("." [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? */
static int number_rule(cx *c, bool integer) {
    int *slot = integer ? &c->integer : &c->num;
    if (*slot) return *slot;
    ts_gseq s = {0};
    int digit = rule_of_class(c, cls(c, '0', '9'));
    int minus = new_rule(c), ip = new_rule(c);
    alt(c, minus, &s), lit(c, &s, "-"), alt(c, minus, &s);
    lit(c, &s, "0"), alt(c, ip, &s);
    ts_gseq_class(&s, cls(c, '1', '9')), ts_gseq_ref(&s, rep(c, digit, 0, 15)), alt(c, ip, &s);
    int r = new_rule(c);
    if (integer) {
        ts_gseq_ref(&s, minus), ts_gseq_ref(&s, ip);
    } else {
        int frac = new_rule(c), ex = new_rule(c), sign = new_rule(c);
        alt(c, frac, &s), lit(c, &s, "."), ts_gseq_ref(&s, rep(c, digit, 1, 16)), alt(c, frac, &s);
        alt(c, sign, &s), lit(c, &s, "-"), alt(c, sign, &s), lit(c, &s, "+"), alt(c, sign, &s);
        uint64_t e[4] = {0};
        e[1] = (1ull << ('e' - 64)) | (1ull << ('E' - 64));
        alt(c, ex, &s), ts_gseq_class(&s, ts_grammar_class(c->g, e)), ts_gseq_ref(&s, sign);
        ts_gseq_ref(&s, rep(c, digit, 1, 3)), alt(c, ex, &s);
        ts_gseq_ref(&s, minus), ts_gseq_ref(&s, ip), ts_gseq_ref(&s, frac), ts_gseq_ref(&s, ex);
    }
    alt(c, r, &s);
    ts_gseq_free(&s);
    return *slot = r;
}

static int value_rule(cx *c);

/* "{" ws "}" | "{" ws member ("," ws member)* "}", member ::= string ws ":" ws VALUE ws */
static int object_any(cx *c, int val) {
    if (val < 0 && c->obj_any) return c->obj_any;
    bool shared = val < 0;
    ts_gseq s = {0};
    int r = new_rule(c), member = new_rule(c), more = new_rule(c);
    if (shared) c->obj_any = r;
    if (val < 0) val = value_rule(c);
    ts_gseq_ref(&s, string_rule(c, 0, -1)), ts_gseq_ref(&s, ws(c)), lit(c, &s, ":"), ts_gseq_ref(&s, ws(c));
    ts_gseq_ref(&s, val), ts_gseq_ref(&s, ws(c)), alt(c, member, &s);
    alt(c, more, &s), lit(c, &s, ","), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, member), ts_gseq_ref(&s, more);
    alt(c, more, &s);
    lit(c, &s, "{"), ts_gseq_ref(&s, ws(c)), lit(c, &s, "}"), alt(c, r, &s);
    lit(c, &s, "{"), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, member), ts_gseq_ref(&s, more), lit(c, &s, "}");
    alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

/* "[" ws "]" | "[" ws item ws ("," ws item ws){min-1, max-1} "]" */
static int array_rule(cx *c, int item, int min, int max) {
    bool shared = item < 0 && min <= 0 && max < 0;
    if (shared && c->arr_any) return c->arr_any;
    ts_gseq s = {0};
    int r = new_rule(c), more = new_rule(c);
    if (shared) c->arr_any = r;
    if (item < 0) item = value_rule(c);
    lit(c, &s, ","), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, item), ts_gseq_ref(&s, ws(c)), alt(c, more, &s);
    if (min <= 0) lit(c, &s, "["), ts_gseq_ref(&s, ws(c)), lit(c, &s, "]"), alt(c, r, &s);
    if (max != 0) {
        lit(c, &s, "["), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, item), ts_gseq_ref(&s, ws(c));
        ts_gseq_ref(&s, rep(c, more, min > 1 ? min - 1 : 0, max < 0 ? -1 : max - 1)), lit(c, &s, "]");
        alt(c, r, &s);
    }
    ts_gseq_free(&s);
    return r;
}

static int literal_rule(cx *c, const char *text) {
    ts_gseq s = {0};
    int r = new_rule(c);
    lit(c, &s, text), alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

static int value_rule(cx *c) {
    if (c->value) return c->value;
    ts_gseq s = {0};
    int r = c->value = new_rule(c);
    const int alts[] = {object_any(c, -1),      array_rule(c, -1, 0, -1), string_rule(c, 0, -1),
                        number_rule(c, false),  literal_rule(c, "true"),  literal_rule(c, "false"),
                        literal_rule(c, "null")};
    for (size_t i = 0; i < sizeof alts / sizeof *alts; i++) ts_gseq_ref(&s, alts[i]), alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

/* ---- schemas -------------------------------------------------------------------------------- */

static const char *const k_known[] = {
    "type",      "properties", "required",    "additionalProperties",
    "items",     "minItems",   "maxItems",    "minLength",
    "maxLength", "enum",       "const",       "anyOf",
    "oneOf",     "title",      "description", "default",
    "examples",  "$schema",    "$id",         "$comment",
    "strict",
};

static int compile(cx *c, const cJSON *sc, int depth);

static int with_path(cx *c, const char *suffix, const cJSON *sc, int depth) {
    size_t L = strlen(c->path);
    snprintf(c->path + L, sizeof c->path - L, "%s", suffix);
    int r = compile(c, sc, depth + 1);
    c->path[L] = 0;
    return r;
}

static int count_of(cx *c, const cJSON *sc, const char *k, int def) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(sc, k);
    if (!v) return def;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 100000 ||
        v->valuedouble != floor(v->valuedouble))
        return fail(c, "'%s' at %s must be a whole number from 0 to 100000", k, c->path), def;
    return (int)v->valuedouble;
}

/* P(i, w): properties i.. of an object, w: one was written before (then a comma comes first). */
typedef struct props {
    const cJSON **p;
    bool *req;
    int *kv, n, memo[2][64];
} props;

static int props_rule(cx *c, props *P, int i, bool w) {
    if (P->memo[w][i]) return P->memo[w][i];
    ts_gseq s = {0};
    int r = new_rule(c);
    P->memo[w][i] = r;
    if (i == P->n) {
        alt(c, r, &s);
    } else {
        if (w) lit(c, &s, ","), ts_gseq_ref(&s, ws(c));
        ts_gseq_ref(&s, P->kv[i]), ts_gseq_ref(&s, props_rule(c, P, i + 1, true)), alt(c, r, &s);
        if (!P->req[i]) ts_gseq_ref(&s, props_rule(c, P, i + 1, w)), alt(c, r, &s);
    }
    ts_gseq_free(&s);
    return r;
}

static int object_rule(cx *c, const cJSON *sc, int depth) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(sc, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(sc, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(sc, "additionalProperties");
    if (pr && !cJSON_IsObject(pr)) return fail(c, "'properties' at %s must be an object%s", c->path, "");
    if (req && !cJSON_IsArray(req)) return fail(c, "'required' at %s must be an array%s", c->path, "");
    const cJSON *q;
    cJSON_ArrayForEach(q, req) {
        if (!cJSON_IsString(q) || !cJSON_GetObjectItemCaseSensitive(pr, q->valuestring))
            return fail(c, "'required' at %s names '%.64s', which is not in 'properties'", c->path,
                        cJSON_IsString(q) ? q->valuestring : "?");
    }
    if (!pr || !pr->child) { /* any members; their values follow additionalProperties when it is a schema */
        if (cJSON_IsFalse(ap)) return literal_rule(c, "{}");
        return object_any(c, cJSON_IsObject(ap) ? with_path(c, ".additionalProperties", ap, depth) : -1);
    }
    props P = {0};
    int n = cJSON_GetArraySize(pr);
    if (n > 63) return fail(c, "the object at %s has more than 63 properties%s", c->path, "");
    const cJSON *p_[64];
    bool req_[64];
    int kv_[64];
    P.p = p_, P.req = req_, P.kv = kv_, P.n = n;
    int i = 0;
    ts_gseq s = {0};
    cJSON_ArrayForEach(q, pr) {
        char sub[160];
        snprintf(sub, sizeof sub, ".properties.%.120s", q->string);
        int v = with_path(c, sub, q, depth);
        req_[i] = false;
        const cJSON *x;
        cJSON_ArrayForEach(x, req) req_[i] |= cJSON_IsString(x) && !strcmp(x->valuestring, q->string);
        cJSON *key = cJSON_CreateString(q->string);
        char *kt = key ? cJSON_PrintUnformatted(key) : NULL;
        cJSON_Delete(key);
        if (!kt) return ts_gseq_free(&s), fail(c, "out of memory building a grammar%s%s", "", "");
        kv_[i] = new_rule(c);
        lit(c, &s, kt), ts_gseq_ref(&s, ws(c)), lit(c, &s, ":"), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, v);
        ts_gseq_ref(&s, ws(c)), alt(c, kv_[i], &s);
        free(kt);
        i++;
    }
    int r = new_rule(c);
    lit(c, &s, "{"), ts_gseq_ref(&s, ws(c)), ts_gseq_ref(&s, props_rule(c, &P, 0, false)), lit(c, &s, "}");
    alt(c, r, &s);
    ts_gseq_free(&s);
    return r;
}

static int typed_rule(cx *c, const cJSON *sc, const char *type, int depth) {
    if (!strcmp(type, "object")) return object_rule(c, sc, depth);
    if (!strcmp(type, "array")) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(sc, "items");
        int min = count_of(c, sc, "minItems", 0), max = count_of(c, sc, "maxItems", -1);
        if (max >= 0 && max < min) return fail(c, "maxItems is below minItems at %s%s", c->path, "");
        return array_rule(c, it ? with_path(c, ".items", it, depth) : -1, min, max);
    }
    if (!strcmp(type, "string")) {
        int min = count_of(c, sc, "minLength", 0), max = count_of(c, sc, "maxLength", -1);
        if (max >= 0 && max < min) return fail(c, "maxLength is below minLength at %s%s", c->path, "");
        return string_rule(c, min, max);
    }
    if (!strcmp(type, "number")) return number_rule(c, false);
    if (!strcmp(type, "integer")) return number_rule(c, true);
    if (!strcmp(type, "boolean")) {
        ts_gseq s = {0};
        int r = new_rule(c);
        lit(c, &s, "true"), alt(c, r, &s), lit(c, &s, "false"), alt(c, r, &s);
        ts_gseq_free(&s);
        return r;
    }
    if (!strcmp(type, "null")) return literal_rule(c, "null");
    return fail(c, "the type '%.32s' at %s is not a JSON schema type", type, c->path);
}

static int compile(cx *c, const cJSON *sc, int depth) {
    if (c->failed) return -1;
    if (depth > MAX_NESTING) return fail(c, "the schema is nested more than 32 deep at %s%s", c->path, "");
    if (cJSON_IsTrue(sc)) return value_rule(c);
    if (!cJSON_IsObject(sc)) return fail(c, "the schema at %s must be an object (or true)%s", c->path, "");
    for (const cJSON *k = sc->child; k; k = k->next) {
        bool known = false;
        for (size_t i = 0; i < sizeof k_known / sizeof *k_known; i++) known |= !strcmp(k->string, k_known[i]);
        if (!known)
            return fail(
                c,
                "the JSON schema keyword '%.64s' (at %s) is not supported by constrained decoding here; "
                "supported: type, properties, required, items, enum, const, anyOf, oneOf, minItems, "
                "maxItems, minLength, maxLength, additionalProperties",
                k->string, c->path);
    }
    ts_gseq s = {0};
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(sc, "enum"),
                *co = cJSON_GetObjectItemCaseSensitive(sc, "const");
    const cJSON *any = cJSON_GetObjectItemCaseSensitive(sc, "anyOf");
    if (!any) any = cJSON_GetObjectItemCaseSensitive(sc, "oneOf");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(sc, "type");
    if (en || co) { /* the values as written (cJSON's compact text) */
        if (en && (!cJSON_IsArray(en) || !en->child))
            return fail(c, "'enum' at %s must be a non-empty array%s", c->path, "");
        int r = new_rule(c);
        for (const cJSON *v = en ? en->child : co; v; v = en ? v->next : NULL) {
            char *t = cJSON_PrintUnformatted(v);
            if (!t) return fail(c, "out of memory building a grammar%s%s", "", "");
            lit(c, &s, t), alt(c, r, &s);
            free(t);
        }
        ts_gseq_free(&s);
        return r;
    }
    if (any) {
        if (!cJSON_IsArray(any) || !any->child)
            return fail(c, "'%s' at %s must be a non-empty array", any->string, c->path);
        if (ty)
            return fail(c, "'type' beside '%s' at %s is not supported: put the type in each branch",
                        any->string, c->path);
        int r = new_rule(c), i = 0;
        for (const cJSON *b = any->child; b; b = b->next, i++) {
            char sub[48];
            snprintf(sub, sizeof sub, ".%s[%d]", any->string, i);
            ts_gseq_ref(&s, with_path(c, sub, b, depth)), alt(c, r, &s);
        }
        ts_gseq_free(&s);
        return r;
    }
    if (!ty) { /* no type: what the keywords imply, else any value */
        if (cJSON_GetObjectItemCaseSensitive(sc, "properties")) return object_rule(c, sc, depth);
        if (cJSON_GetObjectItemCaseSensitive(sc, "items")) return typed_rule(c, sc, "array", depth);
        return value_rule(c);
    }
    if (cJSON_IsString(ty)) return typed_rule(c, sc, ty->valuestring, depth);
    if (!cJSON_IsArray(ty) || !ty->child)
        return fail(c, "'type' at %s must be a name or a list of names%s", c->path, "");
    int r = new_rule(c);
    for (const cJSON *t = ty->child; t; t = t->next) {
        if (!cJSON_IsString(t))
            return fail(c, "'type' at %s must be a name or a list of names%s", c->path, "");
        ts_gseq_ref(&s, typed_rule(c, sc, t->valuestring, depth)), alt(c, r, &s);
    }
    ts_gseq_free(&s);
    return r;
}

/* root ::= [ \t\n]{0,4} body */
static int finish(cx *c, int body, ts_grammar **out) {
    if (!c->failed) {
        ts_gseq s = {0};
        uint64_t b[4] = {0};
        b[0] = (1ull << ' ') | (1ull << '\t') | (1ull << '\n');
        int lead = rep(c, rule_of_class(c, ts_grammar_class(c->g, b)), 0, 4), root = new_rule(c);
        ts_gseq_ref(&s, lead), ts_gseq_ref(&s, body), alt(c, root, &s);
        ts_gseq_free(&s);
        if (!c->failed && ts_grammar_finish(c->g, root, c->err, c->errlen)) c->failed = true;
    }
    if (c->failed) {
        ts_grammar_free(c->g);
        return -1;
    }
    *out = c->g;
    return 0;
}

int ts_json_schema_grammar(const char *schema, ts_grammar **out, char *err, size_t errlen) {
    *out = NULL;
    cx c = {.g = ts_grammar_new(), .err = err, .errlen = errlen, .path = "$"};
    if (!c.g) return ts_errf(err, errlen, "out of memory building a grammar");
    int body;
    if (!schema) {
        body = object_any(&c, -1);
    } else {
        if (ts_json_check_text("the JSON schema", schema, strlen(schema), "a grammar", err, errlen)) {
            ts_grammar_free(c.g);
            return -1;
        }
        cJSON *sc = cJSON_Parse(schema);
        if (!sc) fail(&c, "the JSON schema is not valid JSON%s%s", "", "");
        body = compile(&c, sc, 0);
        cJSON_Delete(sc);
    }
    return finish(&c, body, out);
}

int ts_tool_call_grammar(const char *tools_json, const char *only, bool parallel, ts_grammar **out, char *err,
                         size_t errlen) {
    *out = NULL;
    cx c = {.g = ts_grammar_new(), .err = err, .errlen = errlen};
    if (!c.g) return ts_errf(err, errlen, "out of memory building a grammar");
    if (tools_json &&
        ts_json_check_text("the tools", tools_json, strlen(tools_json), "a grammar", err, errlen)) {
        ts_grammar_free(c.g);
        return -1;
    }
    cJSON *tools = cJSON_Parse(tools_json ? tools_json : "");
    if (!cJSON_IsArray(tools)) fail(&c, "the tools are not a JSON array%s%s", "", "");
    ts_gseq s = {0};
    int call = new_rule(&c), n = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *f = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(f, "name");
        const cJSON *pa = cJSON_GetObjectItemCaseSensitive(f, "parameters");
        if (!cJSON_IsString(nm) || (only && strcmp(nm->valuestring, only) != 0)) continue;
        snprintf(c.path, sizeof c.path, "tool '%.64s' parameters $", nm->valuestring);
        int args = pa ? compile(&c, pa, 0) : object_any(&c, -1);
        char head[160];
        snprintf(head, sizeof head, "<tool_call>\n{\"name\": \"%s\", \"arguments\": ", nm->valuestring);
        lit(&c, &s, head), ts_gseq_ref(&s, args), lit(&c, &s, "}\n</tool_call>"), alt(&c, call, &s);
        n++;
    }
    if (!n && !c.failed) fail(&c, "no tool to call%s%s", only ? " is named " : "", only ? only : "");
    int sep = new_rule(&c);
    lit(&c, &s, "\n"), ts_gseq_ref(&s, call), alt(&c, sep, &s);
    int body = new_rule(&c);
    ts_gseq_ref(&s, call), ts_gseq_ref(&s, rep(&c, sep, 0, parallel ? 7 : 0)), alt(&c, body, &s);
    ts_gseq_free(&s);
    cJSON_Delete(tools);
    return finish(&c, body, out);
}
