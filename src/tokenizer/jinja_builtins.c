/* Jinja's built-ins for the renderer (jinja.c): string and dict methods, tests and filters, with
 * Python's semantics (str.split with and without a separator, strip with characters, replace with
 * an empty needle, ...). The lists below are the whole supported set; the parser refuses filters
 * and tests outside it.
 *
 * Filters: abs capitalize count d default first float int items join last length list lower map
 * rejectattr replace reverse safe selectattr string title tojson trim upper.
 * Tests: boolean callable defined divisibleby eq equalto even false float in integer iterable
 * lower mapping ne none number odd sameas sequence string true undefined upper.
 * String methods: capitalize count endswith find join lower lstrip replace rstrip split startswith
 * strip title upper. Dict methods: get items keys values. */
#include "tokenizer/jinja_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ---- string methods ------------------------------------------------------------------------ */

static bool in_chars(jstr chars, const char *s, size_t k) {
    for (size_t i = 0; i + k <= chars.n;) {
        size_t l = 1;
        while (i + l < chars.n && ((unsigned char)chars.s[i + l] & 0xC0) == 0x80) l++;
        if (l == k && !memcmp(chars.s + i, s, k)) return true;
        i += l;
    }
    return false;
}

/* str.strip / lstrip / rstrip: whitespace, or the characters of chars when given. */
static jstr strip(jstr s, const jstr *chars, bool left, bool right) {
    for (;;) {
        size_t k = 0;
        if (left && s.n) {
            if (chars) {
                k = 1;
                while (k < s.n && ((unsigned char)s.s[k] & 0xC0) == 0x80) k++;
                if (!in_chars(*chars, s.s, k)) k = 0;
            } else
                k = py_space_len(s.s, s.n);
        }
        if (!k) break;
        s.s += k, s.n -= k;
    }
    for (;;) {
        size_t k = 0;
        if (right && s.n) {
            if (chars) {
                k = 1;
                while (k < s.n && ((unsigned char)s.s[s.n - k] & 0xC0) == 0x80) k++;
                if (!in_chars(*chars, s.s + s.n - k, k)) k = 0;
            } else
                k = py_space_before(s.s, s.n);
        }
        if (!k) break;
        s.n -= k;
    }
    return s;
}

const char *jr_find(jstr s, size_t from, jstr sub) {
    if (sub.n == 0) return s.s + from;
    for (size_t i = from; i + sub.n <= s.n; i++)
        if (!memcmp(s.s + i, sub.s, sub.n)) return s.s + i;
    return NULL;
}

/* str.split(sep, maxsplit): by sep, or by runs of whitespace when sep is NULL. */
static jv split(jrun *r, const jnode *n, jstr s, const jstr *sep, int64_t maxsplit) {
    if (sep && !sep->n) FAILN(r, n, "split(): the separator is empty");
    size_t np = 0, cap = 16;
    jstr *all = jalloc(r->a, cap * sizeof *all);
    size_t i = 0;
    for (;;) {
        jstr part;
        if (!sep) {
            size_t k;
            while (i < s.n && (k = py_space_len(s.s + i, s.n - i))) i += k;
            if (i >= s.n) break;
            size_t j = i;
            if (maxsplit >= 0 && (int64_t)np >= maxsplit) {
                part = strip((jstr){s.s + i, s.n - i}, NULL, false, true);
                j = s.n;
            } else {
                while (j < s.n && !py_space_len(s.s + j, s.n - j)) j++;
                part = (jstr){s.s + i, j - i};
            }
            i = j;
        } else {
            const char *hit = maxsplit >= 0 && (int64_t)np >= maxsplit ? NULL : jr_find(s, i, *sep);
            size_t j = hit ? (size_t)(hit - s.s) : s.n;
            part = (jstr){s.s + i, j - i};
            i = j + (hit ? sep->n : 0);
            if (!hit) i = s.n + 1;
        }
        if (np == cap) {
            jstr *more = jalloc(r->a, 2 * cap * sizeof *more);
            memcpy(more, all, np * sizeof *more);
            all = more, cap *= 2;
        }
        all[np++] = part;
        if (sep && i > s.n) break;
    }
    jv l = jr_list(r, np);
    for (size_t k = 0; k < np; k++) l.u.l->items[k] = jv_str(all[k]);
    return l;
}

