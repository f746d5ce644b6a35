/* Shared by the Jinja parser (jinja_parse.c), its values (jinja_value.c) and its renderer (jinja.c).
 * Every allocation comes from an arena (the parsed template's, or one render's) that is freed at
 * once, and every error unwinds with longjmp to the entry point, so no code path has to free or
 * check anything on the way out. */
#ifndef TS_TOKENIZER_JINJA_INTERNAL_H
#define TS_TOKENIZER_JINJA_INTERNAL_H

#include "tokenizer/jinja.h"

#include "common/error.h"

#include <setjmp.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- arena and failure --------------------------------------------------------------------- */

typedef struct jchunk jchunk;
typedef struct jarena {
    jchunk *head;
    size_t used_total, limit; /* bytes handed out; past limit, allocation fails the render */
    jmp_buf *fail;            /* where errors go */
    char *err;
    size_t errlen;
} jarena;

_Noreturn void jfail(jarena *a, int line, const char *fmt, ...) TS_PRINTF(3, 4);
void *jalloc(jarena *a, size_t n); /* zeroed */
void jarena_free(jarena *a);

/* ---- values -------------------------------------------------------------------------------- */

typedef struct jstr {
    const char *s;
    size_t n;
} jstr;

typedef enum jkind {
    JV_UNDEF, /* Jinja2's Undefined; why holds the sentence an error would give */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* also tuples (is_tuple): immutable */
    JV_DICT, /* keys are strings, in insertion order: immutable */
    JV_NS,   /* namespace(): a dict whose attributes `set ns.x = ...` may change */
    JV_LOOP, /* the `loop` variable of a for loop */
    JV_MACRO,
    JV_METHOD, /* a string or dict method looked up as an attribute, not yet called */
    JV_GLOBAL, /* namespace, range, raise_exception, strftime_now, dict */
} jkind;

typedef struct jv jv;
typedef struct jlist {
    size_t n;
    jv *items;
} jlist;
typedef struct jdict {
    size_t n, cap;
    jstr *keys;
    jv *vals;
} jdict;
typedef struct jloop jloop;
typedef struct jnode jnode;

struct jv {
    uint8_t kind;  /* jkind */
    bool markup;   /* a string marked safe (Markup): `+` HTML-escapes the other operand */
    bool is_tuple; /* a list that prints as a tuple */
    union {
        bool b;
        int64_t i;
        double f;
        jstr s; /* JV_STR; JV_METHOD: the method name; JV_GLOBAL: its name */
        jlist *l;
        jdict *d; /* JV_DICT, JV_NS */
        jloop *loop;
        const jnode *macro;
        const char *why; /* JV_UNDEF */
    } u;
    jv *self; /* JV_METHOD: the value the method belongs to */
};

struct jloop {
    const jlist *items;
    size_t i;
};

jstr jstr_c(const char *s);
bool jstr_eq(jstr a, const char *c);
/* Whether the renderer (jinja.c) has a filter or test of that name: the parser refuses others. */
bool jinja_has_filter(jstr name);
bool jinja_has_test(jstr name);
jv jv_str(jstr s);
jv jv_undef(jarena *a, const char *fmt, ...) TS_PRINTF(2, 3);
const char *jv_type_name(const jv *v); /* Python's name of the type: "str", "dict", ... */
bool jv_truthy(const jv *v);
bool jv_equal(const jv *x, const jv *y);
/* Python's str(v) (Undefined: ""), appended to out. */
void jv_to_str(jarena *a, const jv *v, ts_text *out);
/* Python's repr(v). */
void jv_repr(jarena *a, const jv *v, ts_text *out);
/* json.dumps(v, ensure_ascii, indent (< 0: none), separators (NULL: defaults), sort_keys). */
void jv_tojson(jarena *a, int line, const jv *v, bool ensure_ascii, int indent, const jstr *seps,
               bool sort_keys, ts_text *out);
/* The value of a cJSON item. */
jv jv_from_cjson(jarena *a, const void *cjson);
/* An arena-owned copy of t's bytes. */
jv jv_from_text(jarena *a, const ts_text *t);
/* Bytes of the Python whitespace character at s[0..n) (str.isspace()), 0 if none. */
size_t py_space_len(const char *s, size_t n);
size_t py_space_before(const char *s, size_t n); /* the same, of the character ending at s[n] */
/* Appends to a ts_text whose bytes live in the arena (never ts_text_free it): fails the render
 * past the arena's limit. */
void jtext_add(jarena *a, ts_text *t, const void *p, size_t n);

/* ---- syntax tree --------------------------------------------------------------------------- */

