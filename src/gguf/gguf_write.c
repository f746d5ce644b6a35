/* GGUF writer (version 3, little-endian), streaming tensor data.
 *
 * Metadata entries are serialized into byte buffers as they are set; tensors are declared with
 * their shapes so every data offset is known before the header is written. The data then streams
 * in declaration order with zero padding to the alignment after each tensor, as ggml lays it out.
 * The file is written to PATH.tmp and renamed on success, so a failed write leaves no half file.
 * Skipped data becomes a hole (sparse on disk) that reads back as zeros. */
#include "gguf/gguf.h"

#include "common/error.h"
#include "quant/quant.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct buf {
    uint8_t *p;
    size_t len, cap;
} buf;

typedef struct wkv {
    char *key;
    buf bytes; /* type + value, serialized */
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[TS_GGUF_MAX_DIMS];
    uint64_t nbytes;
    uint64_t offset; /* inside the data section */
} wtensor;

struct ts_gguf_writer {
    uint32_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    /* data phase */
    int fd;
    char *path, *tmp_path;
    size_t cur;        /* tensor being written */
    uint64_t cur_done; /* bytes of it written so far */
    uint64_t pos;      /* file position */
    bool failed;
    char err[512];
};

static int fail(ts_gguf_writer *w, const char *fmt, ...) TS_PRINTF(2, 3);
static int fail(ts_gguf_writer *w, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->failed = true;
    return -1;
}

static int buf_put(ts_gguf_writer *w, buf *b, const void *data, size_t n) {
    if (n == 0) return 0; /* data may be NULL for an empty array */
    if (b->cap - b->len < n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->len < n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) return fail(w, "out of memory building GGUF metadata (%zu bytes)", cap);
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

static int put_u32(ts_gguf_writer *w, buf *b, uint32_t v) {
    return buf_put(w, b, &v, 4);
}
static int put_u64(ts_gguf_writer *w, buf *b, uint64_t v) {
    return buf_put(w, b, &v, 8);
}
static int put_str(ts_gguf_writer *w, buf *b, const char *s, size_t n) {
    return put_u64(w, b, n) || buf_put(w, b, s, n);
}

ts_gguf_writer *ts_gguf_writer_new(uint32_t alignment, char *err, size_t errlen) {
    if (alignment == 0 || (alignment & (alignment - 1))) {
        ts_errf(err, errlen, "GGUF alignment %" PRIu32 " is not a power of two", alignment);
        return NULL;
    }
    ts_gguf_writer *w = calloc(1, sizeof *w);
    if (!w) {
        ts_errf(err, errlen, "out of memory creating a GGUF writer");
        return NULL;
    }
    w->alignment = alignment;
    w->fd = -1;
    if (alignment != TS_GGUF_DEFAULT_ALIGNMENT && ts_gguf_writer_set_u32(w, "general.alignment", alignment)) {
        ts_errf(err, errlen, "%s", w->err);
        ts_gguf_writer_free(w);
        return NULL;
    }
    return w;
}

void ts_gguf_writer_free(ts_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) free(w->kv[i].key), free(w->kv[i].bytes.p);
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    if (w->fd >= 0) {
        close(w->fd);
        unlink(w->tmp_path);
    }
    free(w->path);
    free(w->tmp_path);
    free(w);
}

const char *ts_gguf_writer_error(const ts_gguf_writer *w) {
    return w->err;
}

/* Returns the entry for key, emptied (a key set twice keeps the last value), or NULL on failure. */
static buf *kv_slot(ts_gguf_writer *w, const char *key) {
    if (w->failed) return NULL;
    if (w->fd >= 0) return fail(w, "metadata key '%s' set after the data began", key), NULL;
    if (!key || !*key) return fail(w, "a metadata key is empty"), NULL;
    for (size_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->kv[i].key, key) == 0) {
            w->kv[i].bytes.len = 0;
            return &w->kv[i].bytes;
        }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? 2 * w->cap_kv : 32;
        wkv *kv = realloc(w->kv, cap * sizeof *kv);
        if (!kv) return fail(w, "out of memory adding metadata key '%s'", key), NULL;
        w->kv = kv, w->cap_kv = cap;
    }
    wkv *e = &w->kv[w->n_kv];
    memset(e, 0, sizeof *e);
    if (!(e->key = strdup(key))) return fail(w, "out of memory adding metadata key '%s'", key), NULL;
    w->n_kv++;
    return &e->bytes;
}