/* str.replace(old, new, count): an empty old inserts new around every character, as Python does. */
static jstr replace(jrun *r, jstr s, jstr old, jstr rep, int64_t count) {
    ts_text t = {0};
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) {
        size_t k;
        size_t *o = jr_chars(r, s, &k);
        for (size_t c = 0; c <= k; c++) {
            if (count < 0 || done < count) jtext_add(r->a, &t, rep.s, rep.n), done++;
            if (c < k) jtext_add(r->a, &t, s.s + o[c], o[c + 1] - o[c]);
        }
        return (jstr){t.s ? t.s : "", t.n};
    }
    for (;;) {
        const char *hit = count >= 0 && done >= count ? NULL : jr_find(s, i, old);
        if (!hit) break;
        jtext_add(r->a, &t, s.s + i, (size_t)(hit - s.s) - i);
        jtext_add(r->a, &t, rep.s, rep.n);
        i = (size_t)(hit - s.s) + old.n;
        done++;
    }
    jtext_add(r->a, &t, s.s + i, s.n - i);
    return (jstr){t.s ? t.s : "", t.n};
}

/* Case mapping one character at a time (utf8proc; no multi-character expansions like ß → SS). */
typedef enum { CASE_LOWER, CASE_UPPER, CASE_CAPITALIZE, CASE_TITLE } case_mode;

static jstr change_case(jrun *r, jstr s, case_mode mode) {
    ts_text t = {0};
    bool word_start = true, first = true;
    for (size_t i = 0; i < s.n;) {
        int32_t c;
        utf8proc_ssize_t k =
            utf8proc_iterate((const utf8proc_uint8_t *)s.s + i, (utf8proc_ssize_t)(s.n - i), &c);
        if (k <= 0) {
            jtext_add(r->a, &t, s.s + i, 1);
            i++;
            continue;
        }
        bool upper =
            mode == CASE_UPPER || (mode == CASE_CAPITALIZE && first) || (mode == CASE_TITLE && word_start);
        int32_t m = upper ? utf8proc_toupper(c) : utf8proc_tolower(c);
        const utf8proc_property_t *prop = utf8proc_get_property(c);
        bool cased = prop->category == UTF8PROC_CATEGORY_LU || prop->category == UTF8PROC_CATEGORY_LL ||
                     prop->category == UTF8PROC_CATEGORY_LT;
        word_start = !cased;
        first = false;
        utf8proc_uint8_t b[4];
        jtext_add(r->a, &t, b, (size_t)utf8proc_encode_char(m, b));
        i += (size_t)k;
    }
    return (jstr){t.s ? t.s : "", t.n};
}

static jv join(jrun *r, const jnode *n, const jv *seq, jstr sep, const jstr *attribute);

static bool prefix_match(jrun *r, const jnode *n, jstr s, const jv *what, bool end) {
    if (what->kind == JV_LIST && what->is_tuple) {
        for (size_t i = 0; i < what->u.l->n; i++)
            if (prefix_match(r, n, s, &what->u.l->items[i], end)) return true;
        return false;
    }
    jstr p = jr_want_str(r, n, end ? "endswith()'s argument" : "startswith()'s argument", what);
    return p.n <= s.n && !memcmp(end ? s.s + s.n - p.n : s.s, p.s, p.n);
}

