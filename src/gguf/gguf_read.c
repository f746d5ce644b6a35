/* GGUF reader: parse and validate everything up front (see gguf.h).
 *
 * Hostile input is the normal case here: every count is checked against the bytes that remain
 * before anything is allocated or looped over, so a parse costs O(file header) time and memory
 * whatever the bytes say, and every read goes through one bounds-checked cursor. */
#include "gguf/gguf.h"

#include "common/error.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct ts_gguf {
    const uint8_t *base; /* the whole file */
    uint64_t size;
    bool mapped; /* base is our mmap (else the caller's buffer) */
    char *path;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    ts_gguf_kv *kv;     /* [n_kv], file order */
    int64_t *kv_sorted; /* [n_kv] indices into kv, sorted by key */
    int64_t n_tensors;
    ts_gguf_tensor *tensors; /* [n_tensors], file order */
    int64_t *tensor_sorted;  /* [n_tensors] indices into tensors, sorted by name */
};

/* ---- bounds-checked cursor ------------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t off;
    const char *name; /* file name for messages */
    char *err;
    size_t errlen;
} cursor;

static int need(cursor *c, uint64_t n, const char *what) {
    if (c->size - c->off < n)
        return ts_errf(c->err, c->errlen,
                       "%s is truncated: reading %s at byte %" PRIu64 " needs %" PRIu64
                       " bytes but only %" PRIu64 " remain",
                       c->name, what, c->off, n, c->size - c->off);
    return 0;
}

static int read_bytes(cursor *c, void *dst, uint64_t n, const char *what) {
    if (need(c, n, what)) return -1;
    memcpy(dst, c->p + c->off, n);
    c->off += n;
    return 0;
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    return read_bytes(c, v, 4, what);
}
static int read_u64(cursor *c, uint64_t *v, const char *what) {
    return read_bytes(c, v, 8, what);
}

static int read_str(cursor *c, ts_gguf_str *s, const char *what) {
    uint64_t len;
    if (read_u64(c, &len, what)) return -1;
    if (need(c, len, what)) return -1;
    s->ptr = (const char *)c->p + c->off;
    s->len = len;
    c->off += len;
    return 0;
}

/* ---- helpers ------------------------------------------------------------------------------- */

static const char *k_vtype_names[TS_GGUF_VTYPE_COUNT] = {
    "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64"};
