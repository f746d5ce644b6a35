/* The Jinja renderer: runs the tree of jinja_parse.c over values of jinja_value.c (see jinja.h).
 *
 * Scopes are Jinja2's: a for loop's body gets a fresh scope each iteration (a `set` inside does not
 * survive the iteration: templates use namespace() for that), a macro's body gets its own scope
 * over the template's top level, and if-blocks share their enclosing scope. Names are looked up
 * through the scopes, then the render's variables, then the globals.
 *
 * Filters: abs capitalize count d default first float int items join last length list lower map
 * rejectattr replace reverse safe selectattr string title tojson trim upper.
 * Tests: boolean callable defined divisibleby eq equalto even false float in integer iterable
 * lower mapping ne none number odd sameas sequence string true undefined upper.
 * String methods: capitalize count endswith find join lower lstrip replace rstrip split startswith
 * strip title upper. Dict methods: get items keys values.
 * Globals: dict namespace range raise_exception strftime_now. */
#include "tokenizer/jinja_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

typedef struct frame frame;
struct frame {
    frame *parent;
    jdict vars;
};

typedef struct run {
    jarena *a;
    const jdict *vars; /* the caller's variables */
    frame *top;        /* the template's top-level scope */
    long steps;        /* loop iterations and macro calls so far */
    int depth;         /* macro calls under way */
    int jump;          /* 1: break, 2: continue pending */
} run;

#define FAILN(r, n, ...) jfail((r)->a, (n)->line, __VA_ARGS__)

static jv eval(run *r, const jnode *n, frame *f);
static void exec(run *r, const jnode *n, frame *f, ts_text *out);

/* ---- small helpers ------------------------------------------------------------------------- */

static jv make_bool(bool b) {
    return (jv){.kind = JV_BOOL, .u.b = b};
}
static jv make_int(int64_t i) {
    return (jv){.kind = JV_INT, .u.i = i};
}
static jv make_list(run *r, size_t n) {
    jlist *l = jalloc(r->a, sizeof *l);
    l->items = jalloc(r->a, (n ? n : 1) * sizeof *l->items);
    l->n = n;
    return (jv){.kind = JV_LIST, .u.l = l};
}
static jv make_dict(run *r, jkind kind) {
    jdict *d = jalloc(r->a, sizeof *d);
    return (jv){.kind = (uint8_t)kind, .u.d = d};
}

static jv *dict_slot(run *r, jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].n == k.n && !memcmp(d->keys[i].s, k.s, k.n)) return &d->vals[i];
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 8;
        jstr *keys = jalloc(r->a, cap * sizeof *keys);
        jv *vals = jalloc(r->a, cap * sizeof *vals);
        if (d->n) memcpy(keys, d->keys, d->n * sizeof *keys), memcpy(vals, d->vals, d->n * sizeof *vals);
        d->keys = keys, d->vals = vals, d->cap = cap;
    }
    d->keys[d->n] = k;
    d->vals[d->n] = (jv){.kind = JV_UNDEF};
    return &d->vals[d->n++];
}
static const jv *dict_find(const jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].n == k.n && !memcmp(d->keys[i].s, k.s, k.n)) return &d->vals[i];
    return NULL;
}

static jstr text_of(run *r, const jv *v) {
    if (v->kind == JV_STR) return v->u.s;
    ts_text t = {0};
    jv_to_str(r->a, v, &t);
    return (jstr){t.s ? t.s : "", t.n};
}

static jstr concat(run *r, jstr x, jstr y) {
    char *s = jalloc(r->a, x.n + y.n + 1);
    if (x.n) memcpy(s, x.s, x.n);
    if (y.n) memcpy(s + x.n, y.s, y.n);
    return (jstr){s, x.n + y.n};
}

/* Fails with the Undefined's own sentence, as Jinja2's UndefinedError does. */
static _Noreturn void fail_undef(run *r, const jnode *n, const jv *u) {
    FAILN(r, n, "%s", u->u.why ? u->u.why : "a value is undefined");
}

static void step(run *r, const jnode *n) {
    if (++r->steps > TS_JINJA_MAX_STEPS)
        FAILN(r, n, "the template ran more than %ld loop iterations and macro calls (a runaway loop?)",
              TS_JINJA_MAX_STEPS);
}

/* UTF-8 character boundaries of s: offsets of each character, and the end. */
static size_t *char_offsets(run *r, jstr s, size_t *count) {
    size_t *o = jalloc(r->a, (s.n + 1) * sizeof *o), k = 0;
    for (size_t i = 0; i < s.n;) {
        o[k++] = i;
        i++;
        while (i < s.n && ((unsigned char)s.s[i] & 0xC0) == 0x80) i++;
    }
    o[k] = s.n;
    *count = k;
    return o;
}