jv jr_str_method(jrun *r, const jnode *n, jstr s, jstr m, const jargs *a) {
    jv v[3];
    char what[64];
    snprintf(what, sizeof what, "str.%.*s()", (int)m.n, m.s);
    if (jstr_eq(m, "startswith") || jstr_eq(m, "endswith")) {
        static const char *const names[] = {"prefix"};
        jr_bind(r, n, what, a, names, 1, v);
        if (!jr_given(&v[0])) FAILN(r, n, "%s needs an argument", what);
        return jr_bool(prefix_match(r, n, s, &v[0], m.s[0] == 'e'));
    }
    if (jstr_eq(m, "split")) {
        static const char *const names[] = {"sep", "maxsplit"};
        jr_bind(r, n, what, a, names, 2, v);
        jstr sep = {0};
        bool by_sep = jr_given(&v[0]) && v[0].kind != JV_NONE;
        if (by_sep) sep = jr_want_str(r, n, "split()'s separator", &v[0]);
        return split(r, n, s, by_sep ? &sep : NULL,
                     jr_given(&v[1]) ? jr_want_int(r, n, "split()'s maxsplit", &v[1]) : -1);
    }
    if (jstr_eq(m, "strip") || jstr_eq(m, "lstrip") || jstr_eq(m, "rstrip")) {
        static const char *const names[] = {"chars"};
        jr_bind(r, n, what, a, names, 1, v);
        jstr chars = {0};
        bool by_chars = jr_given(&v[0]) && v[0].kind != JV_NONE;
        if (by_chars) chars = jr_want_str(r, n, "the characters to strip", &v[0]);
        return jv_str(strip(s, by_chars ? &chars : NULL, m.s[0] != 'r', m.s[0] != 'l'));
    }
    if (jstr_eq(m, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        jr_bind(r, n, what, a, names, 3, v);
        if (!jr_given(&v[0]) || !jr_given(&v[1])) FAILN(r, n, "%s needs two arguments", what);
        return jv_str(replace(r, s, jr_want_str(r, n, "replace()'s old", &v[0]),
                              jr_want_str(r, n, "replace()'s new", &v[1]),
                              jr_given(&v[2]) ? jr_want_int(r, n, "replace()'s count", &v[2]) : -1));
    }
    if (jstr_eq(m, "find") || jstr_eq(m, "count")) {
        static const char *const names[] = {"sub"};
        jr_bind(r, n, what, a, names, 1, v);
        jstr sub = jr_want_str(r, n, what, &v[0]);
        size_t k;
        size_t *o = jr_chars(r, s, &k);
        if (m.s[0] == 'f') {
            const char *hit = jr_find(s, 0, sub);
            if (!hit) return jr_int(-1);
            size_t c = 0;
            while (o[c] < (size_t)(hit - s.s)) c++;
            return jr_int((int64_t)c);
        }
        if (!sub.n) return jr_int((int64_t)k + 1);
        int64_t count = 0;
        for (const char *hit = jr_find(s, 0, sub); hit; hit = jr_find(s, (size_t)(hit - s.s) + sub.n, sub))
            count++;
        return jr_int(count);
    }
    if (jstr_eq(m, "join")) {
        static const char *const names[] = {"iterable"};
        jr_bind(r, n, what, a, names, 1, v);
        return join(r, n, &v[0], s, NULL);
    }
    jr_bind(r, n, what, a, NULL, 0, v);
    if (jstr_eq(m, "lower")) return jv_str(change_case(r, s, CASE_LOWER));
    if (jstr_eq(m, "upper")) return jv_str(change_case(r, s, CASE_UPPER));
    if (jstr_eq(m, "capitalize")) return jv_str(change_case(r, s, CASE_CAPITALIZE));
    if (jstr_eq(m, "title")) return jv_str(change_case(r, s, CASE_TITLE));
    FAILN(r, n, "the string method '%.*s' is not supported by turbospark's Jinja engine", (int)m.n, m.s);
}

static const char *const k_str_methods[] = {"capitalize", "count",  "endswith", "find",   "join",
                                            "lower",      "lstrip", "replace",  "rstrip", "split",
                                            "startswith", "strip",  "title",    "upper",  NULL};
static const char *const k_dict_methods[] = {"get", "items", "keys", "values", NULL};

bool jr_is_str_method(jstr name) {
    return jr_listed(k_str_methods, name);
}
bool jr_is_dict_method(jstr name) {
    return jr_listed(k_dict_methods, name);
}

bool jr_listed(const char *const *names, jstr s) {
    for (size_t i = 0; names[i]; i++)
        if (jstr_eq(s, names[i])) return true;
    return false;
}

static jv items_of(jrun *r, const jdict *d) {
    jv l = jr_list(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jv pair = jr_list(r, 2);
        pair.is_tuple = true;
        pair.u.l->items[0] = jv_str(d->keys[i]), pair.u.l->items[1] = d->vals[i];
        l.u.l->items[i] = pair;
    }
    return l;
}

jv jr_dict_method(jrun *r, const jnode *n, const jdict *d, jstr m, const jargs *a) {
    jv v[2];
    if (jstr_eq(m, "get")) {
        static const char *const names[] = {"key", "default"};
        jr_bind(r, n, "dict.get()", a, names, 2, v);
        const jv *hit = v[0].kind == JV_STR ? jr_dict_find(d, v[0].u.s) : NULL;
        return hit ? *hit : jr_given(&v[1]) ? v[1] : (jv){.kind = JV_NONE};
    }
    jr_bind(r, n, "this dict method", a, NULL, 0, v);
    if (jstr_eq(m, "items")) return items_of(r, d);
    jv l = jr_list(r, d->n);
    for (size_t i = 0; i < d->n; i++) l.u.l->items[i] = m.s[0] == 'k' ? jv_str(d->keys[i]) : d->vals[i];
    return l;
}

/* ---- tests --------------------------------------------------------------------------------- */

static const char *const k_tests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",        "equalto", "even", "false",  "float",
    "in",      "integer",  "iterable", "lower",       "mapping",   "ne",      "none", "number", "odd",
    "sameas",  "sequence", "string",   "true",        "undefined", "upper",   NULL};