static const size_t k_vtype_sizes[TS_GGUF_VTYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

const char *ts_gguf_vtype_name(uint32_t t) {
    return t < TS_GGUF_VTYPE_COUNT ? k_vtype_names[t] : "unknown";
}
size_t ts_gguf_vtype_size(uint32_t t) {
    return t < TS_GGUF_VTYPE_COUNT ? k_vtype_sizes[t] : 0;
}

bool ts_gguf_str_eq(ts_gguf_str s, const char *c) {
    size_t n = strlen(c);
    return s.len == n && memcmp(s.ptr, c, n) == 0;
}

static int str_cmp(ts_gguf_str a, ts_gguf_str b) {
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (r) return r;
    return a.len < b.len ? -1 : a.len > b.len;
}

/* A printable excerpt of a name for messages (names may hold any bytes). */
static const char *excerpt(ts_gguf_str s, char *buf, size_t buflen) {
    size_t n = 0;
    /* Stop while there is room for one more escape (4 bytes), "..." (3) and the NUL. */
    for (uint64_t i = 0; i < s.len && n + 8 < buflen; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (ch >= 0x20 && ch < 0x7f)
            buf[n++] = (char)ch;
        else
            n += (size_t)snprintf(buf + n, buflen - n, "\\x%02x", ch);
        if (i + 1 < s.len && n + 8 >= buflen) {
            buf[n++] = '.', buf[n++] = '.', buf[n++] = '.';
            break;
        }
    }
    buf[n < buflen ? n : buflen - 1] = 0;
    return buf;
}

static uint64_t le_u(const uint8_t *p, size_t n) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int64_t le_i(const uint8_t *p, size_t n) {
    uint64_t v = le_u(p, n);
    if (n < 8 && (v >> (8 * n - 1)) & 1) v |= ~UINT64_C(0) << (8 * n); /* sign-extend */
    return (int64_t)v;
}

static double le_f(const uint8_t *p, size_t n) {
    if (n == 4) {
        uint32_t u = (uint32_t)le_u(p, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    uint64_t u = le_u(p, 8);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static bool is_unsigned(uint32_t t) {
    return t == TS_GGUF_U8 || t == TS_GGUF_U16 || t == TS_GGUF_U32 || t == TS_GGUF_U64;
}
static bool is_signed(uint32_t t) {
    return t == TS_GGUF_I8 || t == TS_GGUF_I16 || t == TS_GGUF_I32 || t == TS_GGUF_I64;
}
static bool is_float(uint32_t t) {
    return t == TS_GGUF_F32 || t == TS_GGUF_F64;
}

uint64_t ts_gguf_arr_u64(const ts_gguf_value *a, uint64_t i) {
    size_t n = ts_gguf_vtype_size(a->arr.elem_type);
    return le_u(a->arr.data + i * n, n);
}

int64_t ts_gguf_arr_i64(const ts_gguf_value *a, uint64_t i) {
    size_t n = ts_gguf_vtype_size(a->arr.elem_type);
    return is_signed(a->arr.elem_type) ? le_i(a->arr.data + i * n, n) : (int64_t)le_u(a->arr.data + i * n, n);
}

double ts_gguf_arr_f64(const ts_gguf_value *a, uint64_t i) {
    size_t n = ts_gguf_vtype_size(a->arr.elem_type);
    return le_f(a->arr.data + i * n, n);
}

/* ---- metadata values ----------------------------------------------------------------------- */

static void free_value(ts_gguf_value *v) {
    if (v->type != TS_GGUF_ARRAY || !v->arr.items) return;
    if (v->arr.elem_type == TS_GGUF_ARRAY)
        for (uint64_t i = 0; i < v->arr.count; i++) free_value(&v->arr.items[i]);
    free(v->arr.items);
    v->arr.items = NULL;
}

/* Reads a value of type t at the cursor. `where` names the key for messages. */
static int read_value(cursor *c, uint32_t t, ts_gguf_value *v, int depth, const char *where) {
    memset(v, 0, sizeof *v);
    v->type = t;
    if (t >= TS_GGUF_VTYPE_COUNT)
        return ts_errf(c->err, c->errlen,
                       "%s: metadata key %s has unknown value type %" PRIu32 " (known: 0..12)", c->name,
                       where, t);
    if (t == TS_GGUF_STRING) return read_str(c, &v->str, where);
    if (t != TS_GGUF_ARRAY) {
        uint8_t b[8];
        size_t n = k_vtype_sizes[t];
        if (read_bytes(c, b, n, where)) return -1;
        if (is_unsigned(t))
            v->u64 = le_u(b, n);
        else if (is_signed(t))
            v->i64 = le_i(b, n);
        else if (is_float(t))
            v->f64 = le_f(b, n);
        else { /* bool */
            if (b[0] > 1)
                return ts_errf(c->err, c->errlen,
                               "%s: metadata key %s is a bool stored as %u (must be 0 or 1)", c->name, where,
                               b[0]);
            v->u64 = b[0];
        }
        return 0;
    }
    if (depth >= TS_GGUF_MAX_ARRAY_DEPTH)
        return ts_errf(c->err, c->errlen, "%s: metadata key %s nests arrays deeper than %d levels", c->name,
                       where, TS_GGUF_MAX_ARRAY_DEPTH);
    uint32_t et;
    uint64_t count;
    if (read_u32(c, &et, where) || read_u64(c, &count, where)) return -1;
    if (et >= TS_GGUF_VTYPE_COUNT)
        return ts_errf(c->err, c->errlen, "%s: metadata key %s is an array of unknown element type %" PRIu32,
                       c->name, where, et);
    v->arr.elem_type = et;
    v->arr.count = count;
    uint64_t left = c->size - c->off;
    if (et != TS_GGUF_STRING && et != TS_GGUF_ARRAY) {
        size_t n = k_vtype_sizes[et];
        if (count > left / n)
            return ts_errf(c->err, c->errlen,
                           "%s: metadata key %s claims %" PRIu64 " %s elements but only %" PRIu64
                           " bytes remain in the file",
                           c->name, where, count, k_vtype_names[et], left);
        v->arr.data = c->p + c->off;
        if (et == TS_GGUF_BOOL)
            for (uint64_t i = 0; i < count; i++)
                if (v->arr.data[i] > 1)
                    return ts_errf(c->err, c->errlen,
                                   "%s: metadata key %s: bool element %" PRIu64 " is %u (must be 0 or 1)",
                                   c->name, where, i, v->arr.data[i]);
        c->off += count * n;
        return 0;
    }
    /* Strings take at least 8 bytes each, nested arrays at least 12: bound the count first. */
    uint64_t min_elem = et == TS_GGUF_STRING ? 8 : 12;
    if (count > left / min_elem)
        return ts_errf(c->err, c->errlen,
                       "%s: metadata key %s claims %" PRIu64 " %s elements but only %" PRIu64
                       " bytes remain in the file",
                       c->name, where, count, k_vtype_names[et], left);
    if (count == 0) return 0;
    v->arr.items = calloc(count, sizeof *v->arr.items);
    if (!v->arr.items)
        return ts_errf(c->err, c->errlen, "%s: out of memory reading metadata key %s (%" PRIu64 " elements)",
                       c->name, where, count);
    for (uint64_t i = 0; i < count; i++)
        if (read_value(c, et, &v->arr.items[i], depth + 1, where)) return -1;
    return 0;
}

/* ---- sorting for lookups and duplicate checks ---------------------------------------------- */

/* glibc's qsort_r passes the ts_gguf through (C11 qsort has no context argument). */
static int cmp_kv(const void *a, const void *b, void *ctx) {
    const ts_gguf *g = ctx;
    return str_cmp(g->kv[*(const int64_t *)a].key, g->kv[*(const int64_t *)b].key);
}
static int cmp_tensor_name(const void *a, const void *b, void *ctx) {
    const ts_gguf *g = ctx;
    return str_cmp(g->tensors[*(const int64_t *)a].name, g->tensors[*(const int64_t *)b].name);
}
static int cmp_tensor_offset(const void *a, const void *b, void *ctx) {
    const ts_gguf *g = ctx;
    uint64_t x = g->tensors[*(const int64_t *)a].offset, y = g->tensors[*(const int64_t *)b].offset;
    return x < y ? -1 : x > y;
}

static int64_t *sorted_index(const ts_gguf *g, int64_t n, int (*cmp)(const void *, const void *, void *)) {
    int64_t *idx = malloc((size_t)(n ? n : 1) * sizeof *idx);
    if (!idx) return NULL;
    for (int64_t i = 0; i < n; i++) idx[i] = i;
    qsort_r(idx, (size_t)n, sizeof *idx, cmp, (void *)g);
    return idx;
}

/* ---- header parse -------------------------------------------------------------------------- */

static int parse_kv(ts_gguf *g, cursor *c, int64_t i) {
    char where[128], ex[80];
    ts_gguf_kv *kv = &g->kv[i];
    snprintf(where, sizeof where, "#%" PRId64, i);
    if (read_str(c, &kv->key, "a metadata key")) return -1;
    if (kv->key.len == 0)
        return ts_errf(c->err, c->errlen, "%s: metadata key #%" PRId64 " is empty", c->name, i);
    if (memchr(kv->key.ptr, 0, kv->key.len))
        return ts_errf(c->err, c->errlen, "%s: metadata key #%" PRId64 " ('%s') contains a NUL byte", c->name,
                       i, excerpt(kv->key, ex, sizeof ex));
    snprintf(where, sizeof where, "'%s'", excerpt(kv->key, ex, sizeof ex));
    uint32_t t;
    if (read_u32(c, &t, where)) return -1;
    return read_value(c, t, &kv->value, 0, where);
}

static int check_alignment(ts_gguf *g, cursor *c) {
    g->alignment = TS_GGUF_DEFAULT_ALIGNMENT;
    const ts_gguf_value *a = ts_gguf_find(g, "general.alignment");
    if (!a) return 0;
    if (a->type != TS_GGUF_U32)
        return ts_errf(c->err, c->errlen, "%s: general.alignment must be a u32, found %s", c->name,
                       ts_gguf_vtype_name(a->type));
    if (a->u64 == 0 || (a->u64 & (a->u64 - 1)))
        return ts_errf(c->err, c->errlen, "%s: general.alignment is %" PRIu64 ", which is not a power of two",
                       c->name, a->u64);
    g->alignment = a->u64;
    return 0;
}

static int parse_tensor_info(ts_gguf *g, cursor *c, int64_t i) {
    char ex[80];
    ts_gguf_tensor *t = &g->tensors[i];
    if (read_str(c, &t->name, "a tensor name")) return -1;
    if (t->name.len == 0)
        return ts_errf(c->err, c->errlen, "%s: tensor #%" PRId64 " has an empty name", c->name, i);
    const char *nm = excerpt(t->name, ex, sizeof ex);
    if (t->name.len > TS_GGUF_MAX_NAME)
        return ts_errf(c->err, c->errlen,
                       "%s: tensor #%" PRId64 " has a name of %" PRIu64 " bytes ('%s'); GGUF "
                       "allows at most %d",
                       c->name, i, t->name.len, nm, TS_GGUF_MAX_NAME);
    if (memchr(t->name.ptr, 0, t->name.len))
        return ts_errf(c->err, c->errlen, "%s: tensor #%" PRId64 " name ('%s') contains a NUL byte", c->name,
                       i, nm);
    char what[112];
    snprintf(what, sizeof what, "tensor '%s'", nm);
    if (read_u32(c, &t->n_dims, what)) return -1;
    if (t->n_dims < 1 || t->n_dims > TS_GGUF_MAX_DIMS)
        return ts_errf(c->err, c->errlen, "%s: tensor '%s' has %" PRIu32 " dimensions (must be 1 to %d)",
                       c->name, nm, t->n_dims, TS_GGUF_MAX_DIMS);
    for (int d = 0; d < TS_GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        if (read_u64(c, &ne, what)) return -1;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return ts_errf(c->err, c->errlen,
                           "%s: tensor '%s' dimension %" PRIu32 " is %" PRIu64
                           " (must be between 1 and 2^63-1)",
                           c->name, nm, d, ne);
        t->ne[d] = (int64_t)ne;
    }
    if (read_u32(c, &t->type, what) || read_u64(c, &t->offset, what)) return -1;

    const ts_type_traits *tt = ts_type_get(t->type);
    if (!tt)
        return ts_errf(c->err, c->errlen, "%s: tensor '%s' has unknown ggml type id %" PRIu32, c->name, nm,
                       t->type);
    int64_t nel = 1;
    for (int d = 0; d < TS_GGUF_MAX_DIMS; d++)
        if (__builtin_mul_overflow(nel, t->ne[d], &nel))
            return ts_errf(c->err, c->errlen,
                           "%s: tensor '%s' has too many elements (the product of its dimensions "
                           "overflows 64 bits)",
                           c->name, nm);
    t->nelements = nel;
    if (t->ne[0] % tt->block_size)
        return ts_errf(c->err, c->errlen,
                       "%s: tensor '%s' of type %s has rows of %" PRId64 " elements, not a multiple of the "
                       "type's block size %" PRId64,
                       c->name, nm, tt->name, t->ne[0], tt->block_size);
    uint64_t bytes;
    bool overflow =
        __builtin_mul_overflow((uint64_t)(t->ne[0] / tt->block_size), (uint64_t)tt->type_size, &bytes);
    for (int d = 1; d < TS_GGUF_MAX_DIMS; d++)
        overflow |= __builtin_mul_overflow(bytes, (uint64_t)t->ne[d], &bytes);
    if (overflow)
        return ts_errf(c->err, c->errlen,
                       "%s: tensor '%s' (%s, %" PRId64 " elements) has a byte size that overflows "
                       "64 bits",
                       c->name, nm, tt->name, nel);
    if (bytes > g->size)
        return ts_errf(c->err, c->errlen,
                       "%s: tensor '%s' (%s, %" PRId64 " elements) needs %" PRIu64 " bytes of data, "
                       "more than the whole file holds (%" PRIu64 " bytes)",
                       c->name, nm, tt->name, nel, bytes, g->size);
    t->nbytes = bytes;
    return 0;
}

static int check_tensor_data(ts_gguf *g, cursor *c) {
    char ex[80], ex2[80];
    uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        ts_gguf_tensor *t = &g->tensors[i];
        const char *nm = excerpt(t->name, ex, sizeof ex);
        if (t->offset % g->alignment)
            return ts_errf(c->err, c->errlen,
                           "%s: tensor '%s' data offset %" PRIu64
                           " is not a multiple of the alignment %" PRIu64,
                           c->name, nm, t->offset, g->alignment);
        if (t->offset > data_size || t->nbytes > data_size - t->offset)
            return ts_errf(
                c->err, c->errlen,
                "%s: tensor '%s' data (%" PRIu64 " bytes at offset %" PRIu64
                " of the data section) runs past the end of the file: the data section holds %" PRIu64
                " bytes (file truncated?)",
                c->name, nm, t->nbytes, t->offset, data_size);
        t->data = g->base + g->data_offset + t->offset;
    }
    int64_t *by_off = sorted_index(g, g->n_tensors, cmp_tensor_offset);
    if (!by_off) return ts_errf(c->err, c->errlen, "%s: out of memory", c->name);
    /* Writers lay tensors out back to back, each padded to the alignment: a tensor followed by a
     * whole alignment unit or more of unused bytes has a type or shape that does not describe its
     * data (an edited header: an F32 norm relabelled F16 would read half its bytes as garbage). */
    int rc = 0;
    for (int64_t k = 0; k < g->n_tensors && !rc; k++) {
        const ts_gguf_tensor *a = &g->tensors[by_off[k]],
                             *b = k + 1 < g->n_tensors ? &g->tensors[by_off[k + 1]] : NULL;
        uint64_t end = a->offset + a->nbytes, next = b ? b->offset : data_size;
        if (b && end > next)
            rc = ts_errf(c->err, c->errlen,
                         "%s: tensors '%s' and '%s' overlap in the data section (offsets %" PRIu64
                         " and %" PRIu64 ")",
                         c->name, excerpt(a->name, ex, sizeof ex), excerpt(b->name, ex2, sizeof ex2),
                         a->offset, b->offset);
        else if (next - end >= g->alignment)
            rc = ts_errf(
                c->err, c->errlen,
                "%s: tensor '%s' (%s, %" PRIu64 " bytes) is followed by %" PRIu64
                " unused bytes before %s%s%s: its type or shape does not match the data laid out for it "
                "(edited header?)",
                c->name, excerpt(a->name, ex, sizeof ex), ts_type_name(a->type), a->nbytes, next - end,
                b ? "tensor '" : "the end of the file", b ? excerpt(b->name, ex2, sizeof ex2) : "",
                b ? "'" : "");
    }
    free(by_off);
    return rc;
}

static int parse(ts_gguf *g, char *err, size_t errlen) {
    cursor c = {g->base, g->size, 0, g->path, err, errlen};
    char magic[4];
    if (g->size < 4 || memcmp(g->base, TS_GGUF_MAGIC, 4) != 0) {
        if (g->size < 4)
            return ts_errf(err, errlen, "%s is not a GGUF file: it is only %" PRIu64 " bytes long", g->path,
                           g->size);
        return ts_errf(err, errlen, "%s is not a GGUF file: it does not start with the magic bytes \"GGUF\"",
                       g->path);
    }
    if (read_bytes(&c, magic, 4, "the magic") || read_u32(&c, &g->version, "the version")) return -1;
    if (g->version == 1)
        return ts_errf(err, errlen,
                       "%s is a GGUF version 1 file, which is not supported (versions 2 and 3 are); "
                       "convert it again with a current converter",
                       g->path);
    if (g->version == 0x02000000u || g->version == 0x03000000u)
        return ts_errf(err, errlen, "%s is a big-endian GGUF file, which is not supported", g->path);
    if (g->version != 2 && g->version != 3)
        return ts_errf(err, errlen,
                       "%s has GGUF version %" PRIu32 ", which is not supported (versions 2 and 3 are)",
                       g->path, g->version);
    uint64_t n_tensors, n_kv;
    if (read_u64(&c, &n_tensors, "the tensor count") || read_u64(&c, &n_kv, "the metadata count")) return -1;
    uint64_t left = c.size - c.off;
    /* A metadata entry takes at least 13 bytes (key length, type, one byte); a tensor info 32. */
    if (n_kv > left / 13)
        return ts_errf(err, errlen,
                       "%s claims %" PRIu64 " metadata entries, impossible in the %" PRIu64
                       " bytes that follow the header (file truncated?)",
                       g->path, n_kv, left);
    if (n_tensors > left / 32)
        return ts_errf(err, errlen,
                       "%s claims %" PRIu64 " tensors, impossible in the %" PRIu64
                       " bytes that follow the header (file truncated?)",
                       g->path, n_tensors, left);
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors)
        return ts_errf(err, errlen, "%s: out of memory for the header tables", g->path);

    for (int64_t i = 0; i < g->n_kv; i++)
        if (parse_kv(g, &c, i)) return -1;
    g->kv_sorted = sorted_index(g, g->n_kv, cmp_kv);
    if (!g->kv_sorted) return ts_errf(err, errlen, "%s: out of memory", g->path);
    for (int64_t k = 1; k < g->n_kv; k++) {
        ts_gguf_str a = g->kv[g->kv_sorted[k - 1]].key, b = g->kv[g->kv_sorted[k]].key;
        char ex[80];
        if (str_cmp(a, b) == 0)
            return ts_errf(err, errlen, "%s: metadata key '%s' appears more than once", g->path,
                           excerpt(a, ex, sizeof ex));
    }
    if (check_alignment(g, &c)) return -1;

    for (int64_t i = 0; i < g->n_tensors; i++)
        if (parse_tensor_info(g, &c, i)) return -1;
    g->tensor_sorted = sorted_index(g, g->n_tensors, cmp_tensor_name);
    if (!g->tensor_sorted) return ts_errf(err, errlen, "%s: out of memory", g->path);
    for (int64_t k = 1; k < g->n_tensors; k++) {
        ts_gguf_str a = g->tensors[g->tensor_sorted[k - 1]].name, b = g->tensors[g->tensor_sorted[k]].name;
        char ex[80];
        if (str_cmp(a, b) == 0)
            return ts_errf(err, errlen, "%s: tensor name '%s' appears more than once", g->path,
                           excerpt(a, ex, sizeof ex));
    }
    g->data_offset = (c.off + g->alignment - 1) / g->alignment * g->alignment; /* c.off < 2^63: no overflow */
    return check_tensor_data(g, &c);
}

/* ---- open / close -------------------------------------------------------------------------- */

static int open_common(ts_gguf *g, char *err, size_t errlen, ts_gguf **out) {
    if (parse(g, err, errlen)) {
        ts_gguf_close(g);
        return -1;
    }
    *out = g;
    return 0;
}

int ts_gguf_open_buffer(const void *data, size_t size, const char *name, ts_gguf **out, char *err,
                        size_t errlen) {
    *out = NULL;
    ts_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(name ? name : "buffer"))) {
        free(g);
        return ts_errf(err, errlen, "out of memory opening %s", name ? name : "buffer");
    }
    g->base = data;
    g->size = size;
    return open_common(g, err, errlen, out);
}

