/* The Jinja renderer: runs the tree of jinja_parse.c over values of jinja_value.c (see jinja.h).
 *
 * Scopes are Jinja2's: a for loop's body gets a fresh scope each iteration (a `set` inside does not
 * survive the iteration: templates use namespace() for that), a macro's body gets its own scope
 * over the template's top level, and if-blocks share their enclosing scope. Names are looked up
 * through the scopes, then the render's variables, then the globals (dict namespace range
 * raise_exception strftime_now). Filters, tests and methods are in jinja_builtins.c. */
#include "tokenizer/jinja_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct frame {
    frame *parent;
    jdict vars;
};

static jv eval(jrun *r, const jnode *n, frame *f);
static void exec(jrun *r, const jnode *n, frame *f, ts_text *out);

/* ---- small helpers ------------------------------------------------------------------------- */

jv jr_bool(bool b) {
    return (jv){.kind = JV_BOOL, .u.b = b};
}
jv jr_int(int64_t i) {
    return (jv){.kind = JV_INT, .u.i = i};
}
jv jr_list(jrun *r, size_t n) {
    jlist *l = jalloc(r->a, sizeof *l);
    l->items = jalloc(r->a, (n ? n : 1) * sizeof *l->items);
    l->n = n;
    return (jv){.kind = JV_LIST, .u.l = l};
}
static jv make_dict(jrun *r, jkind kind) {
    jdict *d = jalloc(r->a, sizeof *d);
    return (jv){.kind = (uint8_t)kind, .u.d = d};
}