bool jinja_has_test(jstr name) {
    return jr_listed(k_tests, name);
}

bool jr_test(jrun *r, const jnode *n, jstr t, const jv *v, const jargs *a) {
    jv arg[1];
    char what[64];
    snprintf(what, sizeof what, "the test '%.*s'", (int)t.n, t.s);
    static const char *const names[] = {"other"};
    jr_bind(r, n, what, a, names, 1, arg);
    bool needs_arg = jstr_eq(t, "divisibleby") || jstr_eq(t, "eq") || jstr_eq(t, "equalto") ||
                     jstr_eq(t, "ne") || jstr_eq(t, "in") || jstr_eq(t, "sameas");
    if (needs_arg && !jr_given(&arg[0])) FAILN(r, n, "%s needs an argument", what);
    if (!needs_arg && jr_given(&arg[0])) FAILN(r, n, "%s takes no argument", what);
    switch (t.s[0]) {
    case 'b':
        return v->kind == JV_BOOL;
    case 'c':
        return v->kind == JV_MACRO || v->kind == JV_METHOD || v->kind == JV_GLOBAL;
    case 'd':
        if (jstr_eq(t, "defined")) return v->kind != JV_UNDEF;
        if (v->kind != JV_INT && v->kind != JV_BOOL) FAILN(r, n, "divisibleby needs an integer");
        return jr_want_int(r, n, "divisibleby's argument", &arg[0]) != 0 &&
               jr_as_int(v) % jr_want_int(r, n, "divisibleby's argument", &arg[0]) == 0;
    case 'e':
        if (jstr_eq(t, "even")) return (v->kind == JV_INT || v->kind == JV_BOOL) && jr_as_int(v) % 2 == 0;
        return jv_equal(v, &arg[0]);
    case 'f':
        return jstr_eq(t, "false") ? v->kind == JV_BOOL && !v->u.b : v->kind == JV_FLOAT;
    case 'i':
        if (jstr_eq(t, "in")) return jr_contains(r, n, v, &arg[0]);
        if (jstr_eq(t, "integer")) return v->kind == JV_INT;
        return v->kind == JV_UNDEF || v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT ||
               v->kind == JV_LOOP;
    case 'l':
    case 'u':
        if (jstr_eq(t, "undefined")) return v->kind == JV_UNDEF;
        if (v->kind != JV_STR) return false;
        return jstr_eq(change_case(r, v->u.s, t.s[0] == 'l' ? CASE_LOWER : CASE_UPPER), "") ||
               (change_case(r, v->u.s, t.s[0] == 'l' ? CASE_LOWER : CASE_UPPER).n == v->u.s.n &&
                !memcmp(change_case(r, v->u.s, t.s[0] == 'l' ? CASE_LOWER : CASE_UPPER).s, v->u.s.s,
                        v->u.s.n));
    case 'm':
        return v->kind == JV_DICT;
    case 'n':
        if (jstr_eq(t, "none")) return v->kind == JV_NONE;
        if (jstr_eq(t, "ne")) return !jv_equal(v, &arg[0]);
        return jr_is_num(v);
    case 'o':
        return (v->kind == JV_INT || v->kind == JV_BOOL) && jr_as_int(v) % 2 != 0;
    case 's':
        if (jstr_eq(t, "string")) return v->kind == JV_STR;
        if (jstr_eq(t, "sequence"))
            return v->kind == JV_UNDEF || v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT;
        /* sameas: identity, which for the immutable values here is kind and value */
        return v->kind == arg[0].kind && jv_equal(v, &arg[0]);
    default:
        return v->kind == JV_BOOL && v->u.b; /* true */
    }
}