int ts_gguf_open(const char *path, ts_gguf **out, char *err, size_t errlen) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ts_errf(err, errlen, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ts_errf(err, errlen, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ts_errf(err, errlen, "%s is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return ts_errf(err, errlen, "%s is empty, not a GGUF file", path);
    }
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (m == MAP_FAILED)
        return ts_errf(err, errlen, "cannot map %s (%lld bytes): %s", path, (long long)st.st_size,
                       strerror(e));
    ts_gguf *g = calloc(1, sizeof *g);
    if (!g || !(g->path = strdup(path))) {
        free(g);
        munmap(m, (size_t)st.st_size);
        return ts_errf(err, errlen, "out of memory opening %s", path);
    }
    g->base = m;
    g->size = (uint64_t)st.st_size;
    g->mapped = true;
    return open_common(g, err, errlen, out);
}

void ts_gguf_close(ts_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free_value(&g->kv[i].value);
    free(g->kv);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->tensor_sorted);
    if (g->mapped) munmap((void *)g->base, g->size);
    free(g->path);
    free(g);
}

/* ---- accessors ----------------------------------------------------------------------------- */

uint32_t ts_gguf_version(const ts_gguf *g) {
    return g->version;
}
uint64_t ts_gguf_alignment(const ts_gguf *g) {
    return g->alignment;
}
uint64_t ts_gguf_file_size(const ts_gguf *g) {
    return g->size;
}
uint64_t ts_gguf_data_offset(const ts_gguf *g) {
    return g->data_offset;
}
const char *ts_gguf_path(const ts_gguf *g) {
    return g->path;
}
int64_t ts_gguf_kv_count(const ts_gguf *g) {
    return g->n_kv;
}
int64_t ts_gguf_tensor_count(const ts_gguf *g) {
    return g->n_tensors;
}

