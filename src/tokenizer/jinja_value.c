/* Jinja values (jinja_internal.h): the arena, Python's truthiness, equality, str(), repr() and
 * json.dumps() as transformers' `tojson` calls it, and the conversion from cJSON. */
#include "tokenizer/jinja_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- arena and failure --------------------------------------------------------------------- */

struct jchunk {
    jchunk *next;
    size_t used, cap;
    max_align_t data[];
};

_Noreturn void jfail(jarena *a, int line, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line > 0)
        ts_errf(a->err, a->errlen, "chat template line %d: %s.", line, msg);
    else
        ts_errf(a->err, a->errlen, "chat template: %s.", msg);
    longjmp(*a->fail, 1);
}

void *jalloc(jarena *a, size_t n) {
    n = (n + sizeof(max_align_t) - 1) / sizeof(max_align_t) * sizeof(max_align_t);
    if (n > a->limit || a->used_total > a->limit - n)
        jfail(a, 0, "rendering needs more than %zu MiB of memory (a runaway template?)", a->limit >> 20);
    jchunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + cap);
        if (!c) jfail(a, 0, "out of memory (%zu bytes asked)", sizeof *c + cap);
        c->next = a->head, c->used = 0, c->cap = cap;
        a->head = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += n;
    a->used_total += n;
    memset(p, 0, n);
    return p;
}

void jarena_free(jarena *a) {
    for (jchunk *c = a->head, *next; c; c = next) next = c->next, free(c);
    a->head = NULL, a->used_total = 0;
}

void jtext_add(jarena *a, ts_text *t, const void *p, size_t n) {
    if (!n) return;
    if (n > a->limit || t->n + n + 1 > t->cap) { /* grow in the arena: nothing to free on failure */
        size_t cap = t->cap ? 2 * t->cap : 64;
        while (cap < t->n + n + 1) cap *= 2;
        char *s = jalloc(a, cap);
        if (t->n) memcpy(s, t->s, t->n);
        t->s = s, t->cap = cap;
    }
    memcpy(t->s + t->n, p, n);
    t->n += n;
    t->s[t->n] = 0;
}

/* ---- basics -------------------------------------------------------------------------------- */

jstr jstr_c(const char *s) {
    return (jstr){s, strlen(s)};
}
bool jstr_eq(jstr a, const char *c) {
    return a.s && strlen(c) == a.n && !memcmp(a.s, c, a.n);
}
jv jv_str(jstr s) {
    return (jv){.kind = JV_STR, .u.s = s};
}
jv jv_from_text(jarena *a, const ts_text *t) {
    char *s = jalloc(a, t->n + 1);
    if (t->n) memcpy(s, t->s, t->n);
    return jv_str((jstr){s, t->n});
}

jv jv_undef(jarena *a, const char *fmt, ...) {
    char *why = jalloc(a, 200);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, 200, fmt, ap);
    va_end(ap);
    return (jv){.kind = JV_UNDEF, .u.why = why};
}

const char *jv_type_name(const jv *v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool",    "int",       "float",
                                        "str",       "list",     "dict",    "Namespace", "LoopContext",
                                        "Macro",     "method",   "function"};
    return v->kind == JV_LIST && v->is_tuple ? "tuple" : names[v->kind];
}

bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0;
    case JV_STR:
        return v->u.s.n != 0;
    case JV_LIST:
        return v->u.l->n != 0;
    case JV_DICT:
        return v->u.d->n != 0;
    default:
        return true;
    }
}

static bool is_number(const jv *v) {
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}
static double num(const jv *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}

static const jv *dict_get(const jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].n == k.n && !memcmp(d->keys[i].s, k.s, k.n)) return &d->vals[i];
    return NULL;
}

bool jv_equal(const jv *x, const jv *y) {
    if (is_number(x) && is_number(y)) {
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT)
            return (x->kind == JV_INT ? x->u.i : x->u.b) == (y->kind == JV_INT ? y->u.i : y->u.b);
        return num(x) == num(y);
    }
    if (x->kind != y->kind) return false;
    switch (x->kind) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return x->u.s.n == y->u.s.n && !memcmp(x->u.s.s, y->u.s.s, x->u.s.n);
    case JV_LIST:
        if (x->is_tuple != y->is_tuple || x->u.l->n != y->u.l->n) return false;
        for (size_t i = 0; i < x->u.l->n; i++)
            if (!jv_equal(&x->u.l->items[i], &y->u.l->items[i])) return false;
        return true;
    case JV_DICT:
        if (x->u.d->n != y->u.d->n) return false;
        for (size_t i = 0; i < x->u.d->n; i++) {
            const jv *o = dict_get(y->u.d, x->u.d->keys[i]);
            if (!o || !jv_equal(&x->u.d->vals[i], o)) return false;
        }
        return true;
    case JV_MACRO:
        return x->u.macro == y->u.macro;
    case JV_GLOBAL:
        return jstr_eq(x->u.s, y->u.s.s);
    default:
        return x->u.d == y->u.d; /* namespaces and loops: identity */
    }
}