/* ---- filters ------------------------------------------------------------------------------- */

static const char *const k_filters[] = {
    "abs",  "capitalize", "count",  "d",     "default", "first", "float",      "int",     "items",
    "join", "last",       "length", "list",  "lower",   "map",   "rejectattr", "replace", "reverse",
    "safe", "selectattr", "string", "title", "tojson",  "trim",  "upper",      NULL};

bool jinja_has_filter(jstr name) {
    return jr_listed(k_filters, name);
}

static jv join(jrun *r, const jnode *n, const jv *seq, jstr sep, const jstr *attribute) {
    jlist *items = jr_iterate(r, n, seq);
    ts_text t = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i) jtext_add(r->a, &t, sep.s, sep.n);
        jv x = attribute ? jr_get_attr(r, n, &items->items[i], *attribute) : items->items[i];
        jv_to_str(r->a, &x, &t);
    }
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

/* select/rejectattr(attribute, test, test arguments...) and map(attribute=, default=) or map(filter, ...) */
static jv select_or_map(jrun *r, const jnode *n, jstr name, const jv *v, const jargs *a) {
    jlist *items = jr_iterate(r, n, v);
    jv out = jr_list(r, items->n);
    size_t k = 0;
    bool is_map = jstr_eq(name, "map");
    jstr attribute = {0};
    jv dflt = {.kind = JV_UNDEF};
    jstr test_or_filter = {0};
    jargs rest = {0};
    for (size_t i = 0; i < a->n; i++) {
        if (a->kw && a->kw[i].s) {
            if (is_map && jstr_eq(a->kw[i], "attribute"))
                attribute = jr_want_str(r, n, "map's attribute", &a->v[i]);
            else if (is_map && jstr_eq(a->kw[i], "default"))
                dflt = a->v[i];
            else
                FAILN(r, n, "the filter '%.*s' has no argument named '%.*s'", (int)name.n, name.s,
                      (int)a->kw[i].n, a->kw[i].s);
        } else if (!is_map && !attribute.s)
            attribute = jr_want_str(r, n, "the attribute to select by", &a->v[i]);
        else if (!test_or_filter.s)
            test_or_filter = jr_want_str(r, n, is_map ? "map's filter" : "the test to select by", &a->v[i]);
        else if (!rest.v)
            rest = (jargs){.n = a->n - i, .v = a->v + i, .kw = a->kw ? a->kw + i : NULL};
    }
    if (!attribute.s && !test_or_filter.s)
        FAILN(r, n, "the filter '%.*s' needs an attribute", (int)name.n, name.s);
    if (test_or_filter.s && !(is_map ? jinja_has_filter(test_or_filter) : jinja_has_test(test_or_filter)))
        FAILN(r, n, "the %s '%.*s' is not supported by turbospark's Jinja engine", is_map ? "filter" : "test",
              (int)test_or_filter.n, test_or_filter.s);
    for (size_t i = 0; i < items->n; i++) {
        jv x = attribute.s ? jr_get_attr(r, n, &items->items[i], attribute) : items->items[i];
        if (is_map) {
            if (x.kind == JV_UNDEF && jr_given(&dflt)) x = dflt;
            out.u.l->items[k++] = test_or_filter.s ? jr_filter(r, n, test_or_filter, &x, &rest) : x;
            continue;
        }
        bool hit = test_or_filter.s ? jr_test(r, n, test_or_filter, &x, &rest) : jv_truthy(&x);
        if (hit == jstr_eq(name, "selectattr")) out.u.l->items[k++] = items->items[i];
    }
    out.u.l->n = k;
    return out;
}