const ts_gguf_kv *ts_gguf_kv_at(const ts_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_kv ? &g->kv[i] : NULL;
}

const ts_gguf_tensor *ts_gguf_tensor_at(const ts_gguf *g, int64_t i) {
    return i >= 0 && i < g->n_tensors ? &g->tensors[i] : NULL;
}

/* Binary search of a sorted index; get(i) gives the name of item i. */
#define TS_BSEARCH(sorted, n, NAME_OF, key, out)                                                             \
    do {                                                                                                     \
        ts_gguf_str want = {(key), strlen(key)};                                                             \
        int64_t lo = 0, hi = (n)-1;                                                                          \
        (out) = -1;                                                                                          \
        while (lo <= hi) {                                                                                   \
            int64_t mid = lo + (hi - lo) / 2;                                                                \
            int r = str_cmp(NAME_OF(sorted[mid]), want);                                                     \
            if (r == 0) {                                                                                    \
                (out) = sorted[mid];                                                                         \
                break;                                                                                       \
            }                                                                                                \
            if (r < 0)                                                                                       \
                lo = mid + 1;                                                                                \
            else                                                                                             \
                hi = mid - 1;                                                                                \
        }                                                                                                    \
    } while (0)

const ts_gguf_value *ts_gguf_find(const ts_gguf *g, const char *key) {
    int64_t i;
#define KV_NAME(i) g->kv[i].key
    TS_BSEARCH(g->kv_sorted, g->n_kv, KV_NAME, key, i);
#undef KV_NAME
    return i >= 0 ? &g->kv[i].value : NULL;
}