static int set_scalar(ts_gguf_writer *w, const char *key, uint32_t type, const void *v) {
    buf *b = kv_slot(w, key);
    return !b || put_u32(w, b, type) || buf_put(w, b, v, ts_gguf_vtype_size(type)) ? -1 : 0;
}

int ts_gguf_writer_set_u8(ts_gguf_writer *w, const char *k, uint8_t v) {
    return set_scalar(w, k, TS_GGUF_U8, &v);
}
int ts_gguf_writer_set_i8(ts_gguf_writer *w, const char *k, int8_t v) {
    return set_scalar(w, k, TS_GGUF_I8, &v);
}
int ts_gguf_writer_set_u16(ts_gguf_writer *w, const char *k, uint16_t v) {
    return set_scalar(w, k, TS_GGUF_U16, &v);
}
int ts_gguf_writer_set_i16(ts_gguf_writer *w, const char *k, int16_t v) {
    return set_scalar(w, k, TS_GGUF_I16, &v);
}
int ts_gguf_writer_set_u32(ts_gguf_writer *w, const char *k, uint32_t v) {
    return set_scalar(w, k, TS_GGUF_U32, &v);
}
int ts_gguf_writer_set_i32(ts_gguf_writer *w, const char *k, int32_t v) {
    return set_scalar(w, k, TS_GGUF_I32, &v);
}
int ts_gguf_writer_set_u64(ts_gguf_writer *w, const char *k, uint64_t v) {
    return set_scalar(w, k, TS_GGUF_U64, &v);
}
int ts_gguf_writer_set_i64(ts_gguf_writer *w, const char *k, int64_t v) {
    return set_scalar(w, k, TS_GGUF_I64, &v);
}
int ts_gguf_writer_set_f32(ts_gguf_writer *w, const char *k, float v) {
    return set_scalar(w, k, TS_GGUF_F32, &v);
}
int ts_gguf_writer_set_f64(ts_gguf_writer *w, const char *k, double v) {
    return set_scalar(w, k, TS_GGUF_F64, &v);
}
int ts_gguf_writer_set_bool(ts_gguf_writer *w, const char *k, bool v) {
    uint8_t b = v;
    return set_scalar(w, k, TS_GGUF_BOOL, &b);
}

int ts_gguf_writer_set_str(ts_gguf_writer *w, const char *key, const char *v) {
    buf *b = kv_slot(w, key);
    return !b || put_u32(w, b, TS_GGUF_STRING) || put_str(w, b, v, strlen(v)) ? -1 : 0;
}

int ts_gguf_writer_set_arr(ts_gguf_writer *w, const char *key, uint32_t et, const void *data,
                           uint64_t count) {
    size_t n = ts_gguf_vtype_size(et);
    if (n == 0)
        return fail(w, "metadata key '%s': arrays of %s need their own setter", key, ts_gguf_vtype_name(et));
    buf *b = kv_slot(w, key);
    return !b || put_u32(w, b, TS_GGUF_ARRAY) || put_u32(w, b, et) || put_u64(w, b, count) ||
                   buf_put(w, b, data, (size_t)count * n)
               ? -1
               : 0;
}

int ts_gguf_writer_set_arr_str(ts_gguf_writer *w, const char *key, const char *const *v, uint64_t count) {
    buf *b = kv_slot(w, key);
    if (!b || put_u32(w, b, TS_GGUF_ARRAY) || put_u32(w, b, TS_GGUF_STRING) || put_u64(w, b, count))
        return -1;
    for (uint64_t i = 0; i < count; i++)
        if (put_str(w, b, v[i], strlen(v[i]))) return -1;
    return 0;
}

/* Serializes the payload of v (without its type tag). */
static int put_value(ts_gguf_writer *w, buf *b, const ts_gguf_value *v) {
    switch (v->type) {
    case TS_GGUF_STRING:
        return put_str(w, b, v->str.ptr, v->str.len);
    case TS_GGUF_ARRAY: {
        uint32_t et = v->arr.elem_type;
        if (put_u32(w, b, et) || put_u64(w, b, v->arr.count)) return -1;
        if (et != TS_GGUF_STRING && et != TS_GGUF_ARRAY)
            return buf_put(w, b, v->arr.data, (size_t)v->arr.count * ts_gguf_vtype_size(et));
        for (uint64_t i = 0; i < v->arr.count; i++)
            if (put_value(w, b, &v->arr.items[i])) return -1;
        return 0;
    }
    case TS_GGUF_F32: {
        float f = (float)v->f64;
        return buf_put(w, b, &f, 4);
    }
    case TS_GGUF_F64:
        return buf_put(w, b, &v->f64, 8);
    default: /* integers and bool: the low bytes of the 64-bit value, little-endian */
        return buf_put(w, b, &v->u64, ts_gguf_vtype_size(v->type));
    }
}