/* The items a for loop or a filter walks: list items, dict keys, string characters. */
static jlist *iterate(run *r, const jnode *n, const jv *v) {
    switch (v->kind) {
    case JV_UNDEF:
        return make_list(r, 0).u.l;
    case JV_LIST:
        return v->u.l;
    case JV_DICT: {
        jlist *l = make_list(r, v->u.d->n).u.l;
        for (size_t i = 0; i < l->n; i++) l->items[i] = jv_str(v->u.d->keys[i]);
        return l;
    }
    case JV_STR: {
        size_t k;
        size_t *o = char_offsets(r, v->u.s, &k);
        jlist *l = make_list(r, k).u.l;
        for (size_t i = 0; i < k; i++) l->items[i] = jv_str((jstr){v->u.s.s + o[i], o[i + 1] - o[i]});
        return l;
    }
    default:
        FAILN(r, n, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- arguments ----------------------------------------------------------------------------- */

/* Positional and keyword arguments, evaluated. */
typedef struct args {
    size_t n;
    jv *v;
    jstr *kw; /* kw[i].s NULL: positional */
} args;

static args eval_args(run *r, const jnode *n, frame *f) {
    args a = {.n = n->n, .v = jalloc(r->a, (n->n + 1) * sizeof(jv)), .kw = n->kw};
    for (size_t i = 0; i < n->n; i++) a.v[i] = eval(r, n->list[i], f);
    return a;
}

/* Binds arguments to names[0..k) (positional first, then by keyword); unset slots stay
 * JV_UNDEF with why NULL. Fails on too many or unknown arguments. */
static void bind(run *r, const jnode *n, const char *what, const args *a, const char *const *names, size_t k,
                 jv *out) {
    for (size_t i = 0; i < k; i++) out[i] = (jv){.kind = JV_UNDEF};
    size_t pos = 0;
    for (size_t i = 0; i < a->n; i++) {
        if (!a->kw || !a->kw[i].s) {
            if (pos >= k) FAILN(r, n, "%s takes at most %zu argument%s", what, k, k == 1 ? "" : "s");
            out[pos++] = a->v[i];
            continue;
        }
        size_t j = 0;
        while (j < k && !jstr_eq(a->kw[i], names[j])) j++;
        if (j == k) FAILN(r, n, "%s has no argument named '%.*s'", what, (int)a->kw[i].n, a->kw[i].s);
        out[j] = a->v[i];
    }
}

static bool given(const jv *v) {
    return !(v->kind == JV_UNDEF && !v->u.why);
}

static jstr want_str(run *r, const jnode *n, const char *what, const jv *v) {
    if (v->kind != JV_STR) FAILN(r, n, "%s must be a string, not %s", what, jv_type_name(v));
    return v->u.s;
}

static int64_t want_int(run *r, const jnode *n, const char *what, const jv *v) {
    if (v->kind != JV_INT && v->kind != JV_BOOL)
        FAILN(r, n, "%s must be an integer, not %s", what, jv_type_name(v));
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

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

static const char *find_in(jstr s, size_t from, jstr sub) {
    if (sub.n == 0) return s.s + from;
    for (size_t i = from; i + sub.n <= s.n; i++)
        if (!memcmp(s.s + i, sub.s, sub.n)) return s.s + i;
    return NULL;
}

/* str.split(sep, maxsplit): by sep, or by runs of whitespace when sep is NULL. */
static jv split(run *r, const jnode *n, jstr s, const jstr *sep, int64_t maxsplit) {
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
            const char *hit = maxsplit >= 0 && (int64_t)np >= maxsplit ? NULL : find_in(s, i, *sep);
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
    jv l = make_list(r, np);
    for (size_t k = 0; k < np; k++) l.u.l->items[k] = jv_str(all[k]);
    return l;
}

/* str.replace(old, new, count): an empty old inserts new around every character, as Python does. */
static jstr replace(run *r, jstr s, jstr old, jstr rep, int64_t count) {
    ts_text t = {0};
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) {
        size_t k;
        size_t *o = char_offsets(r, s, &k);
        for (size_t c = 0; c <= k; c++) {
            if (count < 0 || done < count) jtext_add(r->a, &t, rep.s, rep.n), done++;
            if (c < k) jtext_add(r->a, &t, s.s + o[c], o[c + 1] - o[c]);
        }
        return (jstr){t.s ? t.s : "", t.n};
    }
    for (;;) {
        const char *hit = count >= 0 && done >= count ? NULL : find_in(s, i, old);
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

static jstr change_case(run *r, jstr s, case_mode mode) {
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

static jv join(run *r, const jnode *n, const jv *seq, jstr sep, const jstr *attribute);
static jv get_attr(run *r, const jnode *n, const jv *obj, jstr name);

static bool prefix_match(run *r, const jnode *n, jstr s, const jv *what, bool end) {
    if (what->kind == JV_LIST && what->is_tuple) {
        for (size_t i = 0; i < what->u.l->n; i++)
            if (prefix_match(r, n, s, &what->u.l->items[i], end)) return true;
        return false;
    }
    jstr p = want_str(r, n, end ? "endswith()'s argument" : "startswith()'s argument", what);
    return p.n <= s.n && !memcmp(end ? s.s + s.n - p.n : s.s, p.s, p.n);
}

static jv call_str_method(run *r, const jnode *n, jstr s, jstr m, const args *a) {
    jv v[3];
    char what[64];
    snprintf(what, sizeof what, "str.%.*s()", (int)m.n, m.s);
    if (jstr_eq(m, "startswith") || jstr_eq(m, "endswith")) {
        static const char *const names[] = {"prefix"};
        bind(r, n, what, a, names, 1, v);
        if (!given(&v[0])) FAILN(r, n, "%s needs an argument", what);
        return make_bool(prefix_match(r, n, s, &v[0], m.s[0] == 'e'));
    }
    if (jstr_eq(m, "split")) {
        static const char *const names[] = {"sep", "maxsplit"};
        bind(r, n, what, a, names, 2, v);
        jstr sep = {0};
        bool by_sep = given(&v[0]) && v[0].kind != JV_NONE;
        if (by_sep) sep = want_str(r, n, "split()'s separator", &v[0]);
        return split(r, n, s, by_sep ? &sep : NULL,
                     given(&v[1]) ? want_int(r, n, "split()'s maxsplit", &v[1]) : -1);
    }
    if (jstr_eq(m, "strip") || jstr_eq(m, "lstrip") || jstr_eq(m, "rstrip")) {
        static const char *const names[] = {"chars"};
        bind(r, n, what, a, names, 1, v);
        jstr chars = {0};
        bool by_chars = given(&v[0]) && v[0].kind != JV_NONE;
        if (by_chars) chars = want_str(r, n, "the characters to strip", &v[0]);
        return jv_str(strip(s, by_chars ? &chars : NULL, m.s[0] != 'r', m.s[0] != 'l'));
    }
    if (jstr_eq(m, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        bind(r, n, what, a, names, 3, v);
        if (!given(&v[0]) || !given(&v[1])) FAILN(r, n, "%s needs two arguments", what);
        return jv_str(replace(r, s, want_str(r, n, "replace()'s old", &v[0]),
                              want_str(r, n, "replace()'s new", &v[1]),
                              given(&v[2]) ? want_int(r, n, "replace()'s count", &v[2]) : -1));
    }
    if (jstr_eq(m, "find") || jstr_eq(m, "count")) {
        static const char *const names[] = {"sub"};
        bind(r, n, what, a, names, 1, v);
        jstr sub = want_str(r, n, what, &v[0]);
        size_t k;
        size_t *o = char_offsets(r, s, &k);
        if (m.s[0] == 'f') {
            const char *hit = find_in(s, 0, sub);
            if (!hit) return make_int(-1);
            size_t c = 0;
            while (o[c] < (size_t)(hit - s.s)) c++;
            return make_int((int64_t)c);
        }
        if (!sub.n) return make_int((int64_t)k + 1);
        int64_t count = 0;
        for (const char *hit = find_in(s, 0, sub); hit; hit = find_in(s, (size_t)(hit - s.s) + sub.n, sub))
            count++;
        return make_int(count);
    }
    if (jstr_eq(m, "join")) {
        static const char *const names[] = {"iterable"};
        bind(r, n, what, a, names, 1, v);
        return join(r, n, &v[0], s, NULL);
    }
    bind(r, n, what, a, NULL, 0, v);
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

static bool listed(const char *const *names, jstr s) {
    for (size_t i = 0; names[i]; i++)
        if (jstr_eq(s, names[i])) return true;
    return false;
}

static jv items_of(run *r, const jdict *d) {
    jv l = make_list(r, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jv pair = make_list(r, 2);
        pair.is_tuple = true;
        pair.u.l->items[0] = jv_str(d->keys[i]), pair.u.l->items[1] = d->vals[i];
        l.u.l->items[i] = pair;
    }
    return l;
}

static jv call_dict_method(run *r, const jnode *n, const jdict *d, jstr m, const args *a) {
    jv v[2];
    if (jstr_eq(m, "get")) {
        static const char *const names[] = {"key", "default"};
        bind(r, n, "dict.get()", a, names, 2, v);
        const jv *hit = v[0].kind == JV_STR ? dict_find(d, v[0].u.s) : NULL;
        return hit ? *hit : given(&v[1]) ? v[1] : (jv){.kind = JV_NONE};
    }
    bind(r, n, "this dict method", a, NULL, 0, v);
    if (jstr_eq(m, "items")) return items_of(r, d);
    jv l = make_list(r, d->n);
    for (size_t i = 0; i < d->n; i++) l.u.l->items[i] = m.s[0] == 'k' ? jv_str(d->keys[i]) : d->vals[i];
    return l;
}

/* ---- attributes and items ------------------------------------------------------------------ */

static jv method(run *r, const jv *obj, jstr name) {
    jv m = {.kind = JV_METHOD, .u.s = name};
    m.self = jalloc(r->a, sizeof *m.self);
    *m.self = *obj;
    return m;
}

/* obj.name: Python attributes first (methods of str and dict), then items, as Jinja2's getattr. */
static jv get_attr(run *r, const jnode *n, const jv *obj, jstr name) {
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, n, obj);
    case JV_DICT:
        if (listed(k_dict_methods, name)) return method(r, obj, name);
        /* fall through */
    case JV_NS: {
        const jv *v = dict_find(obj->u.d, name);
        if (v) return *v;
        break;
    }
    case JV_STR:
        if (listed(k_str_methods, name)) return method(r, obj, name);
        break;
    case JV_LOOP: {
        const jloop *l = obj->u.loop;
        size_t len = l->items->n, i = l->i;
        if (jstr_eq(name, "index")) return make_int((int64_t)i + 1);
        if (jstr_eq(name, "index0")) return make_int((int64_t)i);
        if (jstr_eq(name, "revindex")) return make_int((int64_t)(len - i));
        if (jstr_eq(name, "revindex0")) return make_int((int64_t)(len - i - 1));
        if (jstr_eq(name, "first")) return make_bool(i == 0);
        if (jstr_eq(name, "last")) return make_bool(i + 1 == len);
        if (jstr_eq(name, "length")) return make_int((int64_t)len);
        if (jstr_eq(name, "depth")) return make_int(1);
        if (jstr_eq(name, "depth0")) return make_int(0);
        if (jstr_eq(name, "previtem"))
            return i > 0 ? l->items->items[i - 1] : jv_undef(r->a, "there is no previous item");
        if (jstr_eq(name, "nextitem"))
            return i + 1 < len ? l->items->items[i + 1] : jv_undef(r->a, "there is no next item");
        FAILN(r, n, "loop.%.*s is not supported by turbospark's Jinja engine", (int)name.n, name.s);
    }
    default:
        break;
    }
    return jv_undef(r->a, "'%s object' has no attribute '%.*s'", jv_type_name(obj), (int)name.n, name.s);
}

static bool to_index(const jv *k, size_t len, int64_t *i) {
    if (k->kind != JV_INT && k->kind != JV_BOOL) return false;
    int64_t x = k->kind == JV_INT ? k->u.i : k->u.b;
    if (x < 0) x += (int64_t)len;
    *i = x;
    return x >= 0 && (uint64_t)x < len;
}

/* obj[key]: items first, then attributes for string keys, as Jinja2's getitem. */
static jv get_item(run *r, const jnode *n, const jv *obj, const jv *key) {
    int64_t i;
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, n, obj);
    case JV_LIST:
        if (to_index(key, obj->u.l->n, &i)) return obj->u.l->items[i];
        break;
    case JV_STR: {
        size_t k;
        size_t *o = char_offsets(r, obj->u.s, &k);
        if (to_index(key, k, &i)) return jv_str((jstr){obj->u.s.s + o[i], o[i + 1] - o[i]});
        break;
    }
    case JV_DICT:
        if (key->kind == JV_STR) {
            const jv *v = dict_find(obj->u.d, key->u.s);
            if (v) return *v;
        }
        break;
    default:
        break;
    }
    if (key->kind == JV_STR) return get_attr(r, n, obj, key->u.s);
    ts_text t = {0};
    jv_repr(r->a, key, &t);
    return jv_undef(r->a, "'%s object' has no element %.*s", jv_type_name(obj), (int)t.n, t.s ? t.s : "");
}

/* Python's slice indices for a sequence of len items. */
static jv slice(run *r, const jnode *n, const jv *obj, const jv *lo, const jv *hi, const jv *st) {
    if (obj->kind == JV_UNDEF) fail_undef(r, n, obj);
    if (obj->kind != JV_LIST && obj->kind != JV_STR) FAILN(r, n, "a %s cannot be sliced", jv_type_name(obj));
    size_t count;
    size_t *o = obj->kind == JV_STR ? char_offsets(r, obj->u.s, &count) : NULL;
    if (obj->kind == JV_LIST) count = obj->u.l->n;
    int64_t len = (int64_t)count, stepv = 1;
    if (st && st->kind != JV_NONE) stepv = want_int(r, n, "a slice step", st);
    if (!stepv) FAILN(r, n, "a slice step cannot be zero");
    int64_t start, stop;
    const jv *ends[2] = {lo, hi};
    int64_t *outs[2] = {&start, &stop};
    for (int e = 0; e < 2; e++) {
        if (!ends[e] || ends[e]->kind == JV_NONE) {
            /* defaults: the whole sequence in the step's direction (-1: before the first item) */
            *outs[e] = e == 0 ? (stepv > 0 ? 0 : len - 1) : (stepv > 0 ? len : -1);
            continue;
        }
        int64_t x = want_int(r, n, "a slice index", ends[e]);
        if (x < 0) x += len;
        if (stepv > 0)
            x = x < 0 ? 0 : x > len ? len : x;
        else
            x = x < -1 ? -1 : x > len - 1 ? len - 1 : x;
        *outs[e] = x;
    }
    size_t m = 0;
    int64_t *idx = jalloc(r->a, (count + 1) * sizeof *idx);
    for (int64_t k = start; stepv > 0 ? k < stop : k > stop; k += stepv) idx[m++] = k;
    if (obj->kind == JV_LIST) {
        jv l = make_list(r, m);
        l.is_tuple = obj->is_tuple;
        for (size_t k = 0; k < m; k++) l.u.l->items[k] = obj->u.l->items[idx[k]];
        return l;
    }
    ts_text t = {0};
    for (size_t k = 0; k < m; k++) jtext_add(r->a, &t, obj->u.s.s + o[idx[k]], o[idx[k] + 1] - o[idx[k]]);
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

/* ---- operators ----------------------------------------------------------------------------- */

static bool is_num(const jv *v) {
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}
static double as_double(const jv *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}
static int64_t as_int(const jv *v) { /* ints and bools; 0 for anything else */
    return v->kind == JV_INT ? v->u.i : v->kind == JV_BOOL ? v->u.b : 0;
}

/* Markup's escape(): what `+` does to a plain string joined to a safe one. */
static jstr html_escape(run *r, jstr s) {
    ts_text t = {0};
    for (size_t i = 0; i < s.n; i++) {
        const char *e = s.s[i] == '&'    ? "&amp;"
                        : s.s[i] == '<'  ? "&lt;"
                        : s.s[i] == '>'  ? "&gt;"
                        : s.s[i] == '"'  ? "&#34;"
                        : s.s[i] == '\'' ? "&#39;"
                                         : NULL;
        if (e)
            jtext_add(r->a, &t, e, strlen(e));
        else
            jtext_add(r->a, &t, s.s + i, 1);
    }
    return (jstr){t.s ? t.s : "", t.n};
}

static bool contains(run *r, const jnode *n, const jv *item, const jv *container) {
    switch (container->kind) {
    case JV_UNDEF:
        return false;
    case JV_STR: {
        if (item->kind == JV_UNDEF) fail_undef(r, n, item);
        jstr s = want_str(r, n, "the left side of 'in' a string", item);
        return find_in(container->u.s, 0, s) != NULL;
    }
    case JV_LIST:
        for (size_t i = 0; i < container->u.l->n; i++)
            if (jv_equal(item, &container->u.l->items[i])) return true;
        return false;
    case JV_DICT:
        return item->kind == JV_STR && dict_find(container->u.d, item->u.s);
    default:
        FAILN(r, n, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(run *r, const jnode *n, const jv *x, const jv *y) {
    if (x->kind == JV_UNDEF) fail_undef(r, n, x);
    if (y->kind == JV_UNDEF) fail_undef(r, n, y);
    if (is_num(x) && is_num(y)) {
        double a = as_double(x), b = as_double(y);
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT)
            return (as_int(x) > as_int(y)) - (as_int(x) < as_int(y));
        return (a > b) - (a < b);
    }
    if (x->kind == JV_STR && y->kind == JV_STR) {
        int c = memcmp(x->u.s.s, y->u.s.s, x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n);
        return c ? (c > 0) - (c < 0) : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
    }
    FAILN(r, n, "'%s' and '%s' cannot be ordered", jv_type_name(x), jv_type_name(y));
}

static jv repeat(run *r, const jnode *n, const jv *seq, int64_t times) {
    if (times < 0) times = 0;
    size_t unit = seq->kind == JV_STR ? seq->u.s.n : seq->u.l->n * sizeof(jv);
    if (unit && (uint64_t)times > TS_JINJA_MAX_BYTES / unit)
        FAILN(r, n, "a repetition would exceed %zu MiB", TS_JINJA_MAX_BYTES >> 20);
    if (seq->kind == JV_STR) {
        ts_text t = {0};
        for (int64_t i = 0; i < times; i++) jtext_add(r->a, &t, seq->u.s.s, seq->u.s.n);
        return jv_str((jstr){t.s ? t.s : "", t.n});
    }
    size_t k = seq->u.l->n;
    jv l = make_list(r, k * (size_t)times);
    for (int64_t i = 0; i < times; i++) memcpy(l.u.l->items + (size_t)i * k, seq->u.l->items, k * sizeof(jv));
    return l;
}

static jv arith(run *r, const jnode *n, int op, const jv *x, const jv *y) {
    static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    if (x->kind == JV_UNDEF) fail_undef(r, n, x);
    if (y->kind == JV_UNDEF) fail_undef(r, n, y);
    if (op == JOP_ADD && x->kind == JV_STR && y->kind == JV_STR) {
        if (x->markup != y->markup) { /* Markup + str escapes the plain side */
            jstr a = x->markup ? x->u.s : html_escape(r, x->u.s),
                 b = y->markup ? y->u.s : html_escape(r, y->u.s);
            jv s = jv_str(concat(r, a, b));
            s.markup = true;
            return s;
        }
        jv s = jv_str(concat(r, x->u.s, y->u.s));
        s.markup = x->markup;
        return s;
    }
    if (op == JOP_ADD && x->kind == JV_LIST && y->kind == JV_LIST && x->is_tuple == y->is_tuple) {
        jv l = make_list(r, x->u.l->n + y->u.l->n);
        l.is_tuple = x->is_tuple;
        memcpy(l.u.l->items, x->u.l->items, x->u.l->n * sizeof(jv));
        memcpy(l.u.l->items + x->u.l->n, y->u.l->items, y->u.l->n * sizeof(jv));
        return l;
    }
    if (op == JOP_MUL && (x->kind == JV_STR || x->kind == JV_LIST) &&
        (y->kind == JV_INT || y->kind == JV_BOOL))
        return repeat(r, n, x, as_int(y));
    if (op == JOP_MUL && (y->kind == JV_STR || y->kind == JV_LIST) &&
        (x->kind == JV_INT || x->kind == JV_BOOL))
        return repeat(r, n, y, as_int(x));
    if (!is_num(x) || !is_num(y))
        FAILN(r, n, "unsupported operand types for %s: '%s' and '%s'", sym[op], jv_type_name(x),
              jv_type_name(y));
    bool ints = x->kind != JV_FLOAT && y->kind != JV_FLOAT;
    double a = as_double(x), b = as_double(y);
    int64_t i = as_int(x), j = as_int(y), k;
    switch (op) {
    case JOP_ADD:
        if (ints && !__builtin_add_overflow(i, j, &k)) return make_int(k);
        return (jv){.kind = JV_FLOAT, .u.f = a + b};
    case JOP_SUB:
        if (ints && !__builtin_sub_overflow(i, j, &k)) return make_int(k);
        return (jv){.kind = JV_FLOAT, .u.f = a - b};
    case JOP_MUL:
        if (ints && !__builtin_mul_overflow(i, j, &k)) return make_int(k);
        return (jv){.kind = JV_FLOAT, .u.f = a * b};
    case JOP_DIV:
        if (b == 0) FAILN(r, n, "division by zero");
        return (jv){.kind = JV_FLOAT, .u.f = a / b};
    case JOP_FLOORDIV:
    case JOP_MOD:
        if (b == 0) FAILN(r, n, "division by zero");
        if (ints && !(i == INT64_MIN && j == -1)) {
            int64_t q = i / j, m = i % j;
            if (m != 0 && ((m < 0) != (j < 0))) q--, m += j; /* Python rounds toward minus infinity */
            return make_int(op == JOP_MOD ? m : q);
        }
        {
            double q = floor(a / b), m = fmod(a, b);
            if (m != 0 && ((m < 0) != (b < 0))) m += b;
            return (jv){.kind = JV_FLOAT, .u.f = op == JOP_MOD ? m : q};
        }
    default: /* JOP_POW */
        if (ints && j >= 0) {
            int64_t p = 1;
            for (int64_t e = 0; e < j; e++)
                if (__builtin_mul_overflow(p, i, &p)) return (jv){.kind = JV_FLOAT, .u.f = pow(a, b)};
            return make_int(p);
        }
        return (jv){.kind = JV_FLOAT, .u.f = pow(a, b)};
    }
}

static jv binary(run *r, const jnode *n, const jv *x, const jv *y) {
    switch (n->op) {
    case JOP_CONCAT:
        return jv_str(concat(r, text_of(r, x), text_of(r, y)));
    case JOP_EQ:
        return make_bool(jv_equal(x, y));
    case JOP_NE:
        return make_bool(!jv_equal(x, y));
    case JOP_LT:
        return make_bool(compare(r, n, x, y) < 0);
    case JOP_LE:
        return make_bool(compare(r, n, x, y) <= 0);
    case JOP_GT:
        return make_bool(compare(r, n, x, y) > 0);
    case JOP_GE:
        return make_bool(compare(r, n, x, y) >= 0);
    case JOP_IN:
        return make_bool(contains(r, n, x, y));
    case JOP_NOT_IN:
        return make_bool(!contains(r, n, x, y));
    case JOP_MOD:
        if (x->kind == JV_STR) FAILN(r, n, "string formatting with '%%' is not supported");
        /* fall through */
    default:
        return arith(r, n, n->op, x, y);
    }
}

/* ---- tests --------------------------------------------------------------------------------- */

static const char *const k_tests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",        "equalto", "even", "false",  "float",
    "in",      "integer",  "iterable", "lower",       "mapping",   "ne",      "none", "number", "odd",
    "sameas",  "sequence", "string",   "true",        "undefined", "upper",   NULL};

bool jinja_has_test(jstr name) {
    return listed(k_tests, name);
}

static bool run_test(run *r, const jnode *n, jstr t, const jv *v, const args *a) {
    jv arg[1];
    char what[64];
    snprintf(what, sizeof what, "the test '%.*s'", (int)t.n, t.s);
    static const char *const names[] = {"other"};
    bind(r, n, what, a, names, 1, arg);
    bool needs_arg = jstr_eq(t, "divisibleby") || jstr_eq(t, "eq") || jstr_eq(t, "equalto") ||
                     jstr_eq(t, "ne") || jstr_eq(t, "in") || jstr_eq(t, "sameas");
    if (needs_arg && !given(&arg[0])) FAILN(r, n, "%s needs an argument", what);
    if (!needs_arg && given(&arg[0])) FAILN(r, n, "%s takes no argument", what);
    switch (t.s[0]) {
    case 'b':
        return v->kind == JV_BOOL;
    case 'c':
        return v->kind == JV_MACRO || v->kind == JV_METHOD || v->kind == JV_GLOBAL;
    case 'd':
        if (jstr_eq(t, "defined")) return v->kind != JV_UNDEF;
        if (v->kind != JV_INT && v->kind != JV_BOOL) FAILN(r, n, "divisibleby needs an integer");
        return want_int(r, n, "divisibleby's argument", &arg[0]) != 0 &&
               as_int(v) % want_int(r, n, "divisibleby's argument", &arg[0]) == 0;
    case 'e':
        if (jstr_eq(t, "even")) return (v->kind == JV_INT || v->kind == JV_BOOL) && as_int(v) % 2 == 0;
        return jv_equal(v, &arg[0]);
    case 'f':
        return jstr_eq(t, "false") ? v->kind == JV_BOOL && !v->u.b : v->kind == JV_FLOAT;
    case 'i':
        if (jstr_eq(t, "in")) return contains(r, n, v, &arg[0]);
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
        return is_num(v);
    case 'o':
        return (v->kind == JV_INT || v->kind == JV_BOOL) && as_int(v) % 2 != 0;
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
    return listed(k_filters, name);
}

static jv apply_filter(run *r, const jnode *n, jstr name, const jv *v, const args *a);

static jv join(run *r, const jnode *n, const jv *seq, jstr sep, const jstr *attribute) {
    jlist *items = iterate(r, n, seq);
    ts_text t = {0};
    for (size_t i = 0; i < items->n; i++) {
        if (i) jtext_add(r->a, &t, sep.s, sep.n);
        jv x = attribute ? get_attr(r, n, &items->items[i], *attribute) : items->items[i];
        jv_to_str(r->a, &x, &t);
    }
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

/* select/rejectattr(attribute, test, test arguments...) and map(attribute=, default=) or map(filter, ...) */
static jv select_or_map(run *r, const jnode *n, jstr name, const jv *v, const args *a) {
    jlist *items = iterate(r, n, v);
    jv out = make_list(r, items->n);
    size_t k = 0;
    bool is_map = jstr_eq(name, "map");
    jstr attribute = {0};
    jv dflt = {.kind = JV_UNDEF};
    jstr test_or_filter = {0};
    args rest = {0};
    for (size_t i = 0; i < a->n; i++) {
        if (a->kw && a->kw[i].s) {
            if (is_map && jstr_eq(a->kw[i], "attribute"))
                attribute = want_str(r, n, "map's attribute", &a->v[i]);
            else if (is_map && jstr_eq(a->kw[i], "default"))
                dflt = a->v[i];
            else
                FAILN(r, n, "the filter '%.*s' has no argument named '%.*s'", (int)name.n, name.s,
                      (int)a->kw[i].n, a->kw[i].s);
        } else if (!is_map && !attribute.s)
            attribute = want_str(r, n, "the attribute to select by", &a->v[i]);
        else if (!test_or_filter.s)
            test_or_filter = want_str(r, n, is_map ? "map's filter" : "the test to select by", &a->v[i]);
        else if (!rest.v)
            rest = (args){.n = a->n - i, .v = a->v + i, .kw = a->kw ? a->kw + i : NULL};
    }
    if (!attribute.s && !test_or_filter.s)
        FAILN(r, n, "the filter '%.*s' needs an attribute", (int)name.n, name.s);
    if (test_or_filter.s && !(is_map ? jinja_has_filter(test_or_filter) : jinja_has_test(test_or_filter)))
        FAILN(r, n, "the %s '%.*s' is not supported by turbospark's Jinja engine", is_map ? "filter" : "test",
              (int)test_or_filter.n, test_or_filter.s);
    for (size_t i = 0; i < items->n; i++) {
        jv x = attribute.s ? get_attr(r, n, &items->items[i], attribute) : items->items[i];
        if (is_map) {
            if (x.kind == JV_UNDEF && given(&dflt)) x = dflt;
            out.u.l->items[k++] = test_or_filter.s ? apply_filter(r, n, test_or_filter, &x, &rest) : x;
            continue;
        }
        bool hit = test_or_filter.s ? run_test(r, n, test_or_filter, &x, &rest) : jv_truthy(&x);
        if (hit == jstr_eq(name, "selectattr")) out.u.l->items[k++] = items->items[i];
    }
    out.u.l->n = k;
    return out;
}

static jv tojson(run *r, const jnode *n, const jv *v, const args *a) {
    jv o[4];
    static const char *const names[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    bind(r, n, "the filter 'tojson'", a, names, 4, o);
    int indent = -1;
    if (given(&o[1]) && o[1].kind != JV_NONE) {
        int64_t i = want_int(r, n, "tojson's indent", &o[1]);
        indent = i < 0 ? 0 : i > 64 ? 64 : (int)i;
    }
    jstr seps[2];
    if (given(&o[2]) && o[2].kind != JV_NONE) {
        if (o[2].kind != JV_LIST || o[2].u.l->n != 2)
            FAILN(r, n, "tojson's separators must be a pair of strings");
        for (int i = 0; i < 2; i++) seps[i] = want_str(r, n, "a tojson separator", &o[2].u.l->items[i]);
    }
    ts_text t = {0};
    jv_tojson(r->a, n->line, v, given(&o[0]) && jv_truthy(&o[0]), indent,
              given(&o[2]) && o[2].kind != JV_NONE ? seps : NULL, given(&o[3]) && jv_truthy(&o[3]), &t);
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

static jv number_filter(run *r, const jnode *n, const jv *v, bool to_int, const args *a) {
    jv o[1];
    static const char *const names[] = {"default"};
    bind(r, n, to_int ? "the filter 'int'" : "the filter 'float'", a, names, 1, o);
    jv dflt = given(&o[0]) ? o[0] : to_int ? make_int(0) : (jv){.kind = JV_FLOAT, .u.f = 0};
    double x;
    if (is_num(v))
        x = as_double(v);
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
    if (v->kind == JV_INT || v->kind == JV_BOOL) return make_int(as_int(v));
    if (!isfinite(x) || fabs(x) >= 9.2e18) return dflt;
    return make_int((int64_t)x);
}

static jv apply_filter(run *r, const jnode *n, jstr name, const jv *v, const args *a) {
    char what[64];
    snprintf(what, sizeof what, "the filter '%.*s'", (int)name.n, name.s);
    jv o[3];
    if (jstr_eq(name, "tojson")) return tojson(r, n, v, a);
    if (jstr_eq(name, "map") || jstr_eq(name, "selectattr") || jstr_eq(name, "rejectattr"))
        return select_or_map(r, n, name, v, a);
    if (jstr_eq(name, "int") || jstr_eq(name, "float")) return number_filter(r, n, v, name.s[0] == 'i', a);
    if (jstr_eq(name, "default") || jstr_eq(name, "d")) {
        static const char *const names[] = {"default_value", "boolean"};
        bind(r, n, what, a, names, 2, o);
        bool use = v->kind == JV_UNDEF || (given(&o[1]) && jv_truthy(&o[1]) && !jv_truthy(v));
        return use ? (given(&o[0]) ? o[0] : jv_str(jstr_c(""))) : *v;
    }
    if (jstr_eq(name, "join")) {
        static const char *const names[] = {"d", "attribute"};
        bind(r, n, what, a, names, 2, o);
        jstr attr = given(&o[1]) ? want_str(r, n, "join's attribute", &o[1]) : (jstr){0};
        return join(r, n, v, given(&o[0]) ? text_of(r, &o[0]) : jstr_c(""), given(&o[1]) ? &attr : NULL);
    }
    if (jstr_eq(name, "replace")) {
        static const char *const names[] = {"old", "new", "count"};
        bind(r, n, what, a, names, 3, o);
        if (!given(&o[0]) || !given(&o[1])) FAILN(r, n, "%s needs two arguments", what);
        return jv_str(
            replace(r, text_of(r, v), text_of(r, &o[0]), text_of(r, &o[1]),
                    given(&o[2]) && o[2].kind != JV_NONE ? want_int(r, n, "replace's count", &o[2]) : -1));
    }
    if (jstr_eq(name, "trim")) {
        static const char *const names[] = {"chars"};
        bind(r, n, what, a, names, 1, o);
        jstr chars =
            given(&o[0]) && o[0].kind != JV_NONE ? want_str(r, n, "trim's characters", &o[0]) : (jstr){0};
        jv s = jv_str(strip(text_of(r, v), chars.s ? &chars : NULL, true, true));
        s.markup = v->markup;
        return s;
    }
    bind(r, n, what, a, NULL, 0, o);
    if (jstr_eq(name, "length") || jstr_eq(name, "count")) {
        if (v->kind == JV_UNDEF) return make_int(0);
        if (v->kind == JV_STR) {
            size_t k;
            char_offsets(r, v->u.s, &k);
            return make_int((int64_t)k);
        }
        if (v->kind == JV_LIST) return make_int((int64_t)v->u.l->n);
        if (v->kind == JV_DICT) return make_int((int64_t)v->u.d->n);
        FAILN(r, n, "object of type '%s' has no len()", jv_type_name(v));
    }
    if (jstr_eq(name, "string")) return v->kind == JV_STR ? *v : jv_str(text_of(r, v));
    if (jstr_eq(name, "safe")) {
        jv s = jv_str(text_of(r, v));
        s.markup = true;
        return s;
    }
    if (jstr_eq(name, "lower")) return jv_str(change_case(r, text_of(r, v), CASE_LOWER));
    if (jstr_eq(name, "upper")) return jv_str(change_case(r, text_of(r, v), CASE_UPPER));
    if (jstr_eq(name, "capitalize")) return jv_str(change_case(r, text_of(r, v), CASE_CAPITALIZE));
    if (jstr_eq(name, "title")) return jv_str(change_case(r, text_of(r, v), CASE_TITLE));
    if (jstr_eq(name, "items")) {
        if (v->kind == JV_UNDEF) return make_list(r, 0);
        if (v->kind != JV_DICT) FAILN(r, n, "the filter 'items' needs a mapping, not %s", jv_type_name(v));
        return items_of(r, v->u.d);
    }
    if (jstr_eq(name, "list")) {
        jlist *l = iterate(r, n, v);
        return (jv){.kind = JV_LIST, .u.l = l};
    }
    if (jstr_eq(name, "first") || jstr_eq(name, "last")) {
        jlist *l = iterate(r, n, v);
        if (!l->n)
            return jv_undef(r->a, "the sequence is empty, so it has no %s item",
                            name.s[0] == 'f' ? "first" : "last");
        return l->items[name.s[0] == 'f' ? 0 : l->n - 1];
    }
    if (jstr_eq(name, "reverse")) {
        if (v->kind == JV_STR) return slice(r, n, v, NULL, NULL, &(jv){.kind = JV_INT, .u.i = -1});
        jlist *l = iterate(r, n, v);
        jv out = make_list(r, l->n);
        for (size_t i = 0; i < l->n; i++) out.u.l->items[i] = l->items[l->n - 1 - i];
        return out;
    }
    /* abs */
    if (v->kind == JV_INT && v->u.i != INT64_MIN) return make_int(v->u.i < 0 ? -v->u.i : v->u.i);
    if (v->kind == JV_FLOAT) return (jv){.kind = JV_FLOAT, .u.f = fabs(v->u.f)};
    if (v->kind == JV_BOOL) return make_int(v->u.b);
    FAILN(r, n, "bad operand type for abs(): '%s'", jv_type_name(v));
}

/* ---- calls --------------------------------------------------------------------------------- */

static jv call_macro(run *r, const jnode *n, const jnode *m, const args *a) {
    step(r, n);
    if (r->depth >= TS_JINJA_MAX_DEPTH)
        FAILN(r, n, "macro calls nest more than %d deep (a runaway recursion?)", TS_JINJA_MAX_DEPTH);
    frame *f = jalloc(r->a, sizeof *f);
    f->parent = r->top;
    const char **names = jalloc(r->a, (m->n + 1) * sizeof *names);
    char **owned = jalloc(r->a, (m->n + 1) * sizeof *owned);
    for (size_t i = 0; i < m->n; i++) {
        owned[i] = jalloc(r->a, m->list[i]->name.n + 1);
        memcpy(owned[i], m->list[i]->name.s, m->list[i]->name.n);
        names[i] = owned[i];
    }
    char what[96];
    snprintf(what, sizeof what, "macro '%.*s'", (int)m->name.n, m->name.s);
    jv *vals = jalloc(r->a, (m->n + 1) * sizeof *vals);
    bind(r, n, what, a, names, m->n, vals);
    for (size_t i = 0; i < m->n; i++) {
        jv v = vals[i];
        if (!given(&v))
            v = m->list[i]->a
                    ? eval(r, m->list[i]->a, f)
                    : jv_undef(r->a, "'%.*s' is undefined (macro '%.*s' was called without it)",
                               (int)m->list[i]->name.n, m->list[i]->name.s, (int)m->name.n, m->name.s);
        *dict_slot(r, &f->vars, m->list[i]->name) = v;
    }
    r->depth++;
    ts_text out = {0};
    exec(r, m->b, f, &out);
    r->depth--;
    r->jump = 0;
    return jv_str((jstr){out.s ? out.s : "", out.n});
}

static jv call_global(run *r, const jnode *n, jstr g, const args *a) {
    if (jstr_eq(g, "namespace") || jstr_eq(g, "dict")) {
        jv ns = make_dict(r, jstr_eq(g, "namespace") ? JV_NS : JV_DICT);
        for (size_t i = 0; i < a->n; i++) {
            if (a->kw && a->kw[i].s) {
                *dict_slot(r, ns.u.d, a->kw[i]) = a->v[i];
            } else if (a->v[i].kind == JV_DICT) {
                for (size_t k = 0; k < a->v[i].u.d->n; k++)
                    *dict_slot(r, ns.u.d, a->v[i].u.d->keys[k]) = a->v[i].u.d->vals[k];
            } else
                FAILN(r, n, "%.*s() takes keyword arguments or a dict", (int)g.n, g.s);
        }
        return ns;
    }
    jv o[3];
    if (jstr_eq(g, "raise_exception")) {
        static const char *const names[] = {"message"};
        bind(r, n, "raise_exception()", a, names, 1, o);
        jstr msg = text_of(r, &o[0]);
        FAILN(r, n, "the template raised an error: %.*s", (int)(msg.n > 300 ? 300 : msg.n), msg.s);
    }
    if (jstr_eq(g, "strftime_now")) {
        static const char *const names[] = {"format"};
        bind(r, n, "strftime_now()", a, names, 1, o);
        jstr fmt = want_str(r, n, "strftime_now's format", &o[0]);
        char f[256], buf[512];
        snprintf(f, sizeof f, "%.*s", (int)fmt.n, fmt.s);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t k = strftime(buf, sizeof buf, f, &tm);
        char *s = jalloc(r->a, k + 1);
        memcpy(s, buf, k);
        return jv_str((jstr){s, k});
    }
    /* range */
    static const char *const names[] = {"start", "stop", "step"};
    bind(r, n, "range()", a, names, 3, o);
    int64_t start = 0, stop, stepv = 1;
    if (!given(&o[0])) FAILN(r, n, "range() needs an argument");
    if (given(&o[1]))
        start = want_int(r, n, "range's start", &o[0]), stop = want_int(r, n, "range's stop", &o[1]);
    else
        stop = want_int(r, n, "range's stop", &o[0]);
    if (given(&o[2])) stepv = want_int(r, n, "range's step", &o[2]);
    if (!stepv) FAILN(r, n, "range() step must not be zero");
    double count = ceil(((double)stop - (double)start) / (double)stepv);
    if (count > 100000) FAILN(r, n, "range() is limited to 100000 items (as in Jinja2's sandbox)");
    size_t m = count > 0 ? (size_t)count : 0;
    jv l = make_list(r, m);
    for (size_t i = 0; i < m; i++) l.u.l->items[i] = make_int(start + (int64_t)i * stepv);
    return l;
}

static jv call(run *r, const jnode *n, frame *f) {
    jv callee = eval(r, n->a, f);
    args a = eval_args(r, n, f);
    switch (callee.kind) {
    case JV_MACRO:
        return call_macro(r, n, callee.u.macro, &a);
    case JV_GLOBAL:
        return call_global(r, n, callee.u.s, &a);
    case JV_METHOD:
        if (callee.self->kind == JV_STR) return call_str_method(r, n, callee.self->u.s, callee.u.s, &a);
        return call_dict_method(r, n, callee.self->u.d, callee.u.s, &a);
    case JV_UNDEF:
        fail_undef(r, n, &callee);
    default:
        FAILN(r, n, "'%s' object is not callable", jv_type_name(&callee));
    }
}

/* ---- expressions --------------------------------------------------------------------------- */

static const char *const k_globals[] = {"dict",         "namespace", "range", "raise_exception",
                                        "strftime_now", NULL};

static jv lookup(run *r, jstr name, frame *f) {
    for (; f; f = f->parent) {
        const jv *v = dict_find(&f->vars, name);
        if (v) return *v;
    }
    const jv *v = dict_find(r->vars, name);
    if (v) return *v;
    if (listed(k_globals, name)) return (jv){.kind = JV_GLOBAL, .u.s = name};
    return jv_undef(r->a, "'%.*s' is undefined", (int)name.n, name.s);
}

static jv eval(run *r, const jnode *n, frame *f) {
    jv x, y;
    switch (n->kind) {
    case JE_LITERAL:
        return n->lit;
    case JE_NAME:
        return lookup(r, n->name, f);
    case JE_ATTR:
        x = eval(r, n->a, f);
        return get_attr(r, n, &x, n->attr);
    case JE_ITEM:
        x = eval(r, n->a, f), y = eval(r, n->b, f);
        return get_item(r, n, &x, &y);
    case JE_SLICE: {
        x = eval(r, n->a, f);
        jv parts[3];
        for (int i = 0; i < 3; i++) {
            const jnode *p = i == 0 ? n->b : i == 1 ? n->c : n->d;
            parts[i] = p ? eval(r, p, f) : (jv){.kind = JV_NONE};
        }
        return slice(r, n, &x, &parts[0], &parts[1], &parts[2]);
    }
    case JE_CALL:
        return call(r, n, f);
    case JE_FILTER: {
        x = eval(r, n->a, f);
        args a = eval_args(r, n, f);
        return apply_filter(r, n, n->name, &x, &a);
    }
    case JE_TEST: {
        x = eval(r, n->a, f);
        args a = eval_args(r, n, f);
        return make_bool(run_test(r, n, n->name, &x, &a) != (n->op != 0));
    }
    case JE_NOT:
        x = eval(r, n->a, f);
        return make_bool(!jv_truthy(&x));
    case JE_NEG:
    case JE_POS:
        x = eval(r, n->a, f);
        if (x.kind == JV_UNDEF) fail_undef(r, n, &x);
        if (!is_num(&x))
            FAILN(r, n, "bad operand type for unary %c: '%s'", n->kind == JE_NEG ? '-' : '+',
                  jv_type_name(&x));
        if (n->kind == JE_POS) return x.kind == JV_BOOL ? make_int(x.u.b) : x;
        return arith(r, n, JOP_SUB, &(jv){.kind = JV_INT, .u.i = 0}, &x);
    case JE_BINARY:
        x = eval(r, n->a, f), y = eval(r, n->b, f);
        return binary(r, n, &x, &y);
    case JE_AND:
        x = eval(r, n->a, f);
        return jv_truthy(&x) ? eval(r, n->b, f) : x;
    case JE_OR:
        x = eval(r, n->a, f);
        return jv_truthy(&x) ? x : eval(r, n->b, f);
    case JE_COND:
        x = eval(r, n->a, f);
        if (jv_truthy(&x)) return eval(r, n->b, f);
        return n->c ? eval(r, n->c, f)
                    : jv_undef(r->a, "the condition of an inline if was false and it has no else");
    case JE_LIST:
    case JE_TUPLE: {
        jv l = make_list(r, n->n);
        l.is_tuple = n->kind == JE_TUPLE;
        for (size_t i = 0; i < n->n; i++) l.u.l->items[i] = eval(r, n->list[i], f);
        return l;
    }
    case JE_DICT: {
        jv d = make_dict(r, JV_DICT);
        for (size_t i = 0; i + 1 < n->n; i += 2) {
            jv k = eval(r, n->list[i], f);
            if (k.kind != JV_STR) FAILN(r, n, "dict keys other than strings are not supported");
            *dict_slot(r, d.u.d, k.u.s) = eval(r, n->list[i + 1], f);
        }
        return d;
    }
    default:
        FAILN(r, n, "internal error: a statement where an expression was expected");
    }
}

/* ---- statements ---------------------------------------------------------------------------- */

static void bind_targets(run *r, const jnode *n, frame *f, const jv *item) {
    if (n->n == 1) {
        *dict_slot(r, &f->vars, n->list[0]->name) = *item;
        return;
    }
    jlist *parts = item->kind == JV_LIST ? item->u.l : NULL;
    if (!parts || parts->n != n->n)
        FAILN(r, n, "cannot unpack a %s into %zu loop variables", jv_type_name(item), n->n);
    for (size_t i = 0; i < n->n; i++) *dict_slot(r, &f->vars, n->list[i]->name) = parts->items[i];
}

static void exec_for(run *r, const jnode *n, frame *f, ts_text *out) {
    jv seq = eval(r, n->a, f);
    jlist *items = iterate(r, n, &seq);
    if (n->d) { /* `for x in xs if cond`: loop over the items that pass */
        jlist *kept = make_list(r, items->n).u.l;
        kept->n = 0;
        frame *g = jalloc(r->a, sizeof *g);
        g->parent = f;
        for (size_t i = 0; i < items->n; i++) {
            step(r, n);
            g->vars.n = 0;
            bind_targets(r, n, g, &items->items[i]);
            jv c = eval(r, n->d, g);
            if (jv_truthy(&c)) kept->items[kept->n++] = items->items[i];
        }
        items = kept;
    }
    jloop *loop = jalloc(r->a, sizeof *loop);
    loop->items = items;
    frame *g = jalloc(r->a, sizeof *g); /* one scope, emptied each iteration: nothing outlives one */
    g->parent = f;
    for (size_t i = 0; i < items->n; i++) {
        step(r, n);
        loop->i = i;
        g->vars.n = 0;
        *dict_slot(r, &g->vars, jstr_c("loop")) = (jv){.kind = JV_LOOP, .u.loop = loop};
        bind_targets(r, n, g, &items->items[i]);
        exec(r, n->b, g, out);
        int jump = r->jump;
        r->jump = 0;
        if (jump == 1) break;
    }
    if (!items->n && n->c) exec(r, n->c, f, out);
}

static void exec(run *r, const jnode *n, frame *f, ts_text *out) {
    switch (n->kind) {
    case JN_BODY:
        for (size_t i = 0; i < n->n && !r->jump; i++) exec(r, n->list[i], f, out);
        return;
    case JN_TEXT:
        jtext_add(r->a, out, n->name.s, n->name.n);
        return;
    case JN_OUTPUT: {
        jv v = eval(r, n->a, f);
        jv_to_str(r->a, &v, out);
        return;
    }
    case JN_IF:
        for (const jnode *b = n; b;) {
            if (b->kind != JN_IF) {
                exec(r, b, f, out);
                return;
            }
            jv c = eval(r, b->a, f);
            if (jv_truthy(&c)) {
                exec(r, b->b, f, out);
                return;
            }
            b = b->c;
        }
        return;
    case JN_FOR:
        exec_for(r, n, f, out);
        return;
    case JN_SET:
        *dict_slot(r, &f->vars, n->name) = eval(r, n->a, f);
        return;
    case JN_SET_ATTR: {
        jv ns = lookup(r, n->name, f);
        if (ns.kind != JV_NS)
            FAILN(r, n, "'%.*s' is a %s: only a namespace() can have attributes assigned", (int)n->name.n,
                  n->name.s, jv_type_name(&ns));
        *dict_slot(r, ns.u.d, n->attr) = eval(r, n->a, f);
        return;
    }
    case JN_MACRO:
        *dict_slot(r, &f->vars, n->name) = (jv){.kind = JV_MACRO, .u.macro = n};
        return;
    case JN_BREAK:
    case JN_CONTINUE:
        r->jump = n->kind == JN_BREAK ? 1 : 2;
        return;
    default:
        FAILN(r, n, "internal error: an expression where a statement was expected");
    }
}

int ts_jinja_render(const ts_jinja *t, const void *vars, ts_text *out, char *err, size_t errlen) {
    const cJSON *v = vars;
    if (v && !cJSON_IsObject(v))
        return ts_errf(err, errlen, "chat template: the variables must be a JSON object."), -1;
    jmp_buf fail;
    jarena *a = calloc(1, sizeof *a);
    if (!a) return ts_errf(err, errlen, "out of memory rendering a chat template"), -1;
    *a = (jarena){.limit = TS_JINJA_MAX_BYTES, .fail = &fail, .err = err, .errlen = errlen};
    if (setjmp(fail)) {
        jarena_free(a);
        free(a);
        return -1;
    }
    run r = {.a = a};
    jv d = v ? jv_from_cjson(a, v) : make_dict(&r, JV_DICT);
    r.vars = d.u.d;
    r.top = jalloc(a, sizeof *r.top);
    ts_text text = {0};
    exec(&r, t->root, r.top, &text);
    int rc = text.n && ts_text_append(out, text.s, text.n) ? -1 : 0;
    if (rc) ts_errf(err, errlen, "out of memory copying %zu bytes of a rendered chat template", text.n);
    jarena_free(a);
    free(a);
    return rc;
}