const ts_gguf_tensor *ts_gguf_find_tensor(const ts_gguf *g, const char *name) {
    int64_t i;
#define T_NAME(i) g->tensors[i].name
    TS_BSEARCH(g->tensor_sorted, g->n_tensors, T_NAME, name, i);
#undef T_NAME
    return i >= 0 ? &g->tensors[i] : NULL;
}

/* ---- typed getters ------------------------------------------------------------------------- */

bool ts_gguf_value_as_i64(const ts_gguf_value *v, int64_t *out) {
    if (is_signed(v->type)) {
        *out = v->i64;
        return true;
    }
    if (is_unsigned(v->type) && v->u64 <= (uint64_t)INT64_MAX) {
        *out = (int64_t)v->u64;
        return true;
    }
    return false;
}

static const ts_gguf_value *find_or_err(const ts_gguf *g, const char *key, char *err, size_t errlen) {
    const ts_gguf_value *v = ts_gguf_find(g, key);
    if (!v) ts_errf(err, errlen, "%s: metadata key '%s' is missing", g->path, key);
    return v;
}

static int get_uint(const ts_gguf *g, const char *key, uint64_t max, uint64_t *out, char *err,
                    size_t errlen) {
    const ts_gguf_value *v = find_or_err(g, key, err, errlen);
    if (!v) return -1;
    if (is_unsigned(v->type))
        *out = v->u64;
    else if (is_signed(v->type) && v->i64 >= 0)
        *out = (uint64_t)v->i64;
    else if (is_signed(v->type))
        return ts_errf(err, errlen, "%s: metadata key '%s' is %" PRId64 ", expected a non-negative integer",
                       g->path, key, v->i64);
    else
        return ts_errf(err, errlen, "%s: metadata key '%s' is a %s, expected an unsigned integer", g->path,
                       key, ts_gguf_vtype_name(v->type));
    if (*out > max)
        return ts_errf(err, errlen, "%s: metadata key '%s' is %" PRIu64 ", larger than the maximum %" PRIu64,
                       g->path, key, *out, max);
    return 0;
}