int ts_gguf_writer_set_value(ts_gguf_writer *w, const char *key, const ts_gguf_value *v) {
    if (v->type >= TS_GGUF_VTYPE_COUNT)
        return fail(w, "metadata key '%s' has unknown type %" PRIu32, key, v->type);
    buf *b = kv_slot(w, key);
    return !b || put_u32(w, b, v->type) || put_value(w, b, v) ? -1 : 0;
}

int ts_gguf_writer_add_tensor(ts_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const int64_t *ne) {
    if (w->failed) return -1;
    if (w->fd >= 0) return fail(w, "tensor '%s' declared after the data began", name);
    if (!name || !*name) return fail(w, "a tensor name is empty");
    const ts_type_traits *tt = ts_type_get(type);
    if (!tt) return fail(w, "tensor '%s' has unknown ggml type id %" PRIu32, name, type);
    if (n_dims < 1 || n_dims > TS_GGUF_MAX_DIMS)
        return fail(w, "tensor '%s' has %" PRIu32 " dimensions (must be 1 to 4)", name, n_dims);
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) return fail(w, "tensor '%s' is declared twice", name);
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] <= 0)
            return fail(w, "tensor '%s' dimension %" PRIu32 " is %" PRId64 " (must be >= 1)", name, d, ne[d]);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tt->block_size)
        return fail(w, "tensor '%s' of type %s has rows of %" PRId64 " elements, not a multiple of %" PRId64,
                    name, tt->name, t.ne[0], tt->block_size);
    bool overflow =
        __builtin_mul_overflow((uint64_t)(t.ne[0] / tt->block_size), (uint64_t)tt->type_size, &t.nbytes);
    for (int d = 1; d < TS_GGUF_MAX_DIMS; d++)
        overflow |= __builtin_mul_overflow(t.nbytes, (uint64_t)t.ne[d], &t.nbytes);
    if (overflow) return fail(w, "tensor '%s' is too large (its byte size overflows 64 bits)", name);
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *p = realloc(w->t, cap * sizeof *p);
        if (!p) return fail(w, "out of memory declaring tensor '%s'", name);
        w->t = p, w->cap_t = cap;
    }
    if (!(t.name = strdup(name))) return fail(w, "out of memory declaring tensor '%s'", name);
    uint64_t end = 0;
    if (w->n_t) {
        const wtensor *prev = &w->t[w->n_t - 1];
        end = (prev->offset + prev->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    t.offset = end;
    w->t[w->n_t++] = t;
    return 0;
}

static int write_all(ts_gguf_writer *w, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        ssize_t k = write(w->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return fail(w, "cannot write %s: %s", w->tmp_path, k < 0 ? strerror(errno) : "short write");
        p += k, n -= (size_t)k, w->pos += (uint64_t)k;
    }
    return 0;
}

static int write_zeros(ts_gguf_writer *w, uint64_t n) {
    static const uint8_t zeros[256];
    while (n) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        if (write_all(w, zeros, k)) return -1;
        n -= k;
    }
    return 0;
}

/* The header: magic, counts, metadata and the tensor table, into h (the caller frees h->p). */
static int put_header(ts_gguf_writer *w, buf *h) {
    int rc = buf_put(w, h, TS_GGUF_MAGIC, 4) || put_u32(w, h, 3) || put_u64(w, h, w->n_t) ||
             put_u64(w, h, w->n_kv);
    for (size_t i = 0; !rc && i < w->n_kv; i++)
        rc = put_str(w, h, w->kv[i].key, strlen(w->kv[i].key)) ||
             buf_put(w, h, w->kv[i].bytes.p, w->kv[i].bytes.len);
    for (size_t i = 0; !rc && i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        rc = put_str(w, h, t->name, strlen(t->name)) || put_u32(w, h, t->n_dims);
        for (uint32_t d = 0; !rc && d < t->n_dims; d++) rc = put_u64(w, h, (uint64_t)t->ne[d]);
        rc = rc || put_u32(w, h, t->type) || put_u64(w, h, t->offset);
    }
    return rc;
}