static jv *dict_slot(jrun *r, jdict *d, jstr k) {
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
const jv *jr_dict_find(const jdict *d, jstr k) {
    for (size_t i = 0; i < d->n; i++)
        if (d->keys[i].n == k.n && !memcmp(d->keys[i].s, k.s, k.n)) return &d->vals[i];
    return NULL;
}

jstr jr_text(jrun *r, const jv *v) {
    if (v->kind == JV_STR) return v->u.s;
    ts_text t = {0};
    jv_to_str(r->a, v, &t);
    return (jstr){t.s ? t.s : "", t.n};
}

static jstr concat(jrun *r, jstr x, jstr y) {
    char *s = jalloc(r->a, x.n + y.n + 1);
    if (x.n) memcpy(s, x.s, x.n);
    if (y.n) memcpy(s + x.n, y.s, y.n);
    return (jstr){s, x.n + y.n};
}

/* Fails with the Undefined's own sentence, as Jinja2's UndefinedError does. */
static _Noreturn void fail_undef(jrun *r, const jnode *n, const jv *u) {
    FAILN(r, n, "%s", u->u.why ? u->u.why : "a value is undefined");
}

static void step(jrun *r, const jnode *n) {
    if (++r->steps > TS_JINJA_MAX_STEPS)
        FAILN(r, n, "the template ran more than %ld loop iterations and macro calls (a runaway loop?)",
              TS_JINJA_MAX_STEPS);
}

/* UTF-8 character boundaries of s: offsets of each character, and the end. */
size_t *jr_chars(jrun *r, jstr s, size_t *count) {
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
jlist *jr_iterate(jrun *r, const jnode *n, const jv *v) {
    switch (v->kind) {
    case JV_UNDEF:
        return jr_list(r, 0).u.l;
    case JV_LIST:
        return v->u.l;
    case JV_DICT: {
        jlist *l = jr_list(r, v->u.d->n).u.l;
        for (size_t i = 0; i < l->n; i++) l->items[i] = jv_str(v->u.d->keys[i]);
        return l;
    }
    case JV_STR: {
        size_t k;
        size_t *o = jr_chars(r, v->u.s, &k);
        jlist *l = jr_list(r, k).u.l;
        for (size_t i = 0; i < k; i++) l->items[i] = jv_str((jstr){v->u.s.s + o[i], o[i + 1] - o[i]});
        return l;
    }
    default:
        FAILN(r, n, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- arguments ----------------------------------------------------------------------------- */

static jargs eval_args(jrun *r, const jnode *n, frame *f) {
    jargs a = {.n = n->n, .v = jalloc(r->a, (n->n + 1) * sizeof(jv)), .kw = n->kw};
    for (size_t i = 0; i < n->n; i++) a.v[i] = eval(r, n->list[i], f);
    return a;
}

/* Binds arguments to names[0..k) (positional first, then by keyword); unset slots stay
 * JV_UNDEF with why NULL. Fails on too many or unknown arguments. */
void jr_bind(jrun *r, const jnode *n, const char *what, const jargs *a, const char *const *names, size_t k,
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

bool jr_given(const jv *v) {
    return !(v->kind == JV_UNDEF && !v->u.why);
}

jstr jr_want_str(jrun *r, const jnode *n, const char *what, const jv *v) {
    if (v->kind != JV_STR) FAILN(r, n, "%s must be a string, not %s", what, jv_type_name(v));
    return v->u.s;
}

int64_t jr_want_int(jrun *r, const jnode *n, const char *what, const jv *v) {
    if (v->kind != JV_INT && v->kind != JV_BOOL)
        FAILN(r, n, "%s must be an integer, not %s", what, jv_type_name(v));
    return v->kind == JV_INT ? v->u.i : v->u.b;
}

/* ---- attributes and items ------------------------------------------------------------------ */

static jv method(jrun *r, const jv *obj, jstr name) {
    jv m = {.kind = JV_METHOD, .u.s = name};
    m.self = jalloc(r->a, sizeof *m.self);
    *m.self = *obj;
    return m;
}

/* obj.name: Python attributes first (methods of str and dict), then items, as Jinja2's getattr. */
jv jr_get_attr(jrun *r, const jnode *n, const jv *obj, jstr name) {
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, n, obj);
    case JV_DICT:
        if (jr_is_dict_method(name)) return method(r, obj, name);
        /* fall through */
    case JV_NS: {
        const jv *v = jr_dict_find(obj->u.d, name);
        if (v) return *v;
        break;
    }
    case JV_STR:
        if (jr_is_str_method(name)) return method(r, obj, name);
        break;
    case JV_LOOP: {
        const jloop *l = obj->u.loop;
        size_t len = l->items->n, i = l->i;
        if (jstr_eq(name, "index")) return jr_int((int64_t)i + 1);
        if (jstr_eq(name, "index0")) return jr_int((int64_t)i);
        if (jstr_eq(name, "revindex")) return jr_int((int64_t)(len - i));
        if (jstr_eq(name, "revindex0")) return jr_int((int64_t)(len - i - 1));
        if (jstr_eq(name, "first")) return jr_bool(i == 0);
        if (jstr_eq(name, "last")) return jr_bool(i + 1 == len);
        if (jstr_eq(name, "length")) return jr_int((int64_t)len);
        if (jstr_eq(name, "depth")) return jr_int(1);
        if (jstr_eq(name, "depth0")) return jr_int(0);
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
static jv get_item(jrun *r, const jnode *n, const jv *obj, const jv *key) {
    int64_t i;
    switch (obj->kind) {
    case JV_UNDEF:
        fail_undef(r, n, obj);
    case JV_LIST:
        if (to_index(key, obj->u.l->n, &i)) return obj->u.l->items[i];
        break;
    case JV_STR: {
        size_t k;
        size_t *o = jr_chars(r, obj->u.s, &k);
        if (to_index(key, k, &i)) return jv_str((jstr){obj->u.s.s + o[i], o[i + 1] - o[i]});
        break;
    }
    case JV_DICT:
        if (key->kind == JV_STR) {
            const jv *v = jr_dict_find(obj->u.d, key->u.s);
            if (v) return *v;
        }
        break;
    default:
        break;
    }
    if (key->kind == JV_STR) return jr_get_attr(r, n, obj, key->u.s);
    ts_text t = {0};
    jv_repr(r->a, key, &t);
    return jv_undef(r->a, "'%s object' has no element %.*s", jv_type_name(obj), (int)t.n, t.s ? t.s : "");
}

/* Python's slice indices for a sequence of len items. */
jv jr_slice(jrun *r, const jnode *n, const jv *obj, const jv *lo, const jv *hi, const jv *st) {
    if (obj->kind == JV_UNDEF) fail_undef(r, n, obj);
    if (obj->kind != JV_LIST && obj->kind != JV_STR) FAILN(r, n, "a %s cannot be sliced", jv_type_name(obj));
    size_t count;
    size_t *o = obj->kind == JV_STR ? jr_chars(r, obj->u.s, &count) : NULL;
    if (obj->kind == JV_LIST) count = obj->u.l->n;
    int64_t len = (int64_t)count, stepv = 1;
    if (st && st->kind != JV_NONE) stepv = jr_want_int(r, n, "a slice step", st);
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
        int64_t x = jr_want_int(r, n, "a slice index", ends[e]);
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
        jv l = jr_list(r, m);
        l.is_tuple = obj->is_tuple;
        for (size_t k = 0; k < m; k++) l.u.l->items[k] = obj->u.l->items[idx[k]];
        return l;
    }
    ts_text t = {0};
    for (size_t k = 0; k < m; k++) jtext_add(r->a, &t, obj->u.s.s + o[idx[k]], o[idx[k] + 1] - o[idx[k]]);
    return jv_str((jstr){t.s ? t.s : "", t.n});
}

/* ---- operators ----------------------------------------------------------------------------- */

bool jr_is_num(const jv *v) {
    return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL;
}
double jr_as_double(const jv *v) {
    return v->kind == JV_FLOAT ? v->u.f : v->kind == JV_INT ? (double)v->u.i : (double)v->u.b;
}
int64_t jr_as_int(const jv *v) { /* ints and bools; 0 for anything else */
    return v->kind == JV_INT ? v->u.i : v->kind == JV_BOOL ? v->u.b : 0;
}

/* Markup's escape(): what `+` does to a plain string joined to a safe one. */
static jstr html_escape(jrun *r, jstr s) {
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

bool jr_contains(jrun *r, const jnode *n, const jv *item, const jv *container) {
    switch (container->kind) {
    case JV_UNDEF:
        return false;
    case JV_STR: {
        if (item->kind == JV_UNDEF) fail_undef(r, n, item);
        jstr s = jr_want_str(r, n, "the left side of 'in' a string", item);
        return jr_find(container->u.s, 0, s) != NULL;
    }
    case JV_LIST:
        for (size_t i = 0; i < container->u.l->n; i++)
            if (jv_equal(item, &container->u.l->items[i])) return true;
        return false;
    case JV_DICT:
        return item->kind == JV_STR && jr_dict_find(container->u.d, item->u.s);
    default:
        FAILN(r, n, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}

static int compare(jrun *r, const jnode *n, const jv *x, const jv *y) {
    if (x->kind == JV_UNDEF) fail_undef(r, n, x);
    if (y->kind == JV_UNDEF) fail_undef(r, n, y);
    if (jr_is_num(x) && jr_is_num(y)) {
        double a = jr_as_double(x), b = jr_as_double(y);
        if (x->kind != JV_FLOAT && y->kind != JV_FLOAT)
            return (jr_as_int(x) > jr_as_int(y)) - (jr_as_int(x) < jr_as_int(y));
        return (a > b) - (a < b);
    }
    if (x->kind == JV_STR && y->kind == JV_STR) {
        int c = memcmp(x->u.s.s, y->u.s.s, x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n);
        return c ? (c > 0) - (c < 0) : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
    }
    FAILN(r, n, "'%s' and '%s' cannot be ordered", jv_type_name(x), jv_type_name(y));
}

static jv repeat(jrun *r, const jnode *n, const jv *seq, int64_t times) {
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
    jv l = jr_list(r, k * (size_t)times);
    for (int64_t i = 0; i < times; i++) memcpy(l.u.l->items + (size_t)i * k, seq->u.l->items, k * sizeof(jv));
    return l;
}

static jv arith(jrun *r, const jnode *n, int op, const jv *x, const jv *y) {
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
        jv l = jr_list(r, x->u.l->n + y->u.l->n);
        l.is_tuple = x->is_tuple;
        memcpy(l.u.l->items, x->u.l->items, x->u.l->n * sizeof(jv));
        memcpy(l.u.l->items + x->u.l->n, y->u.l->items, y->u.l->n * sizeof(jv));
        return l;
    }
    if (op == JOP_MUL && (x->kind == JV_STR || x->kind == JV_LIST) &&
        (y->kind == JV_INT || y->kind == JV_BOOL))
        return repeat(r, n, x, jr_as_int(y));
    if (op == JOP_MUL && (y->kind == JV_STR || y->kind == JV_LIST) &&
        (x->kind == JV_INT || x->kind == JV_BOOL))
        return repeat(r, n, y, jr_as_int(x));
    if (!jr_is_num(x) || !jr_is_num(y))
        FAILN(r, n, "unsupported operand types for %s: '%s' and '%s'", sym[op], jv_type_name(x),
              jv_type_name(y));
    bool ints = x->kind != JV_FLOAT && y->kind != JV_FLOAT;
    double a = jr_as_double(x), b = jr_as_double(y);
    int64_t i = jr_as_int(x), j = jr_as_int(y), k;
    switch (op) {
    case JOP_ADD:
        if (ints && !__builtin_add_overflow(i, j, &k)) return jr_int(k);
        return (jv){.kind = JV_FLOAT, .u.f = a + b};
    case JOP_SUB:
        if (ints && !__builtin_sub_overflow(i, j, &k)) return jr_int(k);
        return (jv){.kind = JV_FLOAT, .u.f = a - b};
    case JOP_MUL:
        if (ints && !__builtin_mul_overflow(i, j, &k)) return jr_int(k);
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
            return jr_int(op == JOP_MOD ? m : q);
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
            return jr_int(p);
        }
        return (jv){.kind = JV_FLOAT, .u.f = pow(a, b)};
    }
}

static jv binary(jrun *r, const jnode *n, const jv *x, const jv *y) {
    switch (n->op) {
    case JOP_CONCAT:
        return jv_str(concat(r, jr_text(r, x), jr_text(r, y)));
    case JOP_EQ:
        return jr_bool(jv_equal(x, y));
    case JOP_NE:
        return jr_bool(!jv_equal(x, y));
    case JOP_LT:
        return jr_bool(compare(r, n, x, y) < 0);
    case JOP_LE:
        return jr_bool(compare(r, n, x, y) <= 0);
    case JOP_GT:
        return jr_bool(compare(r, n, x, y) > 0);
    case JOP_GE:
        return jr_bool(compare(r, n, x, y) >= 0);
    case JOP_IN:
        return jr_bool(jr_contains(r, n, x, y));
    case JOP_NOT_IN:
        return jr_bool(!jr_contains(r, n, x, y));
    case JOP_MOD:
        if (x->kind == JV_STR) FAILN(r, n, "string formatting with '%%' is not supported");
        /* fall through */
    default:
        return arith(r, n, n->op, x, y);
    }
}

/* ---- calls --------------------------------------------------------------------------------- */

static jv call_macro(jrun *r, const jnode *n, const jnode *m, const jargs *a) {
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
    jr_bind(r, n, what, a, names, m->n, vals);
    for (size_t i = 0; i < m->n; i++) {
        jv v = vals[i];
        if (!jr_given(&v))
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

static jv call_global(jrun *r, const jnode *n, jstr g, const jargs *a) {
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
        jr_bind(r, n, "raise_exception()", a, names, 1, o);
        jstr msg = jr_text(r, &o[0]);
        FAILN(r, n, "the template raised an error: %.*s", (int)(msg.n > 300 ? 300 : msg.n), msg.s);
    }
    if (jstr_eq(g, "strftime_now")) {
        static const char *const names[] = {"format"};
        jr_bind(r, n, "strftime_now()", a, names, 1, o);
        jstr fmt = jr_want_str(r, n, "strftime_now's format", &o[0]);
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
    jr_bind(r, n, "range()", a, names, 3, o);
    int64_t start = 0, stop, stepv = 1;
    if (!jr_given(&o[0])) FAILN(r, n, "range() needs an argument");
    if (jr_given(&o[1]))
        start = jr_want_int(r, n, "range's start", &o[0]), stop = jr_want_int(r, n, "range's stop", &o[1]);
    else
        stop = jr_want_int(r, n, "range's stop", &o[0]);
    if (jr_given(&o[2])) stepv = jr_want_int(r, n, "range's step", &o[2]);
    if (!stepv) FAILN(r, n, "range() step must not be zero");
    double count = ceil(((double)stop - (double)start) / (double)stepv);
    if (count > 100000) FAILN(r, n, "range() is limited to 100000 items (as in Jinja2's sandbox)");
    size_t m = count > 0 ? (size_t)count : 0;
    jv l = jr_list(r, m);
    for (size_t i = 0; i < m; i++) l.u.l->items[i] = jr_int(start + (int64_t)i * stepv);
    return l;
}

static jv call(jrun *r, const jnode *n, frame *f) {
    jv callee = eval(r, n->a, f);
    jargs a = eval_args(r, n, f);
    switch (callee.kind) {
    case JV_MACRO:
        return call_macro(r, n, callee.u.macro, &a);
    case JV_GLOBAL:
        return call_global(r, n, callee.u.s, &a);
    case JV_METHOD:
        if (callee.self->kind == JV_STR) return jr_str_method(r, n, callee.self->u.s, callee.u.s, &a);
        return jr_dict_method(r, n, callee.self->u.d, callee.u.s, &a);
    case JV_UNDEF:
        fail_undef(r, n, &callee);
    default:
        FAILN(r, n, "'%s' object is not callable", jv_type_name(&callee));
    }
}

/* ---- expressions --------------------------------------------------------------------------- */

static const char *const k_globals[] = {"dict",         "namespace", "range", "raise_exception",
                                        "strftime_now", NULL};

static jv lookup(jrun *r, jstr name, frame *f) {
    for (; f; f = f->parent) {
        const jv *v = jr_dict_find(&f->vars, name);
        if (v) return *v;
    }
    const jv *v = jr_dict_find(r->vars, name);
    if (v) return *v;
    if (jr_listed(k_globals, name)) return (jv){.kind = JV_GLOBAL, .u.s = name};
    return jv_undef(r->a, "'%.*s' is undefined", (int)name.n, name.s);
}

static jv eval(jrun *r, const jnode *n, frame *f) {
    jv x, y;
    switch (n->kind) {
    case JE_LITERAL:
        return n->lit;
    case JE_NAME:
        return lookup(r, n->name, f);
    case JE_ATTR:
        x = eval(r, n->a, f);
        return jr_get_attr(r, n, &x, n->attr);
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
        return jr_slice(r, n, &x, &parts[0], &parts[1], &parts[2]);
    }
    case JE_CALL:
        return call(r, n, f);
    case JE_FILTER: {
        x = eval(r, n->a, f);
        jargs a = eval_args(r, n, f);
        return jr_filter(r, n, n->name, &x, &a);
    }
    case JE_TEST: {
        x = eval(r, n->a, f);
        jargs a = eval_args(r, n, f);
        return jr_bool(jr_test(r, n, n->name, &x, &a) != (n->op != 0));
    }
    case JE_NOT:
        x = eval(r, n->a, f);
        return jr_bool(!jv_truthy(&x));
    case JE_NEG:
    case JE_POS:
        x = eval(r, n->a, f);
        if (x.kind == JV_UNDEF) fail_undef(r, n, &x);
        if (!jr_is_num(&x))
            FAILN(r, n, "bad operand type for unary %c: '%s'", n->kind == JE_NEG ? '-' : '+',
                  jv_type_name(&x));
        if (n->kind == JE_POS) return x.kind == JV_BOOL ? jr_int(x.u.b) : x;
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
        jv l = jr_list(r, n->n);
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

static void bind_targets(jrun *r, const jnode *n, frame *f, const jv *item) {
    if (n->n == 1) {
        *dict_slot(r, &f->vars, n->list[0]->name) = *item;
        return;
    }
    jlist *parts = item->kind == JV_LIST ? item->u.l : NULL;
    if (!parts || parts->n != n->n)
        FAILN(r, n, "cannot unpack a %s into %zu loop variables", jv_type_name(item), n->n);
    for (size_t i = 0; i < n->n; i++) *dict_slot(r, &f->vars, n->list[i]->name) = parts->items[i];
}

static void exec_for(jrun *r, const jnode *n, frame *f, ts_text *out) {
    jv seq = eval(r, n->a, f);
    jlist *items = jr_iterate(r, n, &seq);
    if (n->d) { /* `for x in xs if cond`: loop over the items that pass */
        jlist *kept = jr_list(r, items->n).u.l;
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

static void exec(jrun *r, const jnode *n, frame *f, ts_text *out) {
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
    jrun r = {.a = a};
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