int ts_gguf_get_u32(const ts_gguf *g, const char *key, uint32_t *v, char *err, size_t errlen) {
    uint64_t x = 0;
    if (get_uint(g, key, UINT32_MAX, &x, err, errlen)) return -1;
    *v = (uint32_t)x;
    return 0;
}

int ts_gguf_get_u64(const ts_gguf *g, const char *key, uint64_t *v, char *err, size_t errlen) {
    return get_uint(g, key, UINT64_MAX, v, err, errlen);
}

int ts_gguf_get_i64(const ts_gguf *g, const char *key, int64_t *v, char *err, size_t errlen) {
    const ts_gguf_value *x = find_or_err(g, key, err, errlen);
    if (!x) return -1;
    if (!ts_gguf_value_as_i64(x, v))
        return ts_errf(err, errlen,
                       "%s: metadata key '%s' is a %s, expected an integer that fits in 64 signed bits",
                       g->path, key, ts_gguf_vtype_name(x->type));
    return 0;
}

int ts_gguf_get_f32(const ts_gguf *g, const char *key, float *v, char *err, size_t errlen) {
    const ts_gguf_value *x = find_or_err(g, key, err, errlen);
    if (!x) return -1;
    if (!is_float(x->type))
        return ts_errf(err, errlen, "%s: metadata key '%s' is a %s, expected a float", g->path, key,
                       ts_gguf_vtype_name(x->type));
    *v = (float)x->f64;
    return 0;
}