int ts_gguf_writer_to_buffer(ts_gguf_writer *w, void **data, size_t *size) {
    *data = NULL, *size = 0;
    if (w->failed) return -1;
    if (w->n_t) return fail(w, "a GGUF in memory holds metadata only, and %zu tensors were declared", w->n_t);
    buf h = {0};
    if (put_header(w, &h)) {
        free(h.p);
        return -1;
    }
    *data = h.p, *size = h.len;
    return 0;
}

int ts_gguf_writer_begin_data(ts_gguf_writer *w, const char *path) {
    if (w->failed) return -1;
    if (w->fd >= 0) return fail(w, "the data of %s has already begun", w->path);
    size_t plen = strlen(path);
    if (!(w->path = strdup(path)) || !(w->tmp_path = malloc(plen + 5)))
        return fail(w, "out of memory opening %s", path);
    memcpy(w->tmp_path, path, plen);
    memcpy(w->tmp_path + plen, ".tmp", 5);
    w->fd = open(w->tmp_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (w->fd < 0) return fail(w, "cannot create %s: %s", w->tmp_path, strerror(errno));

    buf h = {0};
    int rc = put_header(w, &h);
    if (!rc) rc = write_all(w, h.p, h.len);
    free(h.p);
    if (!rc) rc = write_zeros(w, (w->alignment - w->pos % w->alignment) % w->alignment);
    w->cur = 0, w->cur_done = 0;
    return rc ? -1 : 0;
}

/* Advances over n bytes of the current tensors: writes them from data, or leaves a hole if data is NULL. */
static int advance(ts_gguf_writer *w, const uint8_t *data, uint64_t n) {
    if (w->failed) return -1;
    if (w->fd < 0) return fail(w, "tensor data given before ts_gguf_writer_begin_data");
    while (n) {
        if (w->cur >= w->n_t)
            return fail(w, "%s: %" PRIu64 " bytes of tensor data given beyond the last tensor", w->path, n);
        wtensor *t = &w->t[w->cur];
        uint64_t k = t->nbytes - w->cur_done < n ? t->nbytes - w->cur_done : n;
        if (data) {
            if (write_all(w, data, (size_t)k)) return -1;
            data += k;
        } else {
            if (lseek(w->fd, (off_t)k, SEEK_CUR) < 0)
                return fail(w, "cannot seek in %s: %s", w->tmp_path, strerror(errno));
            w->pos += k;
        }
        n -= k;
        w->cur_done += k;
        if (w->cur_done == t->nbytes) {
            if (write_zeros(w, (w->alignment - w->pos % w->alignment) % w->alignment)) return -1;
            w->cur++, w->cur_done = 0;
        }
    }
    return 0;
}

int ts_gguf_writer_write(ts_gguf_writer *w, const void *data, size_t nbytes) {
    return advance(w, data, nbytes);
}
int ts_gguf_writer_skip(ts_gguf_writer *w, uint64_t nbytes) {
    return advance(w, NULL, nbytes);
}

int ts_gguf_writer_finish(ts_gguf_writer *w) {
    if (w->failed) return -1;
    if (w->fd < 0) return fail(w, "ts_gguf_writer_finish called before ts_gguf_writer_begin_data");
    if (w->cur < w->n_t)
        return fail(w, "%s: tensor '%s' got %" PRIu64 " of its %" PRIu64 " bytes", w->path, w->t[w->cur].name,
                    w->cur_done, w->t[w->cur].nbytes);
    /* A trailing skip leaves the file short of its holes: set the size explicitly. */
    if (ftruncate(w->fd, (off_t)w->pos) != 0)
        return fail(w, "cannot size %s: %s", w->tmp_path, strerror(errno));
    if (close(w->fd) != 0) {
        w->fd = -1;
        unlink(w->tmp_path);
        return fail(w, "cannot close %s: %s", w->tmp_path, strerror(errno));
    }
    w->fd = -1;
    if (rename(w->tmp_path, w->path) != 0) {
        unlink(w->tmp_path);
        return fail(w, "cannot rename %s to %s: %s", w->tmp_path, w->path, strerror(errno));
    }
    return 0;
}