static jv tojson(jrun *r, const jnode *n, const jv *v, const jargs *a) {
    jv o[4];
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    jr_bind(r, n, "the filter 'tojson'", a, names, 4, o);
    int indent = -1;
    if (jr_given(&o[1]) && o[1].kind != JV_NONE) {
        int64_t i = jr_want_int(r, n, "tojson's indent", &o[1]);
        indent = i < 0 ? 0 : i > 64 ? 64 : (int)i;
    }
    jstr seps[2];
    if (jr_given(&o[2]) && o[2].kind != JV_NONE) {
        if (o[2].kind != JV_LIST || o[2].u.l->n != 2)
            FAILN(r, n, "tojson's separators must be a pair of strings");
        for (int i = 0; i < 2; i++) seps[i] = jr_want_str(r, n, "a tojson separator", &o[2].u.l->items[i]);
    }
    ts_text t = {0};
    jv_tojson(r->a, n->line, v, jr_given(&o[0]) && jv_truthy(&o[0]), indent,
              jr_given(&o[2]) && o[2].kind != JV_NONE ? seps : NULL, jr_given(&o[3]) && jv_truthy(&o[3]), &t);
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

static jv number_filter(jrun *r, const jnode *n, const jv *v, bool to_int, const jargs *a) {
    jv o[1];
    static const char *const names[] = {"default"};
    jr_bind(r, n, to_int ? "the filter 'int'" : "the filter 'float'", a, names, 1, o);
    jv dflt = jr_given(&o[0]) ? o[0] : to_int ? jr_int(0) : (jv){.kind = JV_FLOAT, .u.f = 0};
    double x;
    if (jr_is_num(v))
        x = jr_as_double(v);
    else if (v->kind == JV_STR) {
        char buf[64];
        jstr s = strip(v->u.s, NULL, true, true);
        if (!s.n || s.n >= sizeof buf) return dflt;
        memcpy(buf, s.s, s.n), buf[s.n] = 0;
        char *end;
        x = strtod(buf, &end);
        if (*end) return dflt;
    } else
        return dflt;
    if (!to_int) return (jv){.kind = JV_FLOAT, .u.f = x};
    if (v->kind == JV_INT || v->kind == JV_BOOL) return jr_int(jr_as_int(v));
    if (!isfinite(x) || fabs(x) >= 9.2e18) return dflt;
    return jr_int((int64_t)x);
}

jv jr_filter(jrun *r, const jnode *n, jstr name, const jv *v, const jargs *a) {
    char what[64];
    snprintf(what, sizeof what, "the filter '%.*s'", (int)name.n, name.s);
    jv o[3];
    if (jstr_eq(name, "tojson")) return tojson(r, n, v, a);
    if (jstr_eq(name, "map") || jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr"))
        return select_or_map(r, n, name, v, a);
    if (jstr_eq(name, "int") || jstr_eq(name, "float")) return number_filter(r, n, v, name.s[0] == 'i', a);
    if (jstr_eq(name, "default") || jstr_eq(name, "d")) {
        static const char *const names[] = {"default_value", "boolean"};
        jr_bind(r, n, what, a, names, 2, o);
        bool use = v->kind == JV_UNDEF || (jr_given(&o[1]) && jv_truthy(&o[1]) && !jv_truthy(v));
        return use ? (jr_given(&o[0]) ? o[0] : jv_str(jstr_c(""))) : *v;
    }
    if (jstr_eq(name, "join")) {
        static const char *const names[] = {"d", "attribute"};
        jr_bind(r, n, what, a, names, 2, o);
        jstr attr = jr_given(&o[1]) ? jr_want_str(r, n, "join's attribute", &o[1]) : (jstr){0};
        return join(r, n, v, jr_given(&o[0]) ? jr_text(r, &o[0]) : jstr_c(""),
                    jr_given(&o[1]) ? &attr : NULL);
    }
    if (jstr_eq(name, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        jr_bind(r, n, what, a, names, 3, o);
        if (!jr_given(&o[0]) || !jr_given(&o[1])) FAILN(r, n, "%s needs two arguments", what);
        return jv_str(replace(
            r, jr_text(r, v), jr_text(r, &o[0]), jr_text(r, &o[1]),
            jr_given(&o[2]) && o[2].kind != JV_NONE ? jr_want_int(r, n, "replace's count", &o[2]) : -1));
    }
    if (jstr_eq(name, "trim")) {
        static const char *const names[] = {"chars"};
        jr_bind(r, n, what, a, names, 1, o);
        jstr chars = jr_given(&o[0]) && o[0].kind != JV_NONE ? jr_want_str(r, n, "trim's characters", &o[0])
                                                             : (jstr){0};
        jv s = jv_str(strip(jr_text(r, v), chars.s ? &chars : NULL, true, true));
        s.markup = v->markup;
        return s;
    }
    jr_bind(r, n, what, a, NULL, 0, o);
    if (jstr_eq(name, "length") || jstr_eq(name, "count")) {
        if (v->kind == JV_UNDEF) return jr_int(0);
        if (v->kind == JV_STR) {
            size_t k;
            jr_chars(r, v->u.s, &k);
            return jr_int((int64_t)k);
        }
        if (v->kind == JV_LIST) return jr_int((int64_t)v->u.l->n);
        if (v->kind == JV_DICT) return jr_int((int64_t)v->u.d->n);
        FAILN(r, n, "object of type '%s' has no len()", jv_type_name(v));
    }
    if (jstr_eq(name, "string")) return v->kind == JV_STR ? *v : jv_str(jr_text(r, v));
    if (jstr_eq(name, "safe")) {
        jv s = jv_str(jr_text(r, v));
        s.markup = true;
        return s;
    }
    if (jstr_eq(name, "lower")) return jv_str(change_case(r, jr_text(r, v), CASE_LOWER));
    if (jstr_eq(name, "upper")) return jv_str(change_case(r, jr_text(r, v), CASE_UPPER));
    if (jstr_eq(name, "capitalize")) return jv_str(change_case(r, jr_text(r, v), CASE_CAPITALIZE));
    if (jstr_eq(name, "title")) return jv_str(change_case(r, jr_text(r, v), CASE_TITLE));
    if (jstr_eq(name, "items")) {
        if (v->kind == JV_UNDEF) return jr_list(r, 0);
        if (v->kind != JV_DICT) FAILN(r, n, "the filter 'items' needs a mapping, not %s", jv_type_name(v));
        return items_of(r, v->u.d);
    }
    if (jstr_eq(name, "list")) {
        jlist *l = jr_iterate(r, n, v);
        return (jv){.kind = JV_LIST, .u.l = l};
    }
    if (jstr_eq(name, "first") || jstr_eq(name, "last")) {
        jlist *l = jr_iterate(r, n, v);
        if (!l->n)
            return jv_undef(r->a, "the sequence is empty, so it has no %s item",
                            name.s[0] == 'f' ? "first" : "last");
        return l->items[name.s[0] == 'f' ? 0 : l->n - 1];
    }
    if (jstr_eq(name, "reverse")) {
        if (v->kind == JV_STR) return jr_slice(r, n, v, NULL, NULL, &(jv){.kind = JV_INT, .u.i = -1});
        jlist *l = jr_iterate(r, n, v);
        jv out = jr_list(r, l->n);
        for (size_t i = 0; i < l->n; i++) out.u.l->items[i] = l->items[l->n - 1 - i];
        return out;
    }
    /* abs */
    if (v->kind == JV_INT && v->u.i != INT64_MIN) return jr_int(v->u.i < 0 ? -v->u.i : v->u.i);
    if (v->kind == JV_FLOAT) return (jv){.kind = JV_FLOAT, .u.f = fabs(v->u.f)};
    if (v->kind == JV_BOOL) return jr_int(v->u.b);
    FAILN(r, n, "bad operand type for abs(): '%s'", jv_type_name(v));
}