int ts_gguf_get_bool(const ts_gguf *g, const char *key, bool *v, char *err, size_t errlen) {
    const ts_gguf_value *x = find_or_err(g, key, err, errlen);
    if (!x) return -1;
    if (x->type != TS_GGUF_BOOL)
        return ts_errf(err, errlen, "%s: metadata key '%s' is a %s, expected a bool", g->path, key,
                       ts_gguf_vtype_name(x->type));
    *v = x->u64 != 0;
    return 0;
}

int ts_gguf_get_str(const ts_gguf *g, const char *key, char *buf, size_t buflen, char *err, size_t errlen) {
    const ts_gguf_value *x = find_or_err(g, key, err, errlen);
    if (!x) return -1;
    if (x->type != TS_GGUF_STRING)
        return ts_errf(err, errlen, "%s: metadata key '%s' is a %s, expected a string", g->path, key,
                       ts_gguf_vtype_name(x->type));
    if (x->str.len >= buflen)
        return ts_errf(err, errlen, "%s: metadata key '%s' is a string of %" PRIu64 " bytes, longer than %zu",
                       g->path, key, x->str.len, buflen ? buflen - 1 : 0);
    memcpy(buf, x->str.ptr, x->str.len);
    buf[x->str.len] = 0;
    return 0;
}

int ts_gguf_get_arr(const ts_gguf *g, const char *key, int elem_type, const ts_gguf_value **arr, char *err,
                    size_t errlen) {
    const ts_gguf_value *x = find_or_err(g, key, err, errlen);
    if (!x) return -1;
    if (x->type != TS_GGUF_ARRAY)
        return ts_errf(err, errlen, "%s: metadata key '%s' is a %s, expected an array", g->path, key,
                       ts_gguf_vtype_name(x->type));
    if (elem_type >= 0 && x->arr.elem_type != (uint32_t)elem_type)
        return ts_errf(err, errlen, "%s: metadata key '%s' is an array of %s, expected an array of %s",
                       g->path, key, ts_gguf_vtype_name(x->arr.elem_type),
                       ts_gguf_vtype_name((uint32_t)elem_type));
    *arr = x;
    return 0;
}