typedef enum jnkind {
    /* statements */
    JN_BODY,     /* list: the statements */
    JN_TEXT,     /* name: the text */
    JN_OUTPUT,   /* a: the expression */
    JN_IF,       /* a: condition, b: then-body, c: else (a body or another JN_IF) */
    JN_FOR,      /* list: target names (JE_NAME), a: iterable, b: body, c: else-body, d: filter */
    JN_SET,      /* name: variable, a: value */
    JN_SET_ATTR, /* name: namespace variable, attr: attribute, a: value */
    JN_MACRO,    /* name, list: parameters (JE_NAME, a: default or NULL), b: body */
    JN_BREAK,
    JN_CONTINUE,
    /* expressions */
    JE_LITERAL, /* lit */
    JE_NAME,    /* name */
    JE_ATTR,    /* a.attr */
    JE_ITEM,    /* a[b] */
    JE_SLICE,   /* a[b:c:d], missing parts NULL */
    JE_CALL,    /* a(list), kw[i].s non-NULL for keyword arguments */
    JE_FILTER,  /* a | name(list) */
    JE_TEST,    /* a is [not] name(list); op: negated */
    JE_NOT,     /* not a */
    JE_NEG,     /* -a */
    JE_POS,     /* +a */
    JE_BINARY,  /* a op b: op is one of the JOP_ */
    JE_AND,
    JE_OR,
    JE_COND,  /* b if a else c (c NULL: undefined) */
    JE_LIST,  /* list */
    JE_TUPLE, /* list */
    JE_DICT,  /* list: keys and values alternating */
} jnkind;

enum {
    JOP_ADD = 1,
    JOP_SUB,
    JOP_MUL,
    JOP_DIV,
    JOP_FLOORDIV,
    JOP_MOD,
    JOP_POW,
    JOP_CONCAT,
    JOP_EQ,
    JOP_NE,
    JOP_LT,
    JOP_LE,
    JOP_GT,
    JOP_GE,
    JOP_IN,
    JOP_NOT_IN
};

struct jnode {
    uint8_t kind; /* jnkind */
    uint8_t op;
    int line;
    jstr name, attr;
    jv lit;
    const jnode *a, *b, *c, *d;
    const jnode **list;
    jstr *kw;
    size_t n;
};

/* ---- the renderer: jinja.c (statements, expressions, operators, calls) and jinja_builtins.c
 * (filters, tests, string and dict methods) ------------------------------------------------------ */

typedef struct frame frame; /* a scope (jinja.c) */

typedef struct jrun {
    jarena *a;
    const jdict *vars; /* the caller's variables */
    frame *top;        /* the template's top-level scope */
    long steps;        /* loop iterations and macro calls so far */
    int depth;         /* macro calls under way */
    int jump;          /* 1: break, 2: continue pending */
} jrun;

#define FAILN(r, n, ...) jfail((r)->a, (n)->line, __VA_ARGS__)

/* Positional and keyword arguments, evaluated. */
typedef struct jargs {
    size_t n;
    jv *v;
    jstr *kw; /* kw[i].s NULL: positional */
} jargs;

/* jinja.c */
jv jr_bool(bool b);
jv jr_int(int64_t i);
jv jr_list(jrun *r, size_t n); /* a list of n items (to be filled) */
const jv *jr_dict_find(const jdict *d, jstr k);
jstr jr_text(jrun *r, const jv *v);                      /* str(v) */
size_t *jr_chars(jrun *r, jstr s, size_t *count);        /* offsets of s's characters, and the end */
jlist *jr_iterate(jrun *r, const jnode *n, const jv *v); /* list items, dict keys, characters */
/* Binds arguments to names[0..k) (positional first, then by keyword); unset slots stay JV_UNDEF
 * with why NULL (jr_given false). Fails on too many or unknown arguments. */
void jr_bind(jrun *r, const jnode *n, const char *what, const jargs *a, const char *const *names, size_t k,
             jv *out);
bool jr_given(const jv *v);
jstr jr_want_str(jrun *r, const jnode *n, const char *what, const jv *v);
int64_t jr_want_int(jrun *r, const jnode *n, const char *what, const jv *v);
jv jr_get_attr(jrun *r, const jnode *n, const jv *obj, jstr name);
jv jr_slice(jrun *r, const jnode *n, const jv *obj, const jv *lo, const jv *hi, const jv *st);
bool jr_is_num(const jv *v);
double jr_as_double(const jv *v);
int64_t jr_as_int(const jv *v);
bool jr_contains(jrun *r, const jnode *n, const jv *item, const jv *container); /* Python's `in` */

/* jinja_builtins.c */
const char *jr_find(jstr s, size_t from, jstr sub); /* sub in s at or after from, or NULL */
bool jr_listed(const char *const *names, jstr s);   /* s in the NULL-terminated names */
bool jr_is_str_method(jstr name);
bool jr_is_dict_method(jstr name);
jv jr_str_method(jrun *r, const jnode *n, jstr s, jstr m, const jargs *a);
jv jr_dict_method(jrun *r, const jnode *n, const jdict *d, jstr m, const jargs *a);
bool jr_test(jrun *r, const jnode *n, jstr t, const jv *v, const jargs *a);
jv jr_filter(jrun *r, const jnode *n, jstr name, const jv *v, const jargs *a);

struct ts_jinja {
    jarena arena;
    const jnode *root;
};

#endif