/* ---- whitespace ---------------------------------------------------------------------------- */

static size_t utf8_decode(const char *s, size_t n, int32_t *c) {
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)(n > 4 ? 4 : n), c);
    if (k <= 0) *c = -1, k = 1;
    return (size_t)k;
}

/* str.isspace(): Unicode White_Space plus the ASCII separators \x1c-\x1f. */
static bool py_isspace(int32_t c) {
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
           c == 0x3000;
}

size_t py_space_len(const char *s, size_t n) {
    if (!n) return 0;
    int32_t c;
    size_t k = utf8_decode(s, n, &c);
    return py_isspace(c) ? k : 0;
}

size_t py_space_before(const char *s, size_t n) {
    size_t k = 1;
    while (k < n && k < 4 && ((unsigned char)s[n - k] & 0xC0) == 0x80) k++;
    return py_space_len(s + n - k, k) == k ? k : 0;
}

/* ---- str() and repr() ---------------------------------------------------------------------- */

/* Python's repr of a float: the shortest digits that read back the same, in fixed notation for
 * decimal exponents -4..15 and scientific otherwise ("1e+16", "1.5e-05", "100.0"). */
static void py_float(double x, char *b, size_t cap, bool json) {
    if (isnan(x)) {
        snprintf(b, cap, "%s", json ? "NaN" : "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(b, cap, "%s%s", x < 0 ? "-" : "", json ? "Infinity" : "inf");
        return;
    }
    char e[48];
    for (int prec = 0; prec <= 17; prec++) {
        snprintf(e, sizeof e, "%.*e", prec, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    int nd = 0;
    const char *s = e + (e[0] == '-');
    for (; *s && *s != 'e'; s++)
        if (*s >= '0' && *s <= '9') digits[nd++] = *s;
    int exp = atoi(s + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    size_t k = 0;
    if (e[0] == '-') b[k++] = '-';
    if (exp < -4 || exp >= 16) {
        b[k++] = digits[0];
        if (nd > 1) b[k++] = '.', memcpy(b + k, digits + 1, (size_t)nd - 1), k += (size_t)nd - 1;
        snprintf(b + k, cap - k, "e%c%02d", exp < 0 ? '-' : '+', abs(exp));
        return;
    }
    if (exp < 0) {
        b[k++] = '0', b[k++] = '.';
        for (int i = 0; i < -exp - 1; i++) b[k++] = '0';
        memcpy(b + k, digits, (size_t)nd), k += (size_t)nd;
    } else {
        for (int i = 0; i <= exp; i++) b[k++] = i < nd ? digits[i] : '0';
        b[k++] = '.';
        if (nd > exp + 1)
            memcpy(b + k, digits + exp + 1, (size_t)(nd - exp - 1)), k += (size_t)(nd - exp - 1);
        else
            b[k++] = '0';
    }
    b[k] = 0;
}

static void add_c(jarena *a, ts_text *out, const char *s) {
    jtext_add(a, out, s, strlen(s));
}

static void number_text(const jv *v, char *b, size_t cap, bool json) {
    if (v->kind == JV_INT)
        snprintf(b, cap, "%lld", (long long)v->u.i);
    else
        py_float(v->u.f, b, cap, json);
}

/* str.isprintable() for one character: not in Cc, Cf, Cs, Co, Cn, Zl, Zp, or Zs other than ' '. */
static bool py_printable(int32_t c) {
    if (c == ' ') return true;
    switch (utf8proc_category(c)) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
    case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP:
    case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static void repr_str(jarena *a, jstr s, ts_text *out) {
    bool has_single = memchr(s.s, '\'', s.n) != NULL, has_double = memchr(s.s, '"', s.n) != NULL;
    char q = has_single && !has_double ? '"' : '\'';
    jtext_add(a, out, &q, 1);
    for (size_t i = 0; i < s.n;) {
        int32_t c;
        size_t k = utf8_decode(s.s + i, s.n - i, &c);
        char b[16];
        if (c == '\\' || c == q)
            b[0] = '\\', b[1] = (char)c, b[2] = 0;
        else if (c == '\n')
            strcpy(b, "\\n");
        else if (c == '\r')
            strcpy(b, "\\r");
        else if (c == '\t')
            strcpy(b, "\\t");
        else if (c < 0)
            snprintf(b, sizeof b, "\\x%02x", (unsigned char)s.s[i]); /* not UTF-8: cannot happen from JSON */
        else if (py_printable(c))
            memcpy(b, s.s + i, k), b[k] = 0;
        else if (c < 0x100)
            snprintf(b, sizeof b, "\\x%02x", (unsigned)c);
        else if (c < 0x10000)
            snprintf(b, sizeof b, "\\u%04x", (unsigned)c);
        else
            snprintf(b, sizeof b, "\\U%08x", (unsigned)c);
        add_c(a, out, b);
        i += k;
    }
    jtext_add(a, out, &q, 1);
}

static void print_value(jarena *a, const jv *v, ts_text *out, bool repr) {
    char b[64];
    switch (v->kind) {
    case JV_UNDEF:
        if (repr) jfail(a, 0, "an undefined value was printed inside a list or dict");
        return;
    case JV_NONE:
        add_c(a, out, "None");
        return;
    case JV_BOOL:
        add_c(a, out, v->u.b ? "True" : "False");
        return;
    case JV_INT:
    case JV_FLOAT:
        number_text(v, b, sizeof b, false);
        add_c(a, out, b);
        return;
    case JV_STR:
        if (repr)
            repr_str(a, v->u.s, out);
        else
            jtext_add(a, out, v->u.s.s, v->u.s.n);
        return;
    case JV_LIST:
        add_c(a, out, v->is_tuple ? "(" : "[");
        for (size_t i = 0; i < v->u.l->n; i++) {
            if (i) add_c(a, out, ", ");
            print_value(a, &v->u.l->items[i], out, true);
        }
        add_c(a, out, v->is_tuple ? (v->u.l->n == 1 ? ",)" : ")") : "]");
        return;
    case JV_NS:
    case JV_DICT:
        add_c(a, out, v->kind == JV_NS ? "<Namespace {" : "{");
        for (size_t i = 0; i < v->u.d->n; i++) {
            if (i) add_c(a, out, ", ");
            repr_str(a, v->u.d->keys[i], out);
            add_c(a, out, ": ");
            print_value(a, &v->u.d->vals[i], out, true);
        }
        add_c(a, out, v->kind == JV_NS ? "}>" : "}");
        return;
    default:
        jfail(a, 0, "a %s was converted to text (its text would be Python's internal description)",
              jv_type_name(v));
    }
}

void jv_to_str(jarena *a, const jv *v, ts_text *out) {
    print_value(a, v, out, false);
}
void jv_repr(jarena *a, const jv *v, ts_text *out) {
    print_value(a, v, out, true);
}

/* ---- tojson -------------------------------------------------------------------------------- */

static void json_str(jarena *a, jstr s, bool ensure_ascii, ts_text *out) {
    static const char hex[] = "0123456789abcdef";
    add_c(a, out, "\"");
    for (size_t i = 0; i < s.n;) {
        unsigned char c = (unsigned char)s.s[i];
        char e[16];
        size_t k = 2;
        e[0] = '\\';
        if (c == '"' || c == '\\')
            e[1] = (char)c;
        else if (c == '\n')
            e[1] = 'n';
        else if (c == '\r')
            e[1] = 'r';
        else if (c == '\t')
            e[1] = 't';
        else if (c == '\b')
            e[1] = 'b';
        else if (c == '\f')
            e[1] = 'f';
        else if (c < 0x20)
            e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15], k = 6;
        else if (c < 0x80 || !ensure_ascii) {
            jtext_add(a, out, s.s + i, 1);
            i++;
            continue;
        } else {
            int32_t cp;
            size_t n = utf8_decode(s.s + i, s.n - i, &cp);
            if (cp < 0) cp = 0xFFFD;
            if (cp >= 0x10000)
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10),
                         0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(e, sizeof e, "\\u%04x", (unsigned)cp);
            add_c(a, out, e);
            i += n;
            continue;
        }
        jtext_add(a, out, e, k);
        i++;
    }
    add_c(a, out, "\"");
}

typedef struct json_opts {
    bool ensure_ascii, sort_keys;
    int indent;
    jstr item_sep, key_sep;
    int line;
} json_opts;

static void newline_indent(jarena *a, const json_opts *o, int level, ts_text *out) {
    add_c(a, out, "\n");
    for (int i = 0; i < o->indent * level; i++) add_c(a, out, " ");
}

static int key_cmp(const void *x, const void *y) {
    const jstr *a = *(const jstr *const *)x, *b = *(const jstr *const *)y;
    int c = memcmp(a->s, b->s, a->n < b->n ? a->n : b->n);
    return c ? c : (a->n > b->n) - (a->n < b->n);
}

static void json_value(jarena *a, const jv *v, const json_opts *o, int level, ts_text *out) {
    if (level > TS_JINJA_MAX_NEST)
        jfail(a, o->line, "tojson: the value nests more than %d deep", TS_JINJA_MAX_NEST);
    char b[64];
    switch (v->kind) {
    case JV_NONE:
        add_c(a, out, "null");
        return;
    case JV_BOOL:
        add_c(a, out, v->u.b ? "true" : "false");
        return;
    case JV_INT:
    case JV_FLOAT:
        number_text(v, b, sizeof b, true);
        add_c(a, out, b);
        return;
    case JV_STR:
        json_str(a, v->u.s, o->ensure_ascii, out);
        return;
    case JV_LIST:
    case JV_DICT: {
        bool dict = v->kind == JV_DICT;
        size_t n = dict ? v->u.d->n : v->u.l->n;
        if (!n) {
            add_c(a, out, dict ? "{}" : "[]");
            return;
        }
        size_t *order = jalloc(a, n * sizeof *order);
        for (size_t i = 0; i < n; i++) order[i] = i;
        if (dict && o->sort_keys) {
            const jstr **keys = jalloc(a, n * sizeof *keys);
            for (size_t i = 0; i < n; i++) keys[i] = &v->u.d->keys[i];
            qsort(keys, n, sizeof *keys, key_cmp);
            for (size_t i = 0; i < n; i++) order[i] = (size_t)(keys[i] - v->u.d->keys);
        }
        add_c(a, out, dict ? "{" : "[");
        for (size_t i = 0; i < n; i++) {
            if (i) jtext_add(a, out, o->item_sep.s, o->item_sep.n);
            if (o->indent >= 0) newline_indent(a, o, level + 1, out);
            if (dict) {
                json_str(a, v->u.d->keys[order[i]], o->ensure_ascii, out);
                jtext_add(a, out, o->key_sep.s, o->key_sep.n);
            }
            json_value(a, dict ? &v->u.d->vals[order[i]] : &v->u.l->items[i], o, level + 1, out);
        }
        if (o->indent >= 0) newline_indent(a, o, level, out);
        add_c(a, out, dict ? "}" : "]");
        return;
    }
    default:
        jfail(a, o->line, "tojson: an object of type %s is not JSON serializable", jv_type_name(v));
    }
}

void jv_tojson(jarena *a, int line, const jv *v, bool ensure_ascii, int indent, const jstr *seps,
               bool sort_keys, ts_text *out) {
    json_opts o = {.ensure_ascii = ensure_ascii, .sort_keys = sort_keys, .indent = indent, .line = line};
    o.item_sep = seps ? seps[0] : jstr_c(indent >= 0 ? "," : ", ");
    o.key_sep = seps ? seps[1] : jstr_c(": ");
    json_value(a, v, &o, 0, out);
}

/* ---- from cJSON ---------------------------------------------------------------------------- */

static jv from_cjson(jarena *a, const cJSON *c, int depth) {
    if (depth > TS_JINJA_MAX_NEST) jfail(a, 0, "the variables nest more than %d deep", TS_JINJA_MAX_NEST);
    if (!c || cJSON_IsNull(c)) return (jv){.kind = JV_NONE};
    if (cJSON_IsBool(c)) return (jv){.kind = JV_BOOL, .u.b = cJSON_IsTrue(c)};
    if (cJSON_IsNumber(c)) {
        double x = c->valuedouble;
        if (x == floor(x) && fabs(x) < 9007199254740992.0) return (jv){.kind = JV_INT, .u.i = (int64_t)x};
        return (jv){.kind = JV_FLOAT, .u.f = x};
    }
    if (cJSON_IsString(c)) return jv_str(jstr_c(c->valuestring));
    size_t n = 0;
    for (const cJSON *k = c->child; k; k = k->next) n++;
    if (cJSON_IsArray(c)) {
        jlist *l = jalloc(a, sizeof *l);
        l->items = jalloc(a, (n ? n : 1) * sizeof *l->items);
        for (const cJSON *k = c->child; k; k = k->next) l->items[l->n++] = from_cjson(a, k, depth + 1);
        return (jv){.kind = JV_LIST, .u.l = l};
    }
    if (cJSON_IsObject(c)) {
        jdict *d = jalloc(a, sizeof *d);
        d->cap = n ? n : 1;
        d->keys = jalloc(a, d->cap * sizeof *d->keys);
        d->vals = jalloc(a, d->cap * sizeof *d->vals);
        for (const cJSON *k = c->child; k; k = k->next) {
            jstr key = jstr_c(k->string ? k->string : "");
            jv *old = (jv *)dict_get(d, key);
            if (old)
                *old = from_cjson(a, k, depth + 1); /* Python's json keeps the last duplicate */
            else
                d->keys[d->n] = key, d->vals[d->n++] = from_cjson(a, k, depth + 1);
        }
        return (jv){.kind = JV_DICT, .u.d = d};
    }
    jfail(a, 0, "a variable has a JSON type the engine does not know");
}

jv jv_from_cjson(jarena *a, const void *cjson) {
    return from_cjson(a, cjson, 0);
}
